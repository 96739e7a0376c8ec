package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
)

func TestParseSize(t *testing.T) {
	valid := []struct {
		in   string
		want int64
	}{
		{"1048576", 1 << 20},
		{"512KiB", 512 << 10},
		{"16MiB", 16 << 20},
		{"1GiB", 1 << 30},
		{"2GiB", 2 << 30},
		{"100B", 100},
		{"1", 1},
		{"2147483647", 1<<31 - 1},
		{"2147483648", 1 << 31},
	}
	for _, tt := range valid {
		got, err := parseSize(tt.in)
		if tt.want > maxSize { // where int has 32 bits, 2GiB is 1 byte over
			if err == nil {
				t.Errorf("parseSize(%q) = %d; want an error, over %d", tt.in, got, maxSize)
			}
			continue
		}
		if err != nil || int64(got) != tt.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}

	if _, err := parseSize("99999999999999999999"); err == nil || !strings.Contains(err.Error(), "over the largest size") {
		t.Errorf(`parseSize("99999999999999999999") = %v; want an error saying it is over the largest size`, err)
	}
	if _, err := parseSize("99999999999999999999x"); err == nil || !strings.Contains(err.Error(), "not a positive size") {
		t.Errorf(`parseSize("99999999999999999999x") = %v; want an error saying it is not a size`, err)
	}
	invalid := []string{"0", "-1", "abc", "3TB", "4GiB", "3GiB", "2147483649", "99999999999999999999", "-99999999999999999999", "99999999999999999999x", "99999999999999999999TB", "", "1.5MiB", "KiB", "0KiB", "-5MiB", "16mib", "16 MB", "0x10", " 16MiB", "16MiB ", "16 MiB", "\t1024", "1024\n"}
	for _, in := range invalid {
		got, err := parseSize(in)
		if err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", in, got)
			continue
		}
		if !strings.Contains(err.Error(), strconv.Quote(in)) {
			t.Errorf("parseSize(%q) = %q, want an error naming the value", in, err)
		}
	}
}

