package cli

import (
	"bufio"
	"bytes"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// buildBinary builds cmd/mcp-idempotent into a temporary directory.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "mcp-idempotent")
	cmd := exec.Command("go", "build", "-o", bin, "../../cmd/mcp-idempotent")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// twoSpeedServer answers tools/call "a" after 1 s, any other after 3 s.
var twoSpeedServer = []string{"/bin/sh", "-c", `while IFS= read -r l; do
id=$(printf '%s' "$l" | sed 's/.*"id":\([^,}]*\).*/\1/')
case "$l" in
*'"tools/call"'*) d=3; case "$l" in *'"name":"a"'*) d=1;; esac
  (sleep $d; printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"done"}]}}\n' "$id") & ;;
*'"tools/list"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[]}}\n' "$id";;
*'"id":'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"sh","version":"1"}}}\n' "$id";;
esac; done; wait`}

// TestClientGoneCallsStillRecorded: a stdio client that goes away
// (it exits or crashes: both its pipes close) while two calls are under
// way. The proxy must wind down as on the end of its stdin
// (docs/concepts.md, Shutdown: calls in flight may finish for up to 10 s)
// and record each outcome: the second call's is "completed, result not
// delivered", the case the product exists for, and the journal gets its
// session end and its clean-stop checkpoint. It must not be killed by
// SIGPIPE at its first write to the closed stdout.
func TestClientGoneCallsStillRecorded(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	journalFile := filepath.Join(dir, "journal.jsonl")
	store := "sqlite:" + filepath.Join(dir, "records.db")
	args := append([]string{"--store", store, "--journal", journalFile, "--log-level", "debug", "--"}, twoSpeedServer...)
	cmd := exec.Command(bin, args...)
	var stderr syncBuf
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	out := bufio.NewReader(stdout)
	io.WriteString(stdin, initWithClientInfo+"\n")
	if _, err := out.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	io.WriteString(stdin, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	io.WriteString(stdin, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"a","arguments":{}}}`+"\n")
	io.WriteString(stdin, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"b","arguments":{}}}`+"\n")
	time.Sleep(300 * time.Millisecond) // both dispatched
	// The client goes: both ends of its pipes close.
	stdin.Close()
	stdout.Close()
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Errorf("the proxy was killed by %v (Wait: %v) once its client had gone; want it to wind down and exit", ws.Signal(), err)
	}
	var states []string
	ended := false
	for _, e := range readJournal(t, journalFile) {
		if e.Event == "session_end" {
			ended = true
		}
		if e.Tool != "" {
			states = append(states, e.Tool+" "+e.State)
		}
	}
	if !ended || !slices.Contains(states, "b completed") {
		t.Errorf("journal: session end %v, transitions %q; want the session's end and b completed\nstderr:\n%s", ended, states, stderr.String())
	}
}
