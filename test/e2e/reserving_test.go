package e2e

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite" // the SQLite driver the proxy's store uses

	"github.com/mcp-idempotent/mcp-idempotent/internal/servicetest"
)

// TestSIGTERMWhileTheStoreReserves: a proxy told to stop while a call
// waits for its SQLite store, whose write lock another process holds, to
// reserve it answers the call that it did not run, rather than closing
// its output with the call unanswered. Nothing ran: the same call made
// again through another proxy runs.
//
// With the lock released after the answer, before the proxy exits, the
// reservation the store then makes is failed before the proxy exits,
// not left in flight to be unknown.
func TestSIGTERMWhileTheStoreReserves(t *testing.T) {
	if direct {
		t.Skip("about the proxy's own store")
	}
	t.Parallel()
	for _, releaseEarly := range []bool{false, true} {
		name := map[bool]string{false: "lock held past the exit", true: "lock released before the exit"}[releaseEarly]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := filepath.Join(t.TempDir(), "records.db")
			sigtermWhileReserving(t, "sqlite:"+db, func() func() { return holdWriteLock(t, db) }, nil, releaseEarly)
		})
	}
}

// TestSIGTERMWhilePostgreSQLReserves is TestSIGTERMWhileTheStoreReserves
// on PostgreSQL, whose reservation, unlike SQLite's, the server may make
// after the proxy has gone: the proxy waits for it a moment, so that it
// is failed rather than left in flight.
func TestSIGTERMWhilePostgreSQLReserves(t *testing.T) {
	if direct {
		t.Skip("about the proxy's own store")
	}
	u := serviceURL(t, "MCPI_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	if u == "" {
		return
	}
	t.Parallel()
	schema := "mcpi_e2e_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	t.Cleanup(func() { servicetest.DropSchema(t, u, schema) })
	table := schema + ".records"
	sigtermWhileReserving(t, withQuery(u, "schema", schema), func() func() { return holdTableLock(t, u, table) },
		func(ctx context.Context) { waitForLockWaiter(t, ctx, u, table) }, true)
}

// waitForLockWaiter returns once a session waits for a lock on table:
// the proxy's reservation has reached the server.
func waitForLockWaiter(t *testing.T, ctx context.Context, url, table string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = $1::regclass", table).Scan(&n); err != nil {
			t.Fatalf("looking for a wait on %s: %v", table, err)
		}
		if n > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the proxy's reservation never waited for %s", table)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// holdTableLock locks table in PostgreSQL, as another transaction's
// LOCK TABLE does, until release is called.
func holdTableLock(t *testing.T, url, table string) (release func()) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(context.Background(), "LOCK TABLE "+table+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatalf("locking %s: %v", table, err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			tx.Rollback(context.Background())
			conn.Close(context.Background())
		})
	}
	t.Cleanup(release)
	return release
}

// sigtermWhileReserving is TestSIGTERMWhileTheStoreReserves on store,
// whose writes hold blocks until it releases them, released before the
// proxy exits if releaseEarly. If set, reserving returns once the
// proxy's reservation waits in the store: the proxy reads the call
// before its goroutine asks the store.
func sigtermWhileReserving(t *testing.T, store string, hold func() (release func()), reserving func(context.Context), releaseEarly bool) {
	// Longer than testContext's: the proxy's exit may wait for the
	// store's busy timeout, and a second proxy follows.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	flags := []string{"--store", store}
	cmd := proxiedWith(t, flags, chargeServer()...)
	stdin, stdout, stderr := startPiped(t, cmd)
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

	release := hold()
	c.send(t, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"charge_card","arguments":{"card":"4242","amount":200}}}`)
	// The ping's answer shows the proxy has read the call: it now waits
	// for the store.
	if got := c.ask(t, 4, "ping", `{}`); !strings.Contains(got, `"result"`) {
		t.Fatalf("the ping got %s", got)
	}
	if reserving != nil {
		reserving(ctx)
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
	if releaseEarly {
		// Later than the exit's first look (100 ms), well within its
		// wait for such reservations (2 s).
		time.AfterFunc(500*time.Millisecond, release)
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
	if releaseEarly {
		out, stderr, code := runProxy(t, ctx, "activity", "list", "--store", store, "--json")
		var recs []struct{ State string }
		if code != 0 || json.Unmarshal([]byte(out), &recs) != nil {
			t.Fatalf("activity list exited %d: %s%s", code, out, stderr)
		}
		if len(recs) != 2 || recs[0].State == "dispatched" || recs[1].State == "dispatched" || recs[0].State == "accepted" || recs[1].State == "accepted" {
			t.Fatalf("the store holds %s; want the first call's execution and the second's failed, none left in flight", out)
		}
	}

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
	// Waiting its turn: the proxy writes now and then (the first
	// call's delivery, its leases).
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
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
	var once sync.Once
	release = func() {
		once.Do(func() {
			conn.ExecContext(context.Background(), "ROLLBACK")
			conn.Close()
		})
	}
	t.Cleanup(release)
	return release
}

// startPiped starts cmd with pipes to its stdin and from its stdout, and
// its stderr kept, and returns the three.
func startPiped(t *testing.T, cmd *exec.Cmd) (io.WriteCloser, io.ReadCloser, *syncBuffer) {
	t.Helper()
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
	return stdin, stdout, stderr
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
