package recordtest

import (
	"context"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// testDispatchedReservationAwaitsNothing: a reservation recorded as
// dispatched at once has left accepted, so it awaits no approval
// (Record.Awaiting is "" once a record has left Accepted).
func testDispatchedReservationAwaitsNothing(t *testing.T, s record.Store, _ *Clock) {
	r := newRecord("k")
	r.Awaiting = record.ApproverClient
	got, won := mustReserve(t, s, r, record.ReserveOptions{Dispatch: true})
	if !won || got.State != record.Dispatched || got.Awaiting != "" {
		t.Errorf("Reserve with Dispatch = %s won=%v awaiting %q; want dispatched, awaiting nothing", got.State, won, got.Awaiting)
	}
	if stored, err := s.Get(context.Background(), r.ID); err != nil || stored.Awaiting != "" {
		t.Errorf("Get = awaiting %q (%v); want nothing", stored.Awaiting, err)
	}
}

// testOrphanShowsPendingAttaches: the orphan a call settles is a record
// the store returns, so it shows the attaches counted and not yet
// written, as the records themselves do (Store.Reserve), whether the
// reservation that took it over replaced it or matched it, and when a
// waiter settled it.
func testOrphanShowsPendingAttaches(t *testing.T, s record.Store, clock *Clock) {
	ctx := context.Background()
	lease := clock.Now().Add(10 * time.Second)
	first := func(key string, dispatch bool) *record.Record {
		r, _ := mustReserve(t, s, leased(key, "proxy-1", lease), record.ReserveOptions{Dispatch: dispatch})
		for range 2 {
			if got, won := mustReserve(t, s, leased(key, "proxy-1", lease), record.ReserveOptions{}); won || got.ID != r.ID {
				t.Fatalf("an attach to %s won %v, %s", r.ID, won, got.ID)
			}
		}
		return r
	}
	replaced, matched, waited := first("k-same", false), first("k-other", false), first("k-wait", true)
	clock.Advance(11 * time.Second) // proxy-1 went away
	other := leased("k-other", "proxy-2", clock.Now().Add(10*time.Second))
	other.Fingerprint = "another action"
	for _, tt := range []struct {
		name string
		r    *record.Record
		was  *record.Record
	}{
		{"replaced", leased("k-same", "proxy-2", clock.Now().Add(10*time.Second)), replaced},
		{"matched", other, matched},
	} {
		got, _ := mustReserve(t, s, tt.r, record.ReserveOptions{})
		if got.Orphan == nil || got.Orphan.ID != tt.was.ID || got.Orphan.Attached != 2 {
			t.Errorf("%s: the reservation's orphan = %+v; want %s with its 2 attaches", tt.name, got.Orphan, tt.was.ID)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	got, err := s.Wait(wctx, waited.ID)
	if err != nil || got.Orphan == nil || got.Attached != 2 || got.Orphan.Attached != 2 {
		t.Errorf("Wait = %+v (%v); want the orphan settled, it and its Orphan with 2 attaches", got, err)
	}
}