// run runs the program with args and no input, and returns its output.
func run(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	err = Run(ctx, args, strings.NewReader(""), &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestUsageErrors(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want []string // each must be in the error message
	}{
		{"bad log level", []string{"--log-level", "nope", "--", "/bin/cat"}, []string{"--log-level", `"nope"`}},
		{"bad log format", []string{"--log-format", "xml", "--", "/bin/cat"}, []string{"--log-format", `"xml"`}},
		{"zero message size", []string{"--max-message-size", "0", "--", "/bin/cat"}, []string{"--max-message-size", `"0"`}},
		{"message size too small", []string{"--max-message-size", "1023B", "--", "/bin/cat"}, []string{"--max-message-size", `"1023B"`, "smallest size, 1024 bytes"}},
		{"bad message size", []string{"--max-message-size=3TB", "--", "/bin/cat"}, []string{"--max-message-size", `"3TB"`}},
		{"message size with a space before", []string{"--max-message-size", " 16MiB", "--", "/bin/cat"}, []string{"--max-message-size", `" 16MiB"`}},
		{"message size with a space after", []string{"--max-message-size", "16MiB ", "--", "/bin/cat"}, []string{"--max-message-size", `"16MiB "`}},
		{"message size too large", []string{"--max-message-size", "4GiB", "--", "/bin/cat"}, []string{"--max-message-size", `"4GiB"`}},
		// The actor is logged, journaled and in every fingerprint.
		{"actor with a line break", []string{"--actor", "alice\nbob", "--", "/bin/cat"}, []string{"--actor", `"alice\nbob"`, "control character"}},
		{"actor with an escape", []string{"--actor", "al\x1b[2Jice", "--", "/bin/cat"}, []string{"--actor", "control character"}},
		{"actor with a bidi control", []string{"--actor", "\u202eecila", "--", "/bin/cat"}, []string{"--actor", "control character"}},
		{"actor all space", []string{"--actor", "   ", "--", "/bin/cat"}, []string{"--actor", `"   "`, "all space"}},
		{"actor with space at an end", []string{"--actor", "alice ", "--", "/bin/cat"}, []string{"--actor", `"alice "`, "space at an end"}},
		{"serve: actor with a tab", []string{"serve", "--actor", "a\tb", "--", "/bin/cat"}, []string{"--actor", "control character"}},
		{"unknown flag", []string{"--nope", "--", "/bin/cat"}, []string{"nope"}},
		{"flag without value", []string{"--log-level"}, []string{"log-level"}},
		{"nothing after --", []string{"--"}, []string{"no upstream command", "--"}},
		{"no arguments", nil, []string{"no upstream command", "mcp-idempotent -- node server.js"}},
		{"flags but no command", []string{"--actor", "alice"}, []string{"no upstream command"}},
		{"demo with arguments", []string{"demo", "extra"}, []string{"demo"}},
		{"version with arguments", []string{"version", "extra"}, []string{"version", `"extra"`}},
		{"header without a colon", []string{"--upstream", "http://127.0.0.1:1/mcp", "--upstream-header", "X-Token"}, []string{"--upstream-header (number 1)", "Name: value"}},
		{"header name with a space", []string{"--upstream", "http://127.0.0.1:1/mcp", "--upstream-header", "X Token: a"}, []string{"--upstream-header (number 1)", "header name"}},
		{"header name with a non-token", []string{"--upstream", "http://127.0.0.1:1/mcp", "--upstream-header", "X-A: a", "--upstream-header", "X(Token): a"}, []string{"--upstream-header (number 2)", "header name"}},
		// As `-- "$SERVER"` gives when SERVER is not set.
		{"empty upstream command", []string{"--", ""}, []string{"upstream command is empty"}},
		{"serve: empty upstream command", []string{"serve", "--", " "}, []string{"upstream command is empty"}},
		{"policy show: empty upstream command", []string{"policy", "show", "--", "", "x"}, []string{"upstream command is empty"}},
		{"header value with a line break", []string{"--upstream", "http://127.0.0.1:1/mcp", "--upstream-header", "X-A: secret\nb"}, []string{"--upstream-header X-A", "control character"}},
		// net/http drops a Host header, and the proxy's own headers win:
		// given, they would start a proxy that ignores them, or send a
		// session id on the initialize.
		{"host header", []string{"--upstream", "http://127.0.0.1:1/mcp", "--upstream-header", "Host: api.example.com"}, []string{"--upstream-header Host", "the --upstream URL"}},
		{"length header", []string{"--upstream", "http://127.0.0.1:1/mcp", "--upstream-header", "content-length: 5"}, []string{"--upstream-header content-length", "net/http"}},
		{"accept encoding header", []string{"--upstream", "http://127.0.0.1:1/mcp", "--upstream-header", "Accept-Encoding: gzip, br"}, []string{"--upstream-header Accept-Encoding", "decodes"}},
		{"content type header", []string{"--upstream", "http://127.0.0.1:1/mcp", "--upstream-header", "Content-Type: text/plain"}, []string{"--upstream-header Content-Type", "sets it itself"}},
		{"session header", []string{"--upstream", "http://127.0.0.1:1/mcp", "--upstream-header", "mcp-session-id: abc"}, []string{"--upstream-header mcp-session-id", "sets it itself"}},
		// A prefix or schema cut short unseen would share one deployment's
		// records and key with another's.
		{"redis prefix with a semicolon", []string{"--store", "redis://127.0.0.1:1/0?prefix=tenant;B:", "--", "/bin/cat"}, []string{"--store", "semicolon", "%3B"}},
		{"postgres schema with a semicolon", []string{"--store", "postgres://127.0.0.1:1/db?schema=a;b", "--", "/bin/cat"}, []string{"--store", "semicolon", "%3B"}},
		{"empty redis prefix", []string{"--store", "redis://127.0.0.1:1/0?prefix=", "--", "/bin/cat"}, []string{"--store", "prefix= is empty"}},
		{"no replicas to wait for", []string{"--store", "redis://127.0.0.1:1/0?wait_replicas=0", "--", "/bin/cat"}, []string{"--store", "wait_replicas=0", "from 1 to 1000"}},
		{"a wait without replicas", []string{"--store", "redis://127.0.0.1:1/0?wait_timeout=1s", "--", "/bin/cat"}, []string{"--store", "wait_timeout= is given without wait_replicas="}},
		{"a wait of no time", []string{"--store", "redis://127.0.0.1:1/0?wait_replicas=1&wait_timeout=soon", "--", "/bin/cat"}, []string{"--store", "wait_timeout=soon"}},
		{"log format not known in capitals either", []string{"--log-format", "XML", "--", "/bin/cat"}, []string{"--log-format", `"XML"`}},
		{"redis prefix twice", []string{"--store", "redis://127.0.0.1:1/0?prefix=tenant-a:&prefix=tenant-b:", "--", "/bin/cat"}, []string{"--store", "prefix= is given 2 times"}},
		{"postgres schema twice", []string{"--store", "postgres://127.0.0.1:1/db?schema=a&schema=b", "--", "/bin/cat"}, []string{"--store", "schema= is given 2 times"}},
		{"empty postgres schema", []string{"--store", "postgres://127.0.0.1:1/db?schema=", "--", "/bin/cat"}, []string{"--store", "schema= is empty"}},
		{"postgres schema with a NUL", []string{"--store", "postgres://127.0.0.1:1/db?schema=a%00b", "--", "/bin/cat"}, []string{"--store", "NUL byte"}},
		{"postgres schema too long", []string{"--store", "postgres://127.0.0.1:1/db?schema=" + strings.Repeat("s", 64), "--", "/bin/cat"}, []string{"--store", "64 bytes", "63"}},
		{"journal key without a journal", []string{"--journal-key", "k", "--", "/bin/cat"}, []string{"--journal-key", "needs --journal"}},
		// Either read as the other fails naming neither mistake.
		{"journal key is the journal", []string{"--journal", "j.jsonl", "--journal-key", "./j.jsonl", "--", "/bin/cat"}, []string{"--journal-key", "--journal", "same file"}},
		{"journal key is the journal by its absolute path", []string{"--journal", "j.jsonl", "--journal-key", filepath.Join(wd, "j.jsonl"), "--", "/bin/cat"}, []string{"--journal-key", "same file"}},
		{"checkpoint lines without a key", []string{"--journal", "j", "--journal-checkpoint-lines", "10", "--", "/bin/cat"}, []string{"--journal-checkpoint-lines goes with --journal-key"}},
		{"checkpoint interval without a key", []string{"--journal", "j", "--journal-checkpoint-every", "10s", "--", "/bin/cat"}, []string{"--journal-checkpoint-every goes with --journal-key"}},
		{"no checkpoint lines", []string{"--journal", "j", "--journal-key", "k", "--journal-checkpoint-lines", "0", "--", "/bin/cat"}, []string{"--journal-checkpoint-lines", "at least 1"}},
		{"checkpoint interval too short", []string{"--journal", "j", "--journal-key", "k", "--journal-checkpoint-every", "10ms", "--", "/bin/cat"}, []string{"--journal-checkpoint-every", "10ms", "at least 1s"}},
		{"bad metrics address", []string{"--metrics", "bogus", "--", "/bin/cat"}, []string{"--metrics", `"bogus"`}},
		{"metrics port out of range", []string{"--metrics", "127.0.0.1:99999", "--", "/bin/cat"}, []string{"--metrics", "99999"}},
		{"sqlite store without a path", []string{"--store", "sqlite:", "--", "/bin/cat"}, []string{"--store", "no database path"}},
		{"sqlite store at the root by a URL's //", []string{"--store", "sqlite://records.db", "--", "/bin/cat"}, []string{"--store", "/records.db, at the root"}},
		{"sqlite store with a bad sync", []string{"--store", "sqlite:x.db?sync=bogus", "--", "/bin/cat"}, []string{"--store", `"bogus"`}},
		// A mistyped store file would open as an empty new store, and the
		// list read "no executions".
		{"activity: no such store file", []string{"activity", "list", "--store", "sqlite:/nonexistent/typo.db"}, []string{"--store", "typo.db"}},
		{"activity: bad state", []string{"activity", "list", "--store", "sqlite:" + os.Args[0], "--state", "bogus"}, []string{"--state", `"bogus"`, "unknown"}},
		{"activity: state in capitals", []string{"activity", "list", "--store", "sqlite:" + os.Args[0], "--state", "Unknown"}, []string{"--state", `"Unknown"`}},
		{"activity: resolve without --as", []string{"activity", "resolve", "exe_nope", "--store", "sqlite:" + os.Args[0]}, []string{"--as is required"}},
		{"activity: resolve as what no execution can be", []string{"activity", "resolve", "exe_nope", "--store", "sqlite:" + os.Args[0], "--as", "maybe"}, []string{"--as", `"maybe"`}},
		// Echoed raw, a control character would act on the terminal.
		{"activity: id with a line break", []string{"activity", "show", "exe_1\n", "--store", "sqlite:" + os.Args[0]}, []string{"activity show", `"exe_1\n"`, "not an execution id"}},
		{"activity: id with an escape", []string{"activity", "approve", "exe_1\x1b[31m", "--store", "sqlite:" + os.Args[0]}, []string{"activity approve", `"exe_1\x1b[31m"`}},
		{"activity: list with an argument", []string{"activity", "list", "extra", "--store", "sqlite:" + os.Args[0]}, []string{"activity list takes no arguments", `"extra"`}},
		// A fingerprint cut short, as logs print it, would list nothing.
		{"activity: fingerprint as logs print it", []string{"activity", "list", "--store", "sqlite:" + os.Args[0], "--fingerprint", "51f00353c84b"}, []string{"--fingerprint", `"51f00353c84b"`, "64 hex digits"}},
		{"activity: bad limit", []string{"activity", "list", "--store", "sqlite:" + os.Args[0], "--limit", "-1"}, []string{"--limit", "-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, _, err := run(t, tt.args...)
			if err == nil {
				t.Fatalf("Run(%q) succeeded", tt.args)
			}
			if code := ExitCode(err); code != 2 {
				t.Errorf("Run(%q) = %v; exit code %d, want 2", tt.args, err, code)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Run(%q) = %q, want it to name %s", tt.args, err, w)
				}
			}
			if printable(err.Error()) != err.Error() {
				t.Errorf("Run(%q) = %q: a control character is printed raw", tt.args, err)
			}
			if stdout != "" {
				t.Errorf("Run(%q) wrote %q to stdout, which belongs to the client", tt.args, stdout)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("Run(%q) = %q: a header's value is never shown", tt.args, err)
			}
		})
	}
}

