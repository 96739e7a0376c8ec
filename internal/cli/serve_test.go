package cli

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/transport/streamhttp"
)

func TestServeUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want []string // each must be in the error message
	}{
		{"no upstream", []string{"serve"}, []string{"no upstream command", "mcp-idempotent serve -- node server.js"}},
		{"two upstreams", []string{"serve", "--upstream", "http://127.0.0.1:1/mcp", "--", "/bin/cat"}, []string{"--upstream"}},
		{"upstream not http", []string{"serve", "--upstream", "ftp://host/mcp"}, []string{"--upstream", `"ftp://host/mcp"`, "http://"}},
		{"upstream without a host", []string{"serve", "--upstream", "http://"}, []string{"--upstream", "http://"}},
		{"bad listen", []string{"serve", "--listen", "8080", "--", "/bin/cat"}, []string{"--listen", `"8080"`}},
		{"listen port out of range", []string{"serve", "--listen", "127.0.0.1:99999", "--", "/bin/cat"}, []string{"--listen", `"127.0.0.1:99999"`}},
		{"relative path", []string{"serve", "--path", "mcp", "--", "/bin/cat"}, []string{"--path", `"mcp"`}},
		{"path with a query", []string{"serve", "--path", "/a?b", "--", "/bin/cat"}, []string{"--path", `"/a?b"`}},
		{"path with a fragment", []string{"serve", "--path", "/a#b", "--", "/bin/cat"}, []string{"--path", `"/a#b"`}},
		{"path with a line break", []string{"serve", "--path", "/mcp\n", "--", "/bin/cat"}, []string{"--path", `"/mcp\n"`, "control character"}},
		{"path with a tab", []string{"serve", "--path", "/m\tcp", "--", "/bin/cat"}, []string{"--path", "control character"}},
		{"no sessions", []string{"serve", "--max-sessions", "0", "--", "/bin/cat"}, []string{"--max-sessions"}},
		{"no body reads", []string{"serve", "--max-body-reads", "0", "--", "/bin/cat"}, []string{"--max-body-reads", "must be positive"}},
		{"no idle timeout", []string{"serve", "--idle-timeout", "0s", "--", "/bin/cat"}, []string{"--idle-timeout"}},
		{"idle timeout too short", []string{"serve", "--idle-timeout", "1ns", "--", "/bin/cat"}, []string{"--idle-timeout", "1ns", "at least 1s"}},
		{"negative idle timeout", []string{"serve", "--idle-timeout", "-1m", "--", "/bin/cat"}, []string{"--idle-timeout", "-1m", "at least 1s"}},
		{"negative keep-alive", []string{"serve", "--keep-alive", "-5s", "--", "/bin/cat"}, []string{"--keep-alive", "-5s", "must not be negative"}},
		{"keep-alive too short", []string{"serve", "--keep-alive", "10ms", "--", "/bin/cat"}, []string{"--keep-alive", "10ms", "at least 1s"}},
		{"keep-alive without a unit", []string{"serve", "--keep-alive", "30", "--", "/bin/cat"}, []string{"--keep-alive", `"30"`}},
		{"unknown flag", []string{"serve", "--nope", "--", "/bin/cat"}, []string{"nope"}},
		{"upstream is serve itself", []string{"serve", "--listen", "127.0.0.1:18556", "--upstream", "http://127.0.0.1:18556/mcp"}, []string{"--upstream http://127.0.0.1:18556/mcp", "own endpoint", "--listen 127.0.0.1:18556"}},
		{"upstream is serve itself on every address", []string{"serve", "--listen", ":18556", "--path", "/x", "--upstream", "http://localhost:18556/x"}, []string{"--upstream", "own endpoint"}},
		// --metrics listens first, and --listen alone would be named.
		{"metrics on the listen address", []string{"serve", "--listen", "127.0.0.1:18555", "--metrics", "127.0.0.1:18555", "--", "/bin/cat"}, []string{"--listen 127.0.0.1:18555", "--metrics 127.0.0.1:18555", "same port"}},
		{"metrics on every address", []string{"serve", "--listen", "127.0.0.1:18555", "--metrics", ":18555", "--", "/bin/cat"}, []string{"--listen", "--metrics", "same port"}},
		{"metrics on the listen port by name", []string{"serve", "--listen", "[::]:http", "--metrics", "127.0.0.1:80", "--", "/bin/cat"}, []string{"--listen", "--metrics", "same port"}},
		{"origin without a scheme", []string{"serve", "--allow-origin", "bogus", "--", "/bin/cat"}, []string{"--allow-origin", `"bogus"`}},
		{"origin with a path", []string{"serve", "--allow-origin", "http://a.com/path", "--", "/bin/cat"}, []string{"--allow-origin", `"http://a.com/path"`}},
		{"origin of another scheme", []string{"serve", "--allow-origin", "ftp://a.com", "--", "/bin/cat"}, []string{"--allow-origin"}},
		// No browser sends such an origin: the flag would pass none.
		{"origin port out of range", []string{"serve", "--allow-origin", "https://a.com:99999", "--", "/bin/cat"}, []string{"--allow-origin", `"https://a.com:99999"`, "port"}},
		{"origin port zero", []string{"serve", "--allow-origin", "http://a.com:0", "--", "/bin/cat"}, []string{"--allow-origin", `"http://a.com:0"`, "port"}},
		{"empty host", []string{"serve", "--allow-host", "", "--", "/bin/cat"}, []string{"--allow-host", "empty value"}},
		{"host of a final dot alone", []string{"serve", "--allow-host", ".", "--", "/bin/cat"}, []string{"--allow-host", `"."`, "not a host name"}},
		{"host with a scheme", []string{"serve", "--allow-host", "https://a.com", "--", "/bin/cat"}, []string{"--allow-host"}},
		{"host with a port", []string{"serve", "--allow-host", "a.com:8080", "--", "/bin/cat"}, []string{"--allow-host", `"a.com:8080"`, "port"}},
		{"IPv6 host with a port", []string{"serve", "--allow-host", "[fe80::1]:8080", "--", "/bin/cat"}, []string{"--allow-host", "port"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := run(t, tt.args...)
			if err == nil || ExitCode(err) != 2 {
				t.Fatalf("Run(%q) = %v; want a usage error (exit 2)", tt.args, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Run(%q) = %q, want it to name %s", tt.args, err, w)
				}
			}
		})
	}
}

