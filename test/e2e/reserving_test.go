package e2e

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the SQLite driver the proxy's store uses
)

// TestSIGTERMWhileTheStoreReserves: a proxy told to stop while a call
// waits for its SQLite store, whose write lock another process holds, to
// reserve it answers the call that it did not run, rather than closing
// its output with the call unanswered. Nothing ran: the same call made
// again through another proxy runs.
func TestSIGTERMWhileTheStoreReserves(t *testing.T) {
	if direct {
		t.Skip("about the proxy's own store")
	}
	t.Parallel()
	// Longer than testContext's: the proxy's exit may wait for the
	// store's busy timeout, and a second proxy follows.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	db := filepath.Join(t.TempDir(), "records.db")
	flags := []string{"--store", "sqlite:" + db}
	cmd := proxiedWith(t, flags, chargeServer()...)
	stderr := new(syncBuffer)
	cmd.Stderr = stderr
	cmd.WaitDelay = 2 * time.Second
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
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("stderr of %s:\n%s", cmd, stderr.tail(transcriptTail))
		}
	})
	c := &rawClient{w: stdin, frames: readFrames(stdout)}
	c.ask(t, 1, "initialize", `{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}`)
	c.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	// A first call sets the store up, and the proxy learns the tools.
	if got := c.ask(t, 2, "tools/call", `{"name":"charge_card","arguments":{"card":"4242","amount":100}}`); !strings.Contains(got, `"result"`) {
		t.Fatalf("the first call got %s; want its result", got)
	}

	release := holdWriteLock(t, db)
	c.send(t, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"charge_card","arguments":{"card":"4242","amount":200}}}`)
	// The ping's answer shows the proxy has read the call: it now waits
	// for the store.
	if got := c.ask(t, 4, "ping", `{}`); !strings.Contains(got, `"result"`) {
		t.Fatalf("the ping got %s", got)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	got, ok := c.next(ctx)
	if !ok {
		t.Fatal("the proxy closed its output with the call unanswered")
	}
	if !strings.Contains(got, `"id":3,"error"`) || !strings.Contains(got, "the session ended before charge_card was executed; it did not run") {
		t.Fatalf("the call got %s; want an error saying it did not run", got)
	}
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if err != nil {
			t.Fatalf("the proxy exited with %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the proxy did not exit after SIGTERM")
	}
	release()

	p := connect(t, ctx, proxiedWith(t, flags, chargeServer()...))
	res := charge(t, ctx, p, "4242", 200)
	if replayed(res) || executions(t, ctx, p) != 1 {
		t.Fatalf("the call made again got %s (replayed %v); want it run now", firstText(res), replayed(res))
	}
}

// holdWriteLock takes the write lock of the SQLite file at path, as
// another process's open transaction does, until release is called.
func holdWriteLock(t *testing.T, path string) (release func()) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatalf("taking the write lock: %v", err)
	}
	done := false
	release = func() {
		if !done {
			done = true
			conn.ExecContext(context.Background(), "ROLLBACK")
			conn.Close()
		}
	}
	t.Cleanup(release)
	return release
}

// rawClient writes JSON-RPC frames to a stdio server and reads its
// answers, line by line.
type rawClient struct {
	w      io.Writer
	frames <-chan string
}

// readFrames reads r's lines on a goroutine of its own until it ends,
// and then closes the channel.
func readFrames(r io.Reader) <-chan string {
	ch := make(chan string, 16)
	go func() {
		defer close(ch)
		s := bufio.NewScanner(r)
		s.Buffer(nil, 1<<20)
		for s.Scan() {
			ch <- s.Text()
		}
	}()
	return ch
}

func (c *rawClient) send(t *testing.T, frame string) {
	t.Helper()
	if _, err := io.WriteString(c.w, frame+"\n"); err != nil {
		t.Fatalf("writing %s: %v", frame, err)
	}
}

// next returns the next frame, or false once the output ended.
func (c *rawClient) next(ctx context.Context) (string, bool) {
	select {
	case f, ok := <-c.frames:
		return f, ok
	case <-ctx.Done():
		return "", false
	}
}

// ask sends request id and returns its answer, skipping what comes
// before it (notifications).
func (c *rawClient) ask(t *testing.T, id int, method, params string) string {
	t.Helper()
	c.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, params))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		f, ok := c.next(ctx)
		if !ok {
			t.Fatalf("no answer to %s", method)
		}
		var m struct{ ID json.RawMessage }
		if json.Unmarshal([]byte(f), &m) == nil && string(m.ID) == fmt.Sprint(id) {
			return f
		}
	}
}