// TestLogFlagsIgnoreCase: --log-format is read as --log-level is, case
// and all.
func TestLogFlagsIgnoreCase(t *testing.T) {
	var out bytes.Buffer
	log, err := newLogger(&out, "INFO", "JSON")
	if err != nil {
		t.Fatalf("newLogger(INFO, JSON) = %v; want a JSON logger", err)
	}
	log.Info("hello")
	if !json.Valid(out.Bytes()) {
		t.Errorf("--log-format JSON wrote %q; want a JSON line", out.String())
	}
}

// TestLogValuesBounded: a client's megabyte of request id, or an error
// quoting it, is cut in the log, which says how long it was.
func TestLogValuesBounded(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		var out bytes.Buffer
		log, err := newLogger(&out, "info", format)
		if err != nil {
			t.Fatal(err)
		}
		long := strings.Repeat("é", 1<<19) // a megabyte, two bytes a character
		log.Info("answered", "request", long, "err", errors.New("call "+long+" failed"), "short", "kept")
		if n := out.Len(); n > 3*maxLogValue {
			t.Errorf("%s: the line is %d bytes; want it cut to a few KiB", format, n)
		}
		line := out.String()
		if !strings.Contains(line, "(1048576 bytes)") || !strings.Contains(line, "(1048588 bytes)") || !strings.Contains(line, "kept") || !utf8.ValidString(line) {
			t.Errorf("%s: the line %.200q...; want each long value cut on a character, with its length, and the short one kept", format, line)
		}
	}
}

