package sqlitestore_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/sqlitestore"
)

// helperEnv names the database a helper process works in, and crashEnv,
// when set, makes it the child of TestKilledProcess.
const (
	helperEnv = "SQLITESTORE_HELPER_DB"
	crashEnv  = "SQLITESTORE_HELPER_CRASH"
)

const (
	processes       = 4
	reservesPerProc = 50
)

// TestHelperProcess is a child of TestConcurrentProcesses: it opens the
// database, says "ready", waits for its stdin to close (the start signal),
// reserves one key reservesPerProc times at once, and prints what it got.
// As a child of TestKilledProcess it runs crashChild instead.
func TestHelperProcess(t *testing.T) {
	path := os.Getenv(helperEnv)
	if path == "" {
		t.Skip("a helper process of TestConcurrentProcesses")
	}
	s, err := sqlitestore.Open(context.Background(), path, sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if os.Getenv(crashEnv) != "" {
		crashChild(t, s)
		return
	}
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)

	var wins atomic.Int32
	ids := make([]string, reservesPerProc)
	var wg sync.WaitGroup
	for i := range reservesPerProc {
		wg.Go(func() {
			got, won, err := s.Reserve(context.Background(), newRecord("hot"), record.ReserveOptions{})
			if err != nil {
				t.Error(err)
				return
			}
			if won {
				wins.Add(1)
			}
			ids[i] = got.ID
		})
	}
	wg.Wait()
	fmt.Printf("wins %d\n", wins.Load())
	for _, id := range ids {
		fmt.Printf("got %s\n", id)
	}
}

// TestConcurrentProcesses runs processes copies of this test binary, which
// create the database together and then reserve one key at the same moment:
// exactly one reservation in all of them wins.
func TestConcurrentProcesses(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("in a helper process")
	}
	path := dbPath(t)
	type child struct {
		cmd    *exec.Cmd
		stdin  io.WriteCloser
		stdout *bufio.Scanner
		stderr strings.Builder
	}
	children := make([]*child, processes)
	for i := range children {
		c := &child{cmd: exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")}
		c.cmd.Env = append(os.Environ(), helperEnv+"="+path)
		c.cmd.Stderr = &c.stderr
		var err error
		if c.stdin, err = c.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		out, err := c.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		c.stdout = bufio.NewScanner(out)
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		children[i] = c
	}
	// All open the database first, then all start reserving together.
	for i, c := range children {
		if !c.stdout.Scan() || c.stdout.Text() != "ready" {
			c.stdin.Close()
			c.cmd.Wait()
			t.Fatalf("process %d did not get ready: %q\n%s", i, c.stdout.Text(), c.stderr.String())
		}
	}
	for _, c := range children {
		c.stdin.Close()
	}

	wins := 0
	ids := make(map[string]int)
	for i, c := range children {
		var out []string
		for c.stdout.Scan() {
			line := c.stdout.Text()
			out = append(out, line)
			if n, ok := strings.CutPrefix(line, "wins "); ok {
				w, err := strconv.Atoi(n)
				if err != nil {
					t.Fatalf("process %d: %q", i, line)
				}
				wins += w
			}
			if id, ok := strings.CutPrefix(line, "got "); ok {
				ids[id]++
			}
		}
		if err := c.cmd.Wait(); err != nil {
			t.Fatalf("process %d: %v\n%s\n%s", i, err, strings.Join(out, "\n"), c.stderr.String())
		}
	}
	if wins != 1 {
		t.Fatalf("%d reservations won across %d processes; want exactly 1", wins, processes)
	}
	if len(ids) != 1 {
		t.Fatalf("the processes got %d different executions (%v); all must share one", len(ids), ids)
	}
	s := open(t, path, sqlitestore.Options{})
	for id, n := range ids {
		if n != processes*reservesPerProc {
			t.Fatalf("%d answers; want %d", n, processes*reservesPerProc)
		}
		got, err := s.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if want := processes*reservesPerProc - 1; got.Attached != want {
			t.Errorf("Attached = %d; want %d", got.Attached, want)
		}
	}
}

// crashChild completes one execution and leaves another dispatched under
// a one-minute lease, prints both ids, and waits to be killed.
func crashChild(t *testing.T, s *sqlitestore.Store) {
	ctx := context.Background()
	done, sent := newRecord("done"), newRecord("sent")
	sent.Owner, sent.LeaseUntil = "proxy-child", time.Now().Add(time.Minute)
	for _, r := range []*record.Record{done, sent} {
		if _, won, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil || !won {
			t.Fatalf("Reserve = won %v, %v", won, err)
		}
		if _, err := s.Update(ctx, r.ID, record.Change{To: record.Dispatched}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Update(ctx, done.ID, record.Change{To: record.Completed, Result: json.RawMessage(`{"ok":true}`)}); err != nil {
		t.Fatal(err)
	}
	fmt.Println(done.ID, sent.ID)
	io.Copy(io.Discard, os.Stdin) // until killed
}

// TestKilledProcess kills -9 a process that has just committed, then
// finds its work in the file: the completed execution with its result,
// and the one it had sent settled unknown once its lease lapsed.
func TestKilledProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "" {
		t.Skip("in a helper process")
	}
	path := dbPath(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+path, crashEnv+"=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the child printed nothing:\n%s", stderr.String())
	}
	var doneID, sentID string
	if _, err := fmt.Sscan(sc.Text(), &doneID, &sentID); err != nil {
		t.Fatalf("child said %q: %v", sc.Text(), err)
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no Close, no cleanup
		t.Fatal(err)
	}
	cmd.Wait()

	later := func() time.Time { return time.Now().Add(2 * time.Minute) }
	s := open(t, path, sqlitestore.Options{Now: later})
	ctx := t.Context()
	done, err := s.Get(ctx, doneID)
	if err != nil || done.State != record.Completed || string(done.Result) != `{"ok":true}` {
		t.Fatalf("the completed execution after kill -9: %+v, %v", done, err)
	}
	got, won, err := s.Reserve(ctx, newRecord("sent"), record.ReserveOptions{})
	if err != nil || won || got.ID != sentID || got.State != record.Unknown {
		t.Fatalf("Reserve over the killed process's sent execution = %+v won=%v %v; want %s unknown", got, won, err, sentID)
	}
}