func TestReadTokens(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "# tokens\n\ntok-a alice\n  tok-b   bob  \ntok-c carol # laptop\n   # indented\n")
	tokens, err := readTokens(t.Context(), good)
	if err != nil || len(tokens) != 3 || tokens["tok-a"] != "alice" || tokens["tok-b"] != "bob" || tokens["tok-c"] != "carol" {
		t.Fatalf("readTokens = %v, %v", tokens, err)
	}
	for _, tt := range []struct{ content, want string }{
		{"tok-a\n", ":1: want 'TOKEN ACTOR'"},
		{"tok-a alice extra\n", ":1: want 'TOKEN ACTOR'"},
		{"tok-a alice\ntok-a bob\n", ":2: the token is listed twice"},
		{"tok-a alice\ntok-b \xffbob\n", ":2: the actor is not UTF-8 text"},
		{"tok-a al\x1bice\n", ":1: the actor holds a control character"},
		{"tok-a \u202eecila\n", ":1: the actor holds a control character"},
		{"tok-a al\x00ice\n", ":1: the actor holds a control character"},
		{"# nothing\n", "lists no token"},
	} {
		p := write("bad", tt.content)
		if _, err := readTokens(t.Context(), p); err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("readTokens(t.Context(), %q) = %v; want an error naming the file and %q", tt.content, err, tt.want)
		}
	}
	// A file of at most 1MiB is read whatever its lines' length.
	long := strings.Repeat("t", 70_000)
	if tokens, err := readTokens(t.Context(), write("long", long+" alice\n")); err != nil || tokens[long] != "alice" {
		t.Errorf("readTokens of a 70KB token = %d tokens, %v; want it read", len(tokens), err)
	}
	if _, err := readTokens(t.Context(), filepath.Join(dir, "missing")); err == nil {
		t.Error("readTokens of a missing file succeeded")
	}
}

// TestServeRefusesBeforeTheUpstream: serve starts, refuses a request
// without a token and one from a foreign Host before any upstream starts,
// and stops when its context ends.
// TestServeNeedsACommandThatStarts: serve stops at start when the
// upstream command cannot be found, rather than serve sessions that all
// fail.
func TestServeNeedsACommandThatStarts(t *testing.T) {
	var stderr bytes.Buffer
	err := Run(t.Context(), []string{"serve", "--listen", "127.0.0.1:0", "--", "mcpi-no-such-command"}, strings.NewReader(""), io.Discard, &stderr)
	if err == nil || !strings.Contains(err.Error(), `"mcpi-no-such-command": executable file not found`) || ExitCode(err) != 1 {
		t.Fatalf("serve -- mcpi-no-such-command = %v (exit %d); want it to stop at once, naming the command", err, ExitCode(err))
	}
	if strings.Contains(stderr.String(), "serving") {
		t.Errorf("serve logged that it serves:\n%s", stderr.String())
	}
}