// TestUnopenableFiles: a file or a store a flag names that cannot be
// opened stops the proxy with a message naming the flag (exit status 1).
func TestUnopenableFiles(t *testing.T) {
	for _, tt := range []struct {
		args []string
		flag string
	}{
		{[]string{"--policy", "/nonexistent/policy.yaml", "--", "/bin/cat"}, "--policy"},
		{[]string{"--journal", "/nonexistent/journal", "--", "/bin/cat"}, "--journal"},
		{[]string{"--store", "sqlite:/nonexistent/dir/x.db", "--", "/bin/cat"}, "--store"},
		{[]string{"--store", "redis://127.0.0.1:1/abc", "--", "/bin/cat"}, "--store"},
		{[]string{"--store", "redis://127.0.0.1:1/0?master_name=m&replica_only=true", "--", "/bin/cat"}, "--store"},
		{[]string{"--store", "redis://127.0.0.1:1/2?cluster=true", "--", "/bin/cat"}, "--store"},
		{[]string{"--store", "redis://127.0.0.1:1?cluster=true&read_only=true", "--", "/bin/cat"}, "--store"},
	} {
		_, _, err := run(t, tt.args...)
		if err == nil || !strings.HasPrefix(err.Error(), tt.flag+": ") || ExitCode(err) != 1 {
			t.Errorf("Run(%q) = %v (exit %d); want an error naming %s, exit 1", tt.args, err, ExitCode(err), tt.flag)
		}
	}
}

