package intercept

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// heldReserve is a store whose reservations each say so on entered, then
// wait until release is closed and answer with err, if set, after making
// the reservation all the same.
type heldReserve struct {
	record.Store
	entered chan struct{}
	release chan struct{}
	err     error
}

func (s *heldReserve) Reserve(ctx context.Context, r *record.Record, opts record.ReserveOptions) (*record.Record, bool, error) {
	s.entered <- struct{}{}
	<-s.release
	rec, won, err := s.Store.Reserve(ctx, r, opts)
	if s.err != nil {
		return nil, false, s.err
	}
	return rec, won, err
}

// reservingCall starts a call on a harness whose store waits, and returns
// once the call waits for its reservation.
func reservingCall(t *testing.T, h *harness, store *heldReserve) (*Request, *endable, *answers) {
	t.Helper()
	h.in = New(Options{Store: store, Hasher: fingerprint.NewRandom(), StoreWaits: true})
	req, a := h.request(t, chargeCall)
	ctx := newEndable(context.Background())
	h.in.Handle(ctx, req)
	select {
	case <-store.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the call never asked the store for its reservation")
	}
	return req, ctx, a
}

// seenThrough waits for the interceptor's work, the reservation's
// included, to be done.
func seenThrough(t *testing.T, in *Interceptor) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := in.Wait(ctx); err != nil {
		t.Fatalf("the reservation was not seen through: %v", err)
	}
}

// notRun reports whether a is the answer that the call did not run, the
// session having ended.
func notRun(a Answer) bool {
	return a.Error != nil && strings.Contains(string(a.Error), "the session ended before charge_card was executed; it did not run")
}

// show is a as text, for a failure's message.
func show(a Answer) string {
	if a.Error != nil {
		return "error " + string(a.Error)
	}
	return "result " + string(a.Result)
}

// TestEndWhileReserving: a call whose session ends while a slow store
// reserves it is answered at once that it did not run; the reservation
// the store then makes is failed, and nothing is sent upstream.
func TestEndWhileReserving(t *testing.T) {
	h := newHarness(charged)
	store := &heldReserve{Store: h.store, entered: make(chan struct{}, 1), release: make(chan struct{})}
	req, ctx, a := reservingCall(t, h, store)
	ctx.end(ErrSessionEnded)
	if !h.in.EndReserving(req) {
		t.Fatal("EndReserving = false for a call the store is reserving")
	}
	if got := a.only(t); !notRun(got) {
		t.Fatalf("the caller got %s; want to hear it did not run", show(got))
	}
	close(store.release)
	seenThrough(t, h.in)
	if a.count() != 0 {
		t.Fatalf("the caller got a second answer: %s", show(<-a.got))
	}
	rec := h.onlyRecord(t)
	if rec.State != record.Failed || !strings.Contains(rec.History[len(rec.History)-1].Note, "session ended") {
		t.Fatalf("the reservation is %s (%+v); want failed, the session having ended", rec.State, rec.History)
	}
	if n := h.up.calls.Load(); n != 0 {
		t.Fatalf("the upstream got the call %d times; want never", n)
	}
	if v := view(t, h.call(t.Context(), t, chargeCall).only(t)); v.Content[0].Text != "charge #1" {
		t.Fatalf("the call made again got %+v; want it run now", v)
	}
}

// TestWaitLate: WaitLate waits for a call its session's end answered
// until the store is done with its reservation, and the reservation is
// failed by then, so a proxy exiting after it leaves nothing in flight.
func TestWaitLate(t *testing.T) {
	h := newHarness(charged)
	store := &heldReserve{Store: h.store, entered: make(chan struct{}, 1), release: make(chan struct{})}
	req, ctx, a := reservingCall(t, h, store)
	ctx.end(ErrSessionEnded)
	h.in.EndReserving(req)
	a.only(t)
	// Not done: the store still holds the reservation.
	short, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := h.in.WaitLate(short); err == nil {
		t.Fatal("WaitLate returned while the store still reserved the call")
	}
	close(store.release)
	long, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if err := h.in.WaitLate(long); err != nil {
		t.Fatalf("WaitLate = %v once the store answered", err)
	}
	if rec := h.onlyRecord(t); rec.State != record.Failed {
		t.Fatalf("after WaitLate the reservation is %s; want failed", rec.State)
	}
	// Nothing else to wait for: a call not ended at reserving counts not.
	if h.in.EndReserving(req) {
		t.Error("EndReserving answered a call a second time")
	}
	if err := h.in.WaitLate(long); err != nil {
		t.Errorf("WaitLate = %v with nothing left", err)
	}
}

// TestEndWhileReservingStoreRefuses: a reservation whose answer the store
// lost after the session's end answered its call is failed once the
// store answers, as any lost reservation is, and its call is not
// answered twice.
func TestEndWhileReservingStoreRefuses(t *testing.T) {
	h := newHarness(charged)
	store := &heldReserve{Store: h.store, entered: make(chan struct{}, 1), release: make(chan struct{}),
		err: errors.New("context deadline exceeded")}
	req, ctx, a := reservingCall(t, h, store)
	ctx.end(ErrSessionEnded)
	h.in.EndReserving(req)
	close(store.release)
	seenThrough(t, h.in)
	if got := a.only(t); !notRun(got) {
		t.Fatalf("the caller got %s; want to hear it did not run", show(got))
	}
	if err := h.in.SettleAbandoned(t.Context()); err != nil {
		t.Fatal(err)
	}
	if rec := h.onlyRecord(t); rec.State != record.Failed {
		t.Fatalf("the reservation is %s; want failed", rec.State)
	}
}

// TestEndRacesReservation: the session's end and the store's answer come
// at once. Either the call is answered that it did not run, and is never
// sent, its reservation failed; or it goes on as a call reserved before
// the end does, sent and answered; never both, and never neither.
func TestEndRacesReservation(t *testing.T) {
	var ended, sent int
	for i := range 200 {
		h := newHarness(charged)
		store := &heldReserve{Store: h.store, entered: make(chan struct{}, 1), release: make(chan struct{})}
		req, ctx, a := reservingCall(t, h, store)
		go close(store.release)
		for range i % 40 {
			runtime.Gosched() // the two meet at a different point each round
		}
		ctx.end(ErrSessionEnded)
		answered := h.in.EndReserving(req)
		got := a.only(t)
		seenThrough(t, h.in)
		if a.count() != 0 {
			t.Fatalf("the caller got a second answer: %s", show(<-a.got))
		}
		rec := h.onlyRecord(t)
		calls := h.up.calls.Load()
		if answered {
			ended++
			if !notRun(got) || calls != 0 || rec.State != record.Failed {
				t.Fatalf("answered at the end: the caller got %s, the upstream %d calls, the record is %s; want not run, none, failed",
					show(got), calls, rec.State)
			}
			continue
		}
		sent++
		if got.Error != nil || calls != 1 || !rec.State.Settled() || rec.State == record.Failed {
			t.Fatalf("reserved first: the caller got %s, the upstream %d calls, the record is %s; want the charge, once, completed",
				show(got), calls, rec.State)
		}
	}
	t.Logf("answered at the end %d times, sent %d times", ended, sent)
}
