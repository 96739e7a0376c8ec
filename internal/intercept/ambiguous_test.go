package intercept

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// ambiguousStore is a store that, while down, answers every reservation
// with err, after making it if made, and refuses every other operation,
// as a store whose server or link failed mid-call. With entered set, a
// reservation says so there, and waits for release to be closed.
type ambiguousStore struct {
	record.Store
	made             bool
	err              error
	down             atomic.Bool
	entered, release chan struct{}
}

var errStoreDown = errors.New("read tcp 127.0.0.1:6379: connection reset by peer")

func (s *ambiguousStore) Reserve(ctx context.Context, r *record.Record, opts record.ReserveOptions) (*record.Record, bool, error) {
	if !s.down.Load() {
		return s.Store.Reserve(ctx, r, opts)
	}
	if s.entered != nil {
		s.entered <- struct{}{}
		<-s.release
	}
	if s.made {
		if _, _, err := s.Store.Reserve(ctx, r, opts); err != nil {
			return nil, false, err
		}
	}
	return nil, false, s.err
}

func (s *ambiguousStore) Update(ctx context.Context, id string, c record.Change) (*record.Record, error) {
	if s.down.Load() {
		return nil, errStoreDown
	}
	return s.Store.Update(ctx, id, c)
}

func (s *ambiguousStore) Get(ctx context.Context, id string) (*record.Record, error) {
	if s.down.Load() {
		return nil, errStoreDown
	}
	return s.Store.Get(ctx, id)
}

// errNotReplicated stands for redisstore.ErrNotReplicated: a write the
// master made that fewer replicas than asked for confirmed.
var errNotReplicated = errors.New("fewer replicas than asked for confirmed the write")

// A reserveFailure is a way a store's reservation fails: err, the
// reservation made or not.
type reserveFailure struct {
	name string
	made bool
	err  error
}

// reserveFailures are the ways a reservation fails that the interceptor
// must tell apart: one never sent, and one it cannot know was not made.
var reserveFailures = []reserveFailure{
	{"timeout after the write", true, fmt.Errorf("reserving: read tcp 127.0.0.1:6379: i/o timeout: %w", context.DeadlineExceeded)},
	{"timeout before the write", false, fmt.Errorf("reserving: %w", context.DeadlineExceeded)},
	{"answer lost", true, errors.New("reserving: read tcp 127.0.0.1:6379: connection reset by peer")},
	{"connection refused", false, fmt.Errorf("reserving: %w", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)})},
	{"never sent", false, record.NotSent(errors.New("reserving: redis: connection pool timeout"))},
	{"not replicated", true, fmt.Errorf("reserving: %w: 0 of 1 within 1s, so a failover could lose it", errNotReplicated)},
	{"cancelled after the write", true, fmt.Errorf("reserving: %w", context.Canceled)},
	{"cancelled before the write", false, fmt.Errorf("reserving: %w", context.Canceled)},
	// A Redis Cluster record made whose index write failed to dial: the
	// error says "connection refused", but is not one (madeError).
	{"index not written", true, errors.New("reserving: writing its index: dial tcp 127.0.0.1:7001: connect: connection refused")},
}

// TestReservationOfUnknownOutcome: a reservation the store answered with
// an error, whether or not it made it, is not run: its caller is told the
// call was not executed, and nothing goes upstream. One the store made is
// failed once the store answers again, at a lease renewal or when a retry
// finds it, never left in flight under this live process; one never sent
// leaves nothing to settle. Either way a retry then runs, once.
func TestReservationOfUnknownOutcome(t *testing.T) {
	for _, f := range reserveFailures {
		for _, renewal := range []bool{true, false} {
			for _, account := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/renewal=%v/account=%v", f.name, renewal, account), func(t *testing.T) {
					unknownReservation(t, f, renewal, account)
				})
			}
		}
	}
}