// TestRefusedStartLeavesNoJournal: a start refused for its policy or its
// store creates no --journal file.
func TestRefusedStartLeavesNoJournal(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(bad, []byte("tools: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--policy", bad},
		{"--store", "sqlite:" + filepath.Join(dir, "no", "such", "x.db")},
	} {
		journal := filepath.Join(dir, "journal")
		_, _, err := run(t, append(append([]string{"--journal", journal}, args...), "--", "/bin/cat")...)
		if err == nil {
			t.Fatalf("Run(%q) started", args)
		}
		if _, serr := os.Stat(journal); !errors.Is(serr, os.ErrNotExist) {
			t.Errorf("Run(%q) = %v, and left the journal file (stat: %v)", args, err, serr)
		}
	}
}

// TestOperatorApprovalNeedsADurableStore: an operator cannot reach the
// memory store, so a file that asks one is refused with it; but not in
// shadow mode, which asks nobody, and where a team tries its file first.
func TestOperatorApprovalNeedsADurableStore(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte("tools:\n  charge_card:\n    approval: each\n    approver: operator\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := run(t, "--log-level", "error", "--policy", file, "--", "/bin/cat")
	if err == nil || !strings.Contains(err.Error(), "charge_card asks an operator") {
		t.Errorf("with the memory store, Run = %v; want the file refused", err)
	}
	if _, _, err := run(t, "--log-level", "error", "--shadow", "--policy", file, "--", "/bin/cat"); err != nil {
		t.Errorf("in shadow mode with the memory store, Run = %v; want it to start", err)
	}
}

func TestExitCode(t *testing.T) {
	if code := ExitCode(errors.New("upstream failed")); code != 1 {
		t.Errorf("ExitCode of a plain error = %d, want 1", code)
	}
	if code := ExitCode(usagef("bad")); code != 2 {
		t.Errorf("ExitCode of a usage error = %d, want 2", code)
	}
}

func TestDemo(t *testing.T) {
	stdout, _, err := run(t, "demo")
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, stdout)
	}
	for _, want := range []string{"ran 2 times", "ran 5 times", "under different request ids", "exe_"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("demo output lacks %q:\n%s", want, stdout)
		}
	}
	if n := strings.Count(stdout, "with mcp-idempotent      charge_card ran 1 time "); n != 3 {
		t.Errorf("the proxy ran charge_card once in %d scenarios; want all 3:\n%s", n, stdout)
	}
}

func TestVersion(t *testing.T) {
	stdout, _, err := run(t, "version")
	if err != nil {
		t.Fatal(err)
	}
	if stdout != "mcp-idempotent "+Version+"\n" {
		t.Errorf("version printed %q", stdout)
	}
}

func TestHelp(t *testing.T) {
	for _, arg := range []string{"help", "--help", "-h"} {
		stdout, _, err := run(t, arg)
		if err != nil {
			t.Fatalf("%s: %v", arg, err)
		}
		for _, want := range []string{"Usage:", "-- COMMAND", "-max-message-size", "-log-level"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("%s output lacks %q:\n%s", arg, want, stdout)
			}
		}
	}
}

