package redisstore_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/redisstore"
)

// gate is a client hook that holds the first pipelines of scripts until
// released, so that calls queue behind the store's busy senders, and
// records the commands of those after them.
type gate struct {
	holding chan struct{} // gets a value as each held pipeline waits
	release chan struct{} // closed to let the held pipelines go

	mu       sync.Mutex // protects the fields below
	held     int        // pipelines still to hold
	noScript int        // EVALSHAs still to send with a hash the server does not know
	sent     [][]string // the names of the commands of each pipeline not held
}

func newGate(held int) *gate {
	return &gate{holding: make(chan struct{}, held), release: make(chan struct{}), held: held}
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if n := cmds[0].Name(); n != "evalsha" && n != "eval" && n != "fcall" {
			// Not the store's scripts: a new connection's handshake
			// (its subscription's too) goes through the hook.
			return next(ctx, cmds)
		}
		g.mu.Lock()
		if g.held > 0 {
			g.held--
			g.mu.Unlock()
			g.holding <- struct{}{}
			<-g.release
			return next(ctx, cmds)
		}
		var names []string
		for _, c := range cmds {
			if c.Name() == "evalsha" && g.noScript > 0 {
				// As after SCRIPT FLUSH, for this command only: the
				// server answers NOSCRIPT and runs nothing.
				g.noScript--
				c.Args()[1] = "0000000000000000000000000000000000000000"
			}
			names = append(names, c.Name())
		}
		g.sent = append(g.sent, names)
		g.mu.Unlock()
		return next(ctx, cmds)
	}
}

// hold makes every sender of s busy with a reservation held by g, and
// returns a function that releases them and waits for their callers.
func hold(t *testing.T, s *redisstore.Store, g *gate) func() {
	t.Helper()
	var wg sync.WaitGroup
	for i := range redisstore.Senders {
		wg.Go(func() {
			if _, _, err := s.Reserve(context.Background(), newRecord("held"+strconv.Itoa(i)), record.ReserveOptions{}); err != nil {
				t.Errorf("a held reservation: %v", err)
			}
		})
	}
	for range redisstore.Senders {
		select {
		case <-g.holding:
		case <-time.After(10 * time.Second):
			t.Fatal("the senders never sent the reservations to hold")
		}
	}
	var once sync.Once
	release := func() {
		once.Do(func() { close(g.release) })
		wg.Wait()
	}
	t.Cleanup(release) // before the store closes, should the test fail first
	return release
}

// queued waits until n calls wait in the queue of s.
func queued(t *testing.T, s *redisstore.Store, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for redisstore.Queued(s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls queued; want %d", redisstore.Queued(s), n)
		}
		runtime.Gosched()
	}
}

// TestBatchedCallsAnswerAlone: calls that wait together are sent in
// fewer round trips than calls, and each gets its own answer: a
// reservation won, an update refused with ErrConflict, and a script the
// server had forgotten, sent again in full on its own (as EVALSHA: see
// TestFunctionsLoadedAgain for the functions).
func TestBatchedCallsAnswerAlone(t *testing.T) {
	url := serverURL(t)
	s := openWith(t, url, redisstore.Options{Prefix: newPrefix(t, url), Eval: true})
	ctx := t.Context()
	delivered, err := recordtest.Execute(ctx, s, "delivered")
	if err != nil {
		t.Fatal(err)
	}
	g := newGate(redisstore.Senders)
	redisstore.Client(s).AddHook(g)
	release := hold(t, s, g)

	const n = 8
	recs := make([]*record.Record, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if i == 0 {
				_, errs[i] = s.Update(ctx, delivered.ID, record.Change{To: record.Dispatched})
				return
			}
			var won bool
			recs[i], won, errs[i] = s.Reserve(ctx, newRecord("batched"+strconv.Itoa(i)), record.ReserveOptions{Dispatch: true})
			if errs[i] == nil && !won {
				errs[i] = errors.New("not won")
			}
		})
	}
	queued(t, s, n)
	g.mu.Lock()
	g.noScript = 1
	g.mu.Unlock()
	release()
	wg.Wait()

	if !errors.Is(errs[0], record.ErrConflict) {
		t.Errorf("an update from delivered to dispatched, batched: %v; want ErrConflict", errs[0])
	}
	for i := 1; i < n; i++ {
		if errs[i] != nil || recs[i].State != record.Dispatched {
			t.Errorf("reservation %d, batched: %v, %+v; want won and dispatched", i, errs[i], recs[i])
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var again int
	for _, names := range g.sent {
		if names[0] == "eval" {
			again++
			// The call's script and, for an update, its index.
			if len(names) > 2 || len(names) == 2 && names[1] != "set" {
				t.Errorf("the script the server had forgotten was sent again with %v; want its call alone", names)
			}
		}
	}
	if again != 1 {
		t.Errorf("%d pipelines sent scripts in full, %v; want 1", again, g.sent)
	}
	if rt := len(g.sent) - again; rt >= n {
		t.Errorf("%d calls waiting together took %d round trips, %v; want fewer", n, rt, g.sent)
	}
}

// TestQueuedCallLeaves: a caller whose ctx ends while its call waits
// for a sender gets ctx.Err(), and its script is never run.
func TestQueuedCallLeaves(t *testing.T) {
	url := serverURL(t)
	s := open(t, url, newPrefix(t, url), nil)
	g := newGate(redisstore.Senders)
	redisstore.Client(s).AddHook(g)
	release := hold(t, s, g)

	ctx, cancel := context.WithCancel(t.Context())
	r := newRecord("left")
	done := make(chan error, 1)
	go func() {
		_, _, err := s.Reserve(ctx, r, record.ReserveOptions{})
		done <- err
	}()
	queued(t, s, 1)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("a reservation whose caller left while queued: %v; want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a caller that left its queued call was not answered while the senders were busy")
	}
	release()
	if _, err := s.Get(t.Context(), r.ID); !errors.Is(err, record.ErrNotFound) {
		t.Errorf("Get of the reservation left in the queue: %v; want ErrNotFound: it was sent", err)
	}
	if _, won, err := s.Reserve(t.Context(), newRecord("left"), record.ReserveOptions{}); err != nil || !won {
		t.Errorf("a reservation of the key left: won=%v, %v; want won", won, err)
	}
}