func unknownReservation(t *testing.T, f reserveFailure, renewal, account bool) {
	h := newHarness(charged)
	store := &ambiguousStore{Store: h.store, made: f.made, err: f.err}
	opts := Options{Store: store, Hasher: fingerprint.NewRandom()}
	if account {
		// With an account to wait for, the reservation stays accepted;
		// without, it is dispatched in the same step.
		opts.Accounts = map[string]policy.Account{"acct": {Rate: 100, Burst: 10}}
		h.pol.Retry = &policy.RetryRule{MaxAttempts: 1, Account: "acct"}
	}
	h.in = New(opts)
	store.down.Store(true)
	a := h.call(t.Context(), t, chargeCall).only(t)
	if e := string(a.Error); a.Error == nil || !strings.Contains(e, "store is unavailable, so charge_card was not executed") {
		t.Fatalf("first call got %s; want an error saying charge_card was not executed", show(a))
	}
	if n := h.up.calls.Load(); n != 0 {
		t.Fatalf("upstream reached %d times without a reservation; want 0", n)
	}
	if recs := h.store.Records(); len(recs) != btoi(f.made) {
		t.Fatalf("the store holds %d records; the test wants %d", len(recs), btoi(f.made))
	}
	neverSent := errors.Is(f.err, syscall.ECONNREFUSED) || errors.Is(f.err, record.ErrNotSent)
	if n := h.in.abandoned.n.Load(); neverSent && n != 0 {
		t.Fatalf("%d executions left to settle; a reservation never sent leaves none for an exiting proxy to wait on", n)
	}
	store.down.Store(false)
	if renewal {
		h.in.settleAbandonedAll(t.Context()) // as at a lease renewal
		for _, rec := range h.store.Records() {
			if rec.State != record.Failed || rec.History[len(rec.History)-1].Note != lostNote {
				t.Fatalf("after the renewal the reservation is %s; want failed: %s", rec.State, lostNote)
			}
		}
		if n := h.in.abandoned.n.Load(); n != 0 {
			t.Fatalf("%d executions left to settle after the renewal; want 0", n)
		}
	}
	// Bounds a retry left waiting on a reservation nothing settles.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	r := h.call(ctx, t, chargeCall).only(t)
	if r.Error != nil || view(t, r).Meta.Replayed || view(t, r).Content[0].Text != "charge #1" {
		t.Fatalf("the retry got %s; want charge_card run now", show(r))
	}
	if n := h.up.calls.Load(); n != 1 {
		t.Fatalf("upstream reached %d times; want the retry's one", n)
	}
	h.in.Wait(t.Context())
	recs := h.store.Records()
	if len(recs) != 1+btoi(f.made) {
		t.Fatalf("%d records; want %d", len(recs), 1+btoi(f.made))
	}
	for _, rec := range recs {
		if rec.State.InFlight() {
			t.Errorf("execution %s left %s", rec.ID, rec.State)
		}
		if rec.State == record.Failed && rec.History[len(rec.History)-1].Note != lostNote {
			t.Errorf("failed record's note %q; want %q", rec.History[len(rec.History)-1].Note, lostNote)
		}
	}
}

// TestEndWhileReservationOfUnknownOutcome: a call whose session ended
// while the store reserved it, and whose reservation the store then
// answered with an error, is answered once, that it did not run. What
// the store made is failed once it answers again; what it never got
// leaves nothing for an exiting proxy to wait on. A retry then runs, once.
func TestEndWhileReservationOfUnknownOutcome(t *testing.T) {
	for _, f := range reserveFailures {
		t.Run(f.name, func(t *testing.T) {
			h := newHarness(charged)
			store := &ambiguousStore{Store: h.store, made: f.made, err: f.err,
				entered: make(chan struct{}, 1), release: make(chan struct{})}
			store.down.Store(true)
			h.in = New(Options{Store: store, Hasher: fingerprint.NewRandom(), StoreWaits: true})
			req, a := h.request(t, chargeCall)
			ctx := newEndable(context.Background())
			h.in.Handle(ctx, req)
			<-store.entered
			ctx.end(ErrSessionEnded)
			if !h.in.EndReserving(req) {
				t.Fatal("EndReserving = false for a call the store is reserving")
			}
			close(store.release)
			seenThrough(t, h.in)
			if got := a.only(t); !notRun(got) {
				t.Fatalf("the caller got %s; want to hear it did not run", show(got))
			}
			if a.count() != 0 {
				t.Fatalf("the caller got a second answer: %s", show(<-a.got))
			}
			neverSent := errors.Is(f.err, syscall.ECONNREFUSED) || errors.Is(f.err, record.ErrNotSent)
			if n := h.in.abandoned.n.Load(); neverSent && n != 0 {
				t.Fatalf("%d executions left to settle; a reservation never sent leaves none", n)
			}
			store.down.Store(false)
			if err := h.in.SettleAbandoned(t.Context()); err != nil {
				t.Fatal(err)
			}
			recs := h.store.Records()
			if len(recs) != btoi(f.made) {
				t.Fatalf("the store holds %d records; want %d", len(recs), btoi(f.made))
			}
			for _, rec := range recs {
				if rec.State != record.Failed || rec.History[len(rec.History)-1].Note != lostNote {
					t.Fatalf("the reservation is %s; want failed: %s", rec.State, lostNote)
				}
			}
			if v := view(t, h.call(t.Context(), t, chargeCall).only(t)); v.Meta.Replayed || v.Content[0].Text != "charge #1" {
				t.Fatalf("the call made again got %+v; want it run now", v)
			}
			if n := h.up.calls.Load(); n != 1 {
				t.Fatalf("upstream reached %d times; want the retry's one", n)
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
