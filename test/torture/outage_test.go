//go:build unix

package torture

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-idempotent/mcp-idempotent/internal/skipnote"
)

// TestStoreKilledUnderLoad: two proxies share a Redis of the test's own
// while callers pay distinct intents through them. Redis is killed
// (kill -9) under that load and started again on its files. While it is
// down, side effects fail closed (the store is unavailable, nothing runs)
// and reads pass. After it is back, every intent ends with one answer
// that the ledger bears out: none ran twice, and every answer given is
// still what a retry is told, so none was lost.
func TestStoreKilledUnderLoad(t *testing.T) {
	ctx := testContext(t, 10*time.Minute)
	rng := seeded(t)
	run := rng.Uint32()
	r := startRedis(t)
	store := fmt.Sprintf("redis://127.0.0.1:%d/0?prefix=mcpi-torture:", r.port)
	ledger := filepath.Join(t.TempDir(), "ledger")
	// A short lease: a reservation whose answer the kill lost is settled
	// by its lease.
	flags := []string{"--store", store, "--scope", "actor", "--actor", "torture", "--lease", "2s"}
	proxies := []*session{
		connect(t, ctx, proxyCommand(t, ledger, flags...)),
		connect(t, ctx, proxyCommand(t, ledger, flags...)),
	}

	n := size.outageCalls
	intents := make(chan string, n)
	for i := range n {
		intents <- fmt.Sprintf("o%08x-%d", run, i)
	}
	close(intents)
	var (
		mu      sync.Mutex // protects told
		told    = map[string]*mcp.CallToolResult{}
		settled atomic.Int32 // intents with their answer
		refused atomic.Int32 // calls refused for want of the store
	)
	quarter, refusals := make(chan struct{}), make(chan struct{})
	var once1, once2 sync.Once
	var wg sync.WaitGroup
	for w := range 4 {
		s := proxies[w%len(proxies)]
		wg.Go(func() {
			for intent := range intents {
				res := payUntilSettled(t, ctx, s, intent, func() {
					if refused.Add(1) == 8 {
						once2.Do(func() { close(refusals) })
					}
				})
				if res == nil {
					return
				}
				mu.Lock()
				told[intent] = res
				mu.Unlock()
				if int(settled.Add(1)) == n/4 {
					once1.Do(func() { close(quarter) })
				}
			}
		})
	}

	// The outage, at a quarter of the way, under load.
	select {
	case <-quarter:
	case <-ctx.Done():
		t.Fatal("a quarter of the intents never settled")
	}
	r.kill()
	select {
	case <-refusals:
	case <-ctx.Done():
		t.Fatal("with the store killed, no call was refused")
	}
	probe := fmt.Sprintf("o%08x-probe", run)
	for i, s := range proxies {
		if _, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "balance"}); err != nil {
			t.Errorf("proxy %d, store down: a read-only call failed: %v", i, err)
		}
		if res, err := s.pay(ctx, "pay", probe, 0); err == nil || !strings.Contains(err.Error(), "store is unavailable") {
			t.Errorf("proxy %d, store down: a side effect got %v, %q; want an error saying the store is unavailable", i, err, firstText(res))
		}
	}
	r.start(t)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	lines := readLedger(t, ledger)
	if l := lines[probe]; len(l) != 0 {
		t.Errorf("the side effect refused while the store was down ran: %v", l)
	}
	counts := map[string]int{}
	for i := range n {
		intent := fmt.Sprintf("o%08x-%d", run, i)
		res, l := told[intent], lines[intent]
		if len(l) > 1 {
			t.Errorf("intent %s ran %d times: %v", intent, len(l), l)
			continue
		}
		switch {
		case isUnknown(res):
			counts["unknown"]++
		case len(l) == 1 && !res.IsError && firstText(res) == paidText(intent, l[0].pid):
			counts["paid"]++
		default:
			t.Errorf("intent %s: told %q; the ledger holds %v", intent, firstText(res), l)
			continue
		}
		// The store came back with its records: a retry is told the same.
		again, err := proxies[i%len(proxies)].pay(ctx, "pay", intent, 0)
		if err != nil || firstText(again) != firstText(res) {
			t.Errorf("intent %s: told %q, and after the store came back %q (%v)", intent, firstText(res), firstText(again), err)
		}
	}
	if d := duplicates(readLedger(t, ledger)); d != 0 {
		t.Errorf("%d duplicate side effects", d)
	}
	t.Logf("%d intents through a store killed and restarted under load: %v; %d calls refused while it was down", n, counts, refused.Load())
}

// payUntilSettled pays intent through s until it is answered, as a client
// that retries would: a call refused for want of the store (refused is
// then called), failed before it was sent, or run with its outcome not yet
// recorded is sent again after a pause (the client's backoff, not a wait
// for an event). It returns the answer, or nil after failing the test on
// any other error: an execution handed back still in flight ("execution
// exe_... is accepted") among them.
func payUntilSettled(t *testing.T, ctx context.Context, s *session, intent string, refused func()) *mcp.CallToolResult {
	pause := 10 * time.Millisecond
	for attempt := 0; ; attempt++ {
		res, err := s.pay(ctx, "pay", intent, 0)
		switch {
		case err == nil:
			return res
		case strings.Contains(err.Error(), "store is unavailable"):
			refused()
		case strings.Contains(err.Error(), "before it was sent"),
			strings.Contains(err.Error(), "could not be recorded yet; calling again attaches to it"):
		default:
			t.Errorf("intent %s, attempt %d: %v", intent, attempt+1, err)
			return nil
		}
		select {
		case <-time.After(pause):
			pause = min(2*pause, 200*time.Millisecond)
		case <-ctx.Done():
			t.Errorf("intent %s never settled (%d attempts): %v", intent, attempt+1, err)
			return nil
		}
	}
}

// A privateRedis is a redis-server of the test's own, on a free loopback
// port, that keeps every write in its append-only file (fsync on each), so
// that a kill -9 loses nothing it acknowledged.
type privateRedis struct {
	bin, dir string
	port     int
	cmd      *exec.Cmd
}

// startRedis starts a privateRedis; it is killed when the test ends.
func startRedis(t *testing.T) *privateRedis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		skipnote.Unavailable(t, "Redis outage", "redis-server is not installed: this test kills and restarts a Redis of its own")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	r := &privateRedis{bin: bin, dir: t.TempDir(), port: port}
	r.start(t)
	t.Cleanup(r.kill)
	return r
}

// start starts the server on its files and waits until it says it is ready.
func (r *privateRedis) start(t *testing.T) {
	t.Helper()
	out := new(output)
	r.cmd = exec.Command(r.bin, "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--dir", r.dir,
		"--save", "", "--appendonly", "yes", "--appendfsync", "always")
	r.cmd.Stdout = out
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := out.waitFor(testContext(t, time.Minute), "Ready to accept connections"); err != nil {
		t.Fatalf("redis-server on port %d: %v\n%s", r.port, err, out)
	}
}

// kill stops the server with SIGKILL, if it runs.
func (r *privateRedis) kill() {
	if r.cmd != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
		r.cmd = nil
	}
}
