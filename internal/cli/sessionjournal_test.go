package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
)

// echoServer is an upstream in sh that answers every request with an
// initialize result.
var echoServer = []string{"/bin/sh", "-c", `while IFS= read -r l; do case "$l" in *'"id":'*)
id=$(printf '%s' "$l" | sed 's/.*"id":\([^,}]*\).*/\1/')
printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"sh","version":"1"}}}\n' "$id";;
esac; done`}

const initWithClientInfo = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"agent-x","version":"4.2"}}}`

// readJournal returns the entries of the journal at path, after checking
// that `audit verify` passes on it.
func readJournal(t *testing.T, path string) []journal.Entry {
	t.Helper()
	if out, errOut, err := run(t, "audit", "verify", path); err != nil {
		t.Fatalf("audit verify: %v\n%s%s", err, out, errOut)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var es []journal.Entry
	for line := range strings.Lines(string(b)) {
		var e journal.Entry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("journal line %q: %v", line, err)
		}
		es = append(es, e)
	}
	return es
}

// sessionLines returns the start and end lines of the one session in es.
func sessionLines(t *testing.T, es []journal.Entry) (start, end journal.Entry) {
	t.Helper()
	var events []string
	for _, e := range es {
		events = append(events, e.Event)
	}
	if len(es) != 2 || es[0].Event != journal.SessionStart || es[1].Event != journal.SessionEnd {
		t.Fatalf("journal events %q; want a session's start and end", events)
	}
	for _, e := range es {
		if e.Client == nil || !strings.HasPrefix(e.Session, "session:") || e.Actor == "" || e.Writer.PID != os.Getpid() {
			t.Errorf("%s line %+v: want the client, the session scope, the actor and the writer", e.Event, e)
		}
	}
	return es[0], es[1]
}

// TestStdioSessionJournaled: a stdio session through the proxy with
// --journal leaves a start line with the client's clientInfo and its
// parent process, and an end line saying the client closed it; the
// journal verifies.
func TestStdioSessionJournaled(t *testing.T) {
	file := filepath.Join(t.TempDir(), "journal.jsonl")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		args := append([]string{"--log-level", "error", "--journal", file, "--"}, echoServer...)
		errc <- Run(ctx, args, stdinR, stdoutW, io.Discard)
		stdoutW.Close()
	}()
	io.WriteString(stdinW, initWithClientInfo+"\n")
	if _, err := bufio.NewReader(stdoutR).ReadString('\n'); err != nil {
		t.Fatalf("reading the answer to initialize: %v", err)
	}
	stdinW.Close()
	go io.Copy(io.Discard, stdoutR)
	if err := <-errc; err != nil {
		t.Fatalf("Run: %v", err)
	}

	start, end := sessionLines(t, readJournal(t, file))
	c := start.Client
	if c.Transport != "stdio" || c.Name != "agent-x" || c.Version != "4.2" || c.Protocol != "2025-11-25" || c.MCPSessionID != "" || c.Remote != "" {
		t.Errorf("start line's client %+v; want stdio, agent-x 4.2, 2025-11-25", c)
	}
	if runtime.GOOS == "linux" && (c.Parent == nil || c.Parent.PID != os.Getppid() || c.Parent.Command == "") {
		t.Errorf("start line's parent %+v; want pid %d and its command", c.Parent, os.Getppid())
	}
	if end.Session != start.Session || end.Note != "client closed" || !reflect.DeepEqual(end.Client, c) {
		t.Errorf("end line %+v; want the start's session, and that the client closed it", end)
	}
}

// serveJournaled runs serve in front of echoServer, journaling to file,
// until ctx ends, and returns its URL and what Run returns.
func serveJournaled(t *testing.T, ctx context.Context, file string) (string, <-chan error) {
	t.Helper()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		args := append([]string{"serve", "--listen", "127.0.0.1:0", "--journal", file, "--"}, echoServer...)
		done <- Run(ctx, args, strings.NewReader(""), io.Discard, pw)
		pw.Close()
	}()
	return listeningURL(t, pr), done
}

// TestHTTPSessionJournaled: a session through serve with --journal leaves
// lines naming its Mcp-Session-Id and the client's address, and an end
// line saying the client deleted it.
func TestHTTPSessionJournaled(t *testing.T) {
	file := filepath.Join(t.TempDir(), "journal.jsonl")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	url, done := serveJournaled(t, ctx, file)

	resp := post(t, "POST", url, initWithClientInfo, "")
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %s, session %q", resp.Status, sid)
	}
	if resp := post(t, "DELETE", url, "", sid); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE: %s", resp.Status)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}

	start, end := sessionLines(t, readJournal(t, file))
	c := start.Client
	if c.Transport != "http" || c.MCPSessionID != sid || !strings.HasPrefix(c.Remote, "127.0.0.1:") ||
		c.Name != "agent-x" || c.Version != "4.2" || c.Parent != nil {
		t.Errorf("start line's client %+v; want http, Mcp-Session-Id %s, a loopback address, agent-x 4.2", c, sid)
	}
	if start.Session != "session:"+sid || end.Session != start.Session || end.Note != "deleted" {
		t.Errorf("end line %+v; want session:%s, deleted", end, sid)
	}
}

// post sends one request to serve and reads its whole answer.
func post(t *testing.T, method, url, body, sid string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// TestSessionEndJournaledWithTheUpstream: a session that ends because its
// upstream exited says so, and has its start line though the client sent
// nothing.
func TestSessionEndJournaledWithTheUpstream(t *testing.T) {
	file := filepath.Join(t.TempDir(), "journal.jsonl")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	stdinR, stdinW := io.Pipe() // the client stays connected
	defer stdinW.Close()
	err := Run(ctx, []string{"--max-restarts", "0", "--journal", file, "--", "sh", "-c", "exit 3"}, stdinR, io.Discard, io.Discard)
	if err == nil {
		t.Fatal("Run succeeded with an upstream that exited")
	}
	start, end := sessionLines(t, readJournal(t, file))
	if start.Client.Name != "" || end.Note != "upstream exited" {
		t.Errorf("start %+v, end %+v; want no client name, and that the upstream exited", start.Client, end)
	}
}

// TestStatelessLaneIsOneProcessSession: the stateless requests of an actor
// share a session scope within one serve process only. The lane's name is
// the same in every process, so the scope must not be that name alone, or
// a durable store would match a call to one made before a restart.
func TestStatelessLaneIsOneProcessSession(t *testing.T) {
	var scopes []string
	for range 2 {
		file := filepath.Join(t.TempDir(), "journal.jsonl")
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		url, done := serveJournaled(t, ctx, file)
		req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", "server/discover")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("serve: %v", err)
		}
		start, _ := sessionLines(t, readJournal(t, file))
		scopes = append(scopes, start.Session)
	}
	if !strings.HasPrefix(scopes[0], "session:stateless:") || scopes[0] == scopes[1] {
		t.Errorf("the lanes of two serve processes had the scopes %q; want two of session:stateless:...", scopes)
	}
}
