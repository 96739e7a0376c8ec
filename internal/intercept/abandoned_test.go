package intercept

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// downUpdates is a store whose updates fail while down is set: refused
// before the write, or, with lose, a dispatch written and its answer
// lost. With dispatchOnly, the other updates go through.
type downUpdates struct {
	record.Store
	down, lose, dispatchOnly atomic.Bool
}

func (s *downUpdates) Update(ctx context.Context, id string, c record.Change) (*record.Record, error) {
	if !s.down.Load() || s.dispatchOnly.Load() && c.To != record.Dispatched {
		return s.Store.Update(ctx, id, c)
	}
	if s.lose.Load() && c.To == record.Dispatched {
		s.Store.Update(ctx, id, c)
	}
	return nil, errors.New("context deadline exceeded")
}

// waitAttached waits until execution id has n callers attached.
func waitAttached(t *testing.T, s record.Store, id string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec, err := s.Get(t.Context(), id)
		if err == nil && rec.Attached >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no caller attached to %s", id)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestUnsentExecutionIsSettled: an execution whose dispatch the store
// refused, and whose failure it refused too, is not left in flight under
// this live process, its lease renewed while the callers attached to it
// wait for ever. Once the store answers it is failed (nothing was sent),
// the waiters are told, and the next call runs.
func TestUnsentExecutionIsSettled(t *testing.T) {
	for _, lose := range []bool{false, true} {
		h := newHarness(charged)
		store := &downUpdates{Store: h.store}
		h.in = New(Options{Store: store, Hasher: fingerprint.NewRandom(), Accounts: map[string]policy.Account{"acct": {Rate: 100, Burst: 10}}})
		// With an account to wait for, the dispatch is its own write.
		h.pol.Retry = &policy.RetryRule{MaxAttempts: 1, Account: "acct"}
		store.down.Store(true)
		store.lose.Store(lose)

		a := h.call(t.Context(), t, chargeCall).only(t)
		if a.Error == nil || !strings.Contains(string(a.Error), "store is unavailable") {
			t.Fatalf("lose %v: first call got %+v; want the store's refusal", lose, a)
		}
		rec := h.onlyRecord(t)
		if !rec.State.InFlight() {
			t.Fatalf("lose %v: the store holds %s; the test wants it left in flight", lose, rec.State)
		}
		req, waiter := h.request(t, chargeCall)
		go h.in.Handle(t.Context(), req)
		waitAttached(t, h.store, rec.ID, 1)

		store.down.Store(false)
		h.in.settleAbandonedAll(t.Context()) // as at a lease renewal
		if w := waiter.only(t); w.Error == nil || !strings.Contains(string(w.Error), "failed before it was sent") {
			t.Fatalf("lose %v: the attached caller got %+v; want to hear nothing was sent", lose, w)
		}
		if rec := h.onlyRecord(t); rec.State != record.Failed {
			t.Fatalf("lose %v: the execution is %s; want failed", lose, rec.State)
		}
		if v := view(t, h.call(t.Context(), t, chargeCall).only(t)); v.Content[0].Text != "charge #1" {
			t.Fatalf("lose %v: the next call got %+v; want the first charge, run now", lose, v)
		}
	}
}

// TestUnsentRedispatchStaysUnknown: a re-dispatch of an unknown outcome
// whose claim the store did not confirm sends nothing and leaves the
// execution unknown, never failed (a failed one runs anew, and the first
// send may have run), whether or not the claim was written.
func TestUnsentRedispatchStaysUnknown(t *testing.T) {
	for _, mode := range []struct{ lose, dispatchOnly bool }{{false, false}, {false, true}, {true, false}} {
		lose := mode.lose
		h := newHarness(dies(charged))
		store := &downUpdates{Store: h.store}
		store.dispatchOnly.Store(mode.dispatchOnly)
		h.in = New(Options{Store: store, Hasher: fingerprint.NewRandom()})
		h.pol.OnUnknown = policy.Retry
		if v := view(t, h.call(t.Context(), t, chargeCall).only(t)); !strings.HasPrefix(v.Content[0].Text, "Outcome unknown:") {
			t.Fatalf("lose %v: first call got %+v; want outcome unknown", lose, v)
		}
		store.down.Store(true)
		store.lose.Store(lose)
		v := view(t, h.call(t.Context(), t, chargeCall).only(t))
		if !strings.HasPrefix(v.Content[0].Text, "Outcome unknown:") || !strings.Contains(v.Content[len(v.Content)-1].Text, "not sent again") {
			t.Fatalf("lose %v: the re-dispatch the store refused got %+v; want outcome unknown, not sent again", lose, v)
		}
		store.down.Store(false)
		h.in.settleAbandonedAll(t.Context())
		if rec := h.onlyRecord(t); rec.State != record.Unknown {
			t.Fatalf("lose %v: the execution is %s; want unknown still", lose, rec.State)
		}
		if n := h.up.calls.Load(); n != 1 {
			t.Fatalf("lose %v: upstream reached %d times; want once", lose, n)
		}
	}
}