// TestEveryCommandsHelp: --help after any command, or after its
// arguments, prints that command's usage on stdout and succeeds; it is
// never taken for a file or refused.
func TestEveryCommandsHelp(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--log-level", "debug", "--help"}, "-- COMMAND"},
		{[]string{"serve", "--help"}, "mcp-idempotent serve [flags] -- COMMAND"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "-h"}, "-allow-origin"},
		{[]string{"policy", "--help"}, "policy check FILE"},
		{[]string{"policy", "check", "--help"}, "policy check FILE"},
		{[]string{"policy", "show", "--help"}, "policy show"},
		{[]string{"audit", "verify", "--help"}, "audit verify FILE"},
		{[]string{"audit", "checkpoint", "--help"}, "audit checkpoint FILE"},
		{[]string{"audit", "keygen", "--help"}, "audit keygen NAME"},
		{[]string{"audit", "verify", "j", "--key", "k", "--help"}, "--since"},
		{[]string{"activity", "list", "--help"}, "activity list --store URL"},
		{[]string{"activity", "help"}, "activity show EXE_ID"},
		{[]string{"demo", "--help"}, "mcp-idempotent demo"},
		{[]string{"version", "--help"}, "mcp-idempotent version"},
	} {
		var stdout, stderr bytes.Buffer
		err := Run(t.Context(), tt.args, strings.NewReader(""), &stdout, &stderr)
		if err != nil || !strings.Contains(stdout.String(), tt.want) || stderr.Len() != 0 {
			t.Errorf("Run(%q) = %v; stdout %q, stderr %q; want the usage (%q) on stdout and success", tt.args, err, stdout.String(), stderr.String(), tt.want)
		}
	}
}

// TestHelpAfterTheCommandIsTheCommands: the words after an upstream
// command given without -- are the command's, -h and --help too (a
// server's -h may name a host). They start the command, here one that
// does not exist, and never print the proxy's usage in its place.
func TestHelpAfterTheCommandIsTheCommands(t *testing.T) {
	const missing = "mcp-idempotent-no-such-server"
	for _, args := range [][]string{
		{missing, "-h", "127.0.0.1"},
		{"--store", "memory", missing, "--help"},
		{"--shadow", missing, "-help"},
		{"serve", missing, "-h"},
		{"serve", "--listen", "127.0.0.1:0", missing, "--help"},
		{"policy", "show", "--scope", "actor", missing, "-h"},
	} {
		var stdout bytes.Buffer
		err := Run(t.Context(), args, strings.NewReader(""), &stdout, io.Discard)
		if err == nil || !strings.Contains(err.Error(), missing) || stdout.Len() != 0 {
			t.Errorf("Run(%q) = %v, stdout %q; want the command started (and not found), no usage", args, err, stdout.String())
		}
	}
	for _, args := range [][]string{
		{"--store", "memory", "-h", missing},
		{"--shadow", "--help", "--", missing},
		{"serve", "--json-response", "-h", missing},
		{"policy", "show", "--policy", "p.yaml", "--help", missing},
	} {
		var stdout bytes.Buffer
		if err := Run(t.Context(), args, strings.NewReader(""), &stdout, io.Discard); err != nil || !strings.Contains(stdout.String(), "Usage:") {
			t.Errorf("Run(%q) = %v, stdout %q; want the usage", args, err, stdout.String())
		}
	}
}