func TestServeRefusesBeforeTheUpstream(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("s3cret alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	started := filepath.Join(dir, "started")
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		// The upstream leaves a mark when it starts: a refused request
		// must not start one.
		done <- Run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--auth-token-file", tokens, "--", "/bin/sh", "-c", `touch "$0"; exec cat`, started}, strings.NewReader(""), io.Discard, pw)
		pw.Close()
	}()
	url := listeningURL(t, pr)
	for _, tt := range []struct {
		host, auth string
		status     int
	}{
		{"", "", http.StatusUnauthorized},
		{"", "Bearer wrong", http.StatusUnauthorized},
		{"evil.example", "Bearer s3cret", http.StatusForbidden},
	} {
		req, _ := http.NewRequest("POST", url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if tt.auth != "" {
			req.Header.Set("Authorization", tt.auth)
		}
		if tt.host != "" {
			req.Host = tt.host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.status {
			t.Errorf("Host %q, Authorization %q: %s, want %d", tt.host, tt.auth, resp.Status, tt.status)
		}
	}
	if _, err := os.Stat(started); err == nil {
		t.Error("an upstream was started for a refused request")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve returned %v after its context ended; want nil", err)
	}
}

// listeningURL reads serve's log from r until it says where it listens,
// returns that URL, and drains the rest.
func listeningURL(t *testing.T, r io.Reader) string {
	t.Helper()
	sc := bufio.NewScanner(r)
	url := ""
	for url == "" && sc.Scan() {
		if m := regexp.MustCompile(`url=(http://\S+)`).FindStringSubmatch(sc.Text()); m != nil {
			url = m[1]
		}
	}
	if url == "" {
		t.Fatal("serve did not log where it listens")
	}
	go io.Copy(io.Discard, r)
	return url
}

// TestServeNeedsTheScriptsInterpreter: a script found and executable
// whose #! line names an interpreter that is missing, directly or
// through env, stops serve at start, naming the interpreter.
func TestServeNeedsTheScriptsInterpreter(t *testing.T) {
	dir := t.TempDir()
	for line, want := range map[string]string{
		"#!/mcpi/no/such/interpreter":                   "/mcpi/no/such/interpreter cannot be run",
		"#!/usr/bin/env mcpi-no-such-interp":            "mcpi-no-such-interp is not on the PATH",
		"#! /usr/bin/env -S mcpi-no-such-interp --flag": "mcpi-no-such-interp is not on the PATH",
		"#!/bin/sh":                 "",
		"#!/usr/bin/env -u HOME sh": "",
		"#!/usr/bin/env\tsh":        "", // the kernel ends the interpreter at a tab too
	} {
		script := filepath.Join(dir, "server")
		if err := os.WriteFile(script, []byte(line+"\nexec cat\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		err := checkCommand(script)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v; want it accepted", line, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v; want an error saying %q", line, err, want)
		}
	}
	script := filepath.Join(dir, "server")
	os.WriteFile(script, []byte("#!/usr/bin/env mcpi-no-such-interp\n"), 0o755)
	// Cancelled: a serve that started would stop at once, without the
	// error.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := Run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--", script}, strings.NewReader(""), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "mcpi-no-such-interp") || ExitCode(err) != 1 {
		t.Fatalf("serve -- a script without its interpreter = %v (exit %d); want it to stop at once, naming the interpreter", err, ExitCode(err))
	}
}

// TestProxyNeedsTheScriptsInterpreter: the stdio proxy, too, stops at
// start on a script whose interpreter is missing, naming it, rather than
// saying the script is not there, or restarting env until a crash loop.
func TestProxyNeedsTheScriptsInterpreter(t *testing.T) {
	dir := t.TempDir()
	for line, want := range map[string]string{
		"#!/mcpi/no/such/interpreter":        "/mcpi/no/such/interpreter cannot be run",
		"#!/usr/bin/env mcpi-no-such-interp": "mcpi-no-such-interp is not on the PATH",
	} {
		script := filepath.Join(dir, "server")
		if err := os.WriteFile(script, []byte(line+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		_, _, err := run(t, "--", script)
		if err == nil || !strings.Contains(err.Error(), want) || ExitCode(err) != 1 {
			t.Errorf("-- a script with %s = %v (exit %d); want it to stop at once, saying %q", line, err, ExitCode(err), want)
		}
	}
}

// TestServeKeepAliveOption: --keep-alive 0 turns keep-alives off, where
// the front's zero would mean its default.
func TestServeKeepAliveOption(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want time.Duration
	}{
		{nil, streamhttp.DefaultKeepAlive},
		{[]string{"--keep-alive", "0"}, -1},
		{[]string{"--keep-alive", "1m"}, time.Minute},
	} {
		f := newServeFlags(io.Discard)
		args := append(tt.args, "--", "/bin/cat")
		if err := parseFlags(f.fs, args); err != nil {
			t.Fatal(err)
		}
		if err := f.check(f.fs.Args()); err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		if got := f.keepAliveOption(); got != tt.want {
			t.Errorf("%q: the front's KeepAlive is %v; want %v", args, got, tt.want)
		}
	}
}

// TestSameBind: two addresses whose second listener would find its port
// taken by the first.
func TestSameBind(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want bool
	}{
		{"127.0.0.1:8080", "127.0.0.1:8080", true},
		{"0.0.0.0:8080", "127.0.0.1:8080", true},
		{"[::1]:8080", ":8080", true},
		{"LOCALHOST:8080", "localhost:8080", true},
		{"127.0.0.1:http", "127.0.0.1:80", true},
		{"127.0.0.1:0", "127.0.0.1:0", false},
		{"127.0.0.1:8080", "127.0.0.1:8081", false},
		{"127.0.0.1:8080", "127.0.0.2:8080", false},
		{"bogus", "bogus", false},
	} {
		if got := sameBind(tt.a, tt.b); got != tt.want {
			t.Errorf("sameBind(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}

// TestServesItself: only serve's own endpoint is refused as its
// upstream.
func TestServesItself(t *testing.T) {
	for _, tt := range []struct {
		listen, path, upstream string
		want                   bool
	}{
		{"127.0.0.1:8080", "/mcp", "http://127.0.0.1:8080/mcp", true},
		{"0.0.0.0:80", "/mcp", "http://localhost/mcp", true},
		{"127.0.0.1:8080", "/mcp", "http://127.0.0.1:8080/other", false},
		{"127.0.0.1:8080", "/mcp", "https://127.0.0.1:8080/mcp", false},
		{"127.0.0.1:8080", "/mcp", "http://127.0.0.1:8081/mcp", false},
		{"0.0.0.0:8080", "/mcp", "http://10.0.0.5:8080/mcp", false},
		{"127.0.0.1:0", "/mcp", "http://127.0.0.1:0/mcp", false},
	} {
		if got := servesItself(tt.listen, tt.path, tt.upstream); got != tt.want {
			t.Errorf("servesItself(%q, %q, %q) = %v, want %v", tt.listen, tt.path, tt.upstream, got, tt.want)
		}
	}
}

// TestListenOnTheMetricsPortByName: the same address by a name and a
// number, which only listening tells, names --metrics too.
func TestListenOnTheMetricsPortByName(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	_, _, err = run(t, "serve", "--metrics", "localhost:"+port, "--listen", "127.0.0.1:"+port, "--", "/bin/cat")
	if err == nil || !strings.Contains(err.Error(), "--metrics localhost:"+port+" is on the same port") {
		t.Fatalf("serve with --metrics localhost:%s and --listen 127.0.0.1:%s = %v; want an error naming both", port, port, err)
	}
}

// TestServeWarnsOfAnOpenTokenFile: a token file others than its owner may
// read is served from, with a warning, as an open signer key is; one
// kept to its owner is not warned of.
func TestServeWarnsOfAnOpenTokenFile(t *testing.T) {
	for _, tt := range []struct {
		mode os.FileMode
		warn bool
	}{{0o644, true}, {0o600, false}} {
		tokens := filepath.Join(t.TempDir(), "tokens")
		if err := os.WriteFile(tokens, []byte("s3cret alice\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(tokens, tt.mode); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		pr, pw := io.Pipe()
		done := make(chan error, 1)
		go func() {
			done <- Run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--auth-token-file", tokens, "--", "/bin/sh", "-c", "exec cat"}, strings.NewReader(""), io.Discard, pw)
			pw.Close()
		}()
		// The warning comes before serve says where it listens.
		var log strings.Builder
		sc := bufio.NewScanner(pr)
		for sc.Scan() && !strings.Contains(sc.Text(), "serving MCP") {
			log.WriteString(sc.Text() + "\n")
		}
		go io.Copy(io.Discard, pr)
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("serve returned %v after its context ended; want nil", err)
		}
		if got := strings.Contains(log.String(), "readable by others"); got != tt.warn {
			t.Errorf("token file of mode %v: warned %v, want %v; log:\n%s", tt.mode, got, tt.warn, log.String())
		}
		if strings.Contains(log.String(), "s3cret") {
			t.Errorf("the log shows a token:\n%s", log.String())
		}
	}
}
