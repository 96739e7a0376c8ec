//go:build unix

package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestClientStopsReading: a stdio client closes the pipe it reads the
// proxy's answers from, and goes on writing calls. Once a write to it
// fails, the proxy takes no call from it (docs/concepts.md, Shutdown):
// it says on stderr that the client stopped reading, ends the session as
// at the end of its input, with the call under way recorded, and exits
// 1. A retry of that call on a new connection gets its recorded outcome;
// the later calls never ran.
func TestClientStopsReading(t *testing.T) {
	if direct {
		t.Skip("about the proxy's own end")
	}
	ctx := testContext(t)
	dir := t.TempDir()
	store := "sqlite:" + filepath.Join(dir, "records.db")
	ledger := filepath.Join(dir, "ledger")
	// With FILE.crashed present, pay never crashes: it appends the
	// execution id and answers.
	if err := os.WriteFile(ledger+".crashed", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	journalFile := filepath.Join(dir, "journal.jsonl")
	flags := []string{"--store", store, "--scope", "actor", "--actor", "alice", "--journal", journalFile}
	cmd := proxiedWith(t, flags, chargeServer("-ledger", ledger)...)
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := new(syncBuffer)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	inR.Close()
	outW.Close()
	defer inW.Close()
	hello := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"deaf","version":"1"}}}` + "\n"
	if _, err := inW.WriteString(hello); err != nil {
		t.Fatal(err)
	}
	outR.SetReadDeadline(time.Now().Add(30 * time.Second)) // os.Pipe's ends are polled
	if answer, err := bufio.NewReader(outR).ReadString('\n'); err != nil || !strings.Contains(answer, `"result"`) {
		t.Fatalf("initialize answered %q, %v", answer, err)
	}
	pay := func(id int, card string) {
		// The proxy may have exited, and the pipe with it.
		fmt.Fprintf(inW, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"pay","arguments":{"card":%q,"amount":30}}}`+"\n", id, card)
	}
	fmt.Fprintln(inW, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	outR.Close() // the client stops reading
	pay(2, "4242")
	if err := stderr.waitFor(ctx, "the client stopped reading"); err != nil {
		t.Errorf("%v; stderr:\n%s", err, stderr)
	}
	for i := 3; i <= 5; i++ {
		pay(i, fmt.Sprint(i))
	}
	inW.Close()
	err = cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			t.Fatalf("the proxy was killed by %v; stderr:\n%s", ws.Signal(), stderr)
		}
	}
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Errorf("the proxy exited %d; want 1. stderr:\n%s", code, stderr)
	}
	if ids := ledgerIDs(t, ledger); len(ids) != 1 {
		t.Errorf("the upstream ran pay %d times (%q); want once, the call sent before the proxy's first failed write", len(ids), ids)
	}

	if end := lastJournalLine(t, journalFile); end.Event != "session_end" || end.Note != "client stopped reading" {
		t.Errorf("the journal's last line %+v; want the session's end, noted \"client stopped reading\"", end)
	}

	res, _ := paySession(t, store, ledger, "")
	if text := text(res); !strings.Contains(text, "payment #1") {
		t.Errorf("a retry on a new connection got %q; want the recorded payment #1", text)
	}
	if ids := ledgerIDs(t, ledger); len(ids) != 1 {
		t.Errorf("after the retry the upstream had run pay %d times; want once", len(ids))
	}
}

// lastJournalLine reads the last line of the journal file.
func lastJournalLine(t *testing.T, file string) (last struct{ Event, Note string }) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatal(err)
	}
	return last
}