// TestMistakeComesFirst: a command-line mistake is one line naming it,
// then one saying where the usage is, never the whole usage with the
// error last.
func TestMistakeComesFirst(t *testing.T) {
	for _, tt := range []struct {
		args       []string
		want, hint string
	}{
		{nil, "no upstream command", "Run 'mcp-idempotent --help' for usage."},
		{[]string{"--bogus"}, "flag provided but not defined: -bogus", "Run 'mcp-idempotent --help' for usage."},
		{[]string{"serve", "--bogus", "--", "cat"}, "-bogus", "Run 'mcp-idempotent serve --help' for usage."},
		{[]string{"policy", "check"}, "policy check takes one FILE", "Run 'mcp-idempotent policy --help' for usage."},
		{[]string{"activity", "show", "exe_1"}, "--store is required", "Run 'mcp-idempotent activity --help' for usage."},
		{[]string{"audit"}, "say verify", "Run 'mcp-idempotent audit --help' for usage."},
	} {
		var stdout, stderr bytes.Buffer
		err := Run(t.Context(), tt.args, strings.NewReader(""), &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), tt.want) || ExitCode(err) != 2 || UsageHint(err) != tt.hint {
			t.Errorf("Run(%q) = %v (exit %d, hint %q); want a usage error naming %q, hint %q", tt.args, err, ExitCode(err), UsageHint(err), tt.want, tt.hint)
		}
		if stdout.Len() != 0 || strings.Contains(stderr.String(), "Usage:") {
			t.Errorf("Run(%q) printed the usage (stdout %q, stderr %q); want the error alone", tt.args, stdout.String(), stderr.String())
		}
	}
	if hint := UsageHint(errors.New("the store is down")); hint != "" {
		t.Errorf("UsageHint of another error = %q; want none", hint)
	}
}

// TestProxyPassThrough runs the proxy in front of /bin/cat, which sends
// every frame back: a frame the proxy does not own comes back byte for
// byte.
func TestProxyPassThrough(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	var stderr bytes.Buffer
	errc := make(chan error, 1)
	go func() {
		errc <- Run(ctx, []string{"--log-level", "error", "--", "/bin/cat"}, stdinR, stdoutW, &stderr)
		stdoutW.Close()
	}()

	frame := `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}`
	if _, err := io.WriteString(stdinW, frame+"\n"); err != nil {
		t.Fatal(err)
	}
	got, err := bufio.NewReader(stdoutR).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the proxy's output: %v", err)
	}
	if got != frame+"\n" {
		t.Errorf("proxy wrote %q, want %q", got, frame+"\n")
	}
	stdinW.Close() // the client leaves; the proxy stops cat and returns
	if err := <-errc; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// TestUpstreamExit checks that an upstream that dies is reported with its
// exit status.
func TestUpstreamCrashLoop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stdinR, stdinW := io.Pipe()
	defer stdinW.Close()
	var stdout, stderr bytes.Buffer
	err := Run(ctx, []string{"--max-restarts", "2", "--", "sh", "-c", "exit 3"}, stdinR, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "keeps exiting") || !strings.Contains(err.Error(), "3 exits") {
		t.Fatalf("Run = %v; want a crash loop after 3 exits", err)
	}
	if n := strings.Count(stderr.String(), "starting it again"); n != 2 {
		t.Errorf("the upstream was started again %d times; want 2:\n%s", n, stderr.String())
	}
}

func TestUpstreamExit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stdinR, stdinW := io.Pipe() // the client stays connected
	defer stdinW.Close()
	var stdout, stderr bytes.Buffer
	err := Run(ctx, []string{"--max-restarts", "0", "--", "sh", "-c", "exit 3"}, stdinR, &stdout, &stderr)
	if err == nil {
		t.Fatal("Run succeeded with an upstream that exited")
	}
	if !strings.Contains(err.Error(), "exit status 3") || ExitCode(err) != 1 {
		t.Errorf("Run = %q (exit code %d), want exit status 3 and exit code 1", err, ExitCode(err))
	}
}

func TestUpstreamFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--upstream", "http://127.0.0.1:1/mcp", "--", "node", "s.js"}, "both name the upstream"},
		{[]string{"--upstream-header", "Authorization: x", "--", "cat"}, "--upstream-header goes with --upstream"},
		{[]string{"--upstream-header", "no colon", "--upstream", "http://h/"}, "want 'Name: value'"},
		{[]string{"--upstream", "ftp://host/mcp"}, `--upstream: "ftp://host/mcp" is not an http:// or https:// URL`},
		// Its identity is JSON text: bytes that are not UTF-8 would read
		// as U+FFFD, and two credentials as one.
		{[]string{"--upstream-header", "X-Key: \xff", "--upstream", "http://h/"}, "--upstream-header X-Key: the value is not UTF-8 text"},
		{[]string{"--upstream", "http://h/mcp?key=\xff"}, "--upstream: the URL is not UTF-8 text"},
	} {
		var stdout, stderr bytes.Buffer
		err := Run(context.Background(), tt.args, strings.NewReader(""), &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), tt.want) || ExitCode(err) != 2 {
			t.Errorf("Run(%q) = %v (exit %d); want a usage error containing %q", tt.args, err, ExitCode(err), tt.want)
		}
	}
}

// TestScopeFlagUnderThePolicyFile: --scope replaces the default scope, and
// a scope the policy file gives, in its defaults or a tool's rule, wins,
// session included.
func TestScopeFlagUnderThePolicyFile(t *testing.T) {
	for _, tt := range []struct {
		file, tool string
		want       policy.Scope
	}{
		{"tools:\n  charge: {scope: session}\n", "charge", policy.ScopeSession},
		{"tools:\n  charge: {retention: 1h}\n", "charge", policy.ScopeActor},
		{"tools:\n  charge: {scope: session}\n", "other", policy.ScopeActor},
		{"defaults: {scope: session}\n", "charge", policy.ScopeSession},
		{"defaults: {scope: key}\ntools:\n  charge: {scope: session}\n", "charge", policy.ScopeSession},
	} {
		path := filepath.Join(t.TempDir(), "policy.yaml")
		if err := os.WriteFile(path, []byte(tt.file), 0o600); err != nil {
			t.Fatal(err)
		}
		resolve, _, err := newResolver(t.Context(), path, "actor")
		if err != nil {
			t.Fatal(err)
		}
		if got := resolve(tt.tool, nil).Scope; got != tt.want {
			t.Errorf("--scope actor, %q, tool %s: scope %s; want %s", tt.file, tt.tool, got, tt.want)
		}
	}
	resolve, _, err := newResolver(t.Context(), "", "actor")
	if err != nil {
		t.Fatal(err)
	}
	if got := resolve("charge", nil).Scope; got != policy.ScopeActor {
		t.Errorf("--scope actor without a policy file: scope %s; want actor", got)
	}
}

// TestUnreachableStoreSaidOnce: a store that cannot be reached at start
// is one error line, naming the store and what fails closed, not
// warnings that repeat while the proxy looks fine.
func TestUnreachableStoreSaidOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	stdin, closeStdin := io.Pipe()
	time.AfterFunc(2500*time.Millisecond, func() { closeStdin.Close() }) // past the first retries
	var stdout, stderr bytes.Buffer
	if err := Run(ctx, []string{"--store", "redis://127.0.0.1:1/0", "--", "cat"}, stdin, &stdout, &stderr); err != nil {
		t.Fatalf("Run: %v\n%s", err, stderr.String())
	}
	var errs, warns int
	for line := range strings.Lines(stderr.String()) {
		switch {
		case strings.Contains(line, "level=ERROR"):
			errs++
			if !strings.Contains(line, "store=redis://127.0.0.1:1/0") || !strings.Contains(line, "fail closed") {
				t.Errorf("the error does not name the store and what fails closed: %s", line)
			}
		case strings.Contains(line, "level=WARN"):
			warns++
		}
	}
	if errs != 1 || warns != 0 {
		t.Errorf("%d errors and %d warnings; want one error:\n%s", errs, warns, stderr.String())
	}
}

// TestUnreachableStoreInShadowMode: in shadow mode the line that says
// the store cannot be reached does not say that calls fail closed:
// every call still goes upstream.
func TestUnreachableStoreInShadowMode(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	stdin, closeStdin := io.Pipe()
	closeStdin.Close()
	var stdout, stderr bytes.Buffer
	if err := Run(ctx, []string{"--shadow", "--store", "redis://127.0.0.1:1/0", "--", "cat"}, stdin, &stdout, &stderr); err != nil {
		t.Fatalf("Run: %v\n%s", err, stderr.String())
	}
	got := stderr.String()
	if !strings.Contains(got, "cannot be reached: in shadow mode side-effecting calls still go upstream") || strings.Contains(got, "fail closed") {
		t.Errorf("the log does not say that calls still go upstream:\n%s", got)
	}
}
