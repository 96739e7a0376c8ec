package recordtest

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// near reports whether got is want, to the microsecond a store keeps.
func near(got, want time.Time) bool {
	d := got.Sub(want)
	return d > -time.Millisecond && d < time.Millisecond
}

// testReserveLeaseStartsAtTheWrite: with ReserveOptions.Lease, the lease
// runs from the store's write, whatever the record held. A reservation
// that waited its turn longer than a lease is not taken for an orphan.
func testReserveLeaseStartsAtTheWrite(t *testing.T, s record.Store, clock *Clock) {
	r := leased("k", "proxy-1", clock.Now().Add(-time.Second)) // run out while it queued
	got, won := mustReserve(t, s, r, record.ReserveOptions{Lease: 10 * time.Second})
	if !won || !near(got.LeaseUntil, clock.Now().Add(10*time.Second)) {
		t.Fatalf("Reserve with a lease = won %v, lease until %v; want won, %v", won, got.LeaseUntil, clock.Now().Add(10*time.Second))
	}
	clock.Advance(5 * time.Second)
	again, won := mustReserve(t, s, leased("k", "proxy-2", clock.Now().Add(10*time.Second)), record.ReserveOptions{})
	if won || again.ID != got.ID || again.State != record.Accepted {
		t.Fatalf("a second Reserve within the lease = %s %s won=%v; want %s accepted, attached to", again.ID, again.State, won, got.ID)
	}
	clock.Advance(6 * time.Second)
	if next, won := mustReserve(t, s, leased("k", "proxy-2", clock.Now().Add(10*time.Second)), record.ReserveOptions{}); !won || next.ID == got.ID {
		t.Fatalf("a Reserve past the lease = %s won=%v; want the orphan failed and a new execution", next.ID, won)
	}
}

// testClaimLeaseStartsAtTheWrite: a claim's Change.Lease runs from the
// store's write, as ReserveOptions.Lease does.
func testClaimLeaseStartsAtTheWrite(t *testing.T, s record.Store, clock *Clock) {
	r, _ := mustReserve(t, s, leased("k", "proxy-1", clock.Now().Add(10*time.Second)), record.ReserveOptions{})
	mustUpdate(t, s, r.ID, record.Change{To: record.Dispatched})
	mustUpdate(t, s, r.ID, record.Change{To: record.Unknown})
	claim := record.Change{To: record.Dispatched, From: record.Unknown, Owner: "proxy-2", LeaseUntil: clock.Now().Add(-time.Second), Lease: 10 * time.Second}
	got := mustUpdate(t, s, r.ID, claim)
	if got.Owner != "proxy-2" || !near(got.LeaseUntil, clock.Now().Add(10*time.Second)) {
		t.Fatalf("a claim with a lease = owner %s until %v; want proxy-2 until %v", got.Owner, got.LeaseUntil, clock.Now().Add(10*time.Second))
	}
	clock.Advance(5 * time.Second)
	if again, won := mustReserve(t, s, newRecord("k"), record.ReserveOptions{}); won || again.State != record.Dispatched {
		t.Fatalf("a Reserve within the claim's lease = %s won=%v; want it dispatched still", again.State, won)
	}
}

// takenOver checks that orphan, a record's Orphan, is the execution id
// settled as state by its owner's going away; "" for state wants none.
func takenOver(t *testing.T, what string, orphan *record.Record, id string, state record.State) {
	t.Helper()
	switch {
	case state == "" && orphan != nil:
		t.Errorf("%s reports taking over %s, which it did not settle", what, orphan.ID)
	case state == "":
	case orphan == nil:
		t.Errorf("%s settled orphan %s and does not say so (Orphan is nil)", what, id)
	case orphan.ID != id || orphan.State != state || len(orphan.History) == 0 ||
		!strings.Contains(orphan.History[len(orphan.History)-1].Note, "proxy-1 went away"):
		t.Errorf("%s reports the orphan %s %s, history %+v; want %s %s, owner proxy-1 gone", what, orphan.ID, orphan.State, orphan.History, id, state)
	case orphan.Owner != "proxy-1" || (state == record.Unknown) != (orphan.Attempts == 1):
		// The proxy knows its own orphans by these (intercept's
		// owntakeover.go): owner and attempts as the orphan was sent.
		t.Errorf("%s reports the orphan %s owned by %q, sent %d times; want proxy-1's, sent once if unknown", what, orphan.ID, orphan.Owner, orphan.Attempts)
	}
}

// testTakeoverIsReported: the call that settles an orphan, and only that
// call, learns of it from the record it gets back, to journal it.
func testTakeoverIsReported(t *testing.T, s record.Store, clock *Clock) {
	ctx := context.Background()
	lease := func() time.Time { return clock.Now().Add(10 * time.Second) }
	unsent, _ := mustReserve(t, s, leased("unsent", "proxy-1", lease()), record.ReserveOptions{})
	sent, _ := mustReserve(t, s, leased("sent", "proxy-1", lease()), record.ReserveOptions{})
	waited, _ := mustReserve(t, s, leased("waited", "proxy-1", lease()), record.ReserveOptions{})
	mustUpdate(t, s, sent.ID, record.Change{To: record.Dispatched})
	mustUpdate(t, s, waited.ID, record.Change{To: record.Dispatched})
	clock.Advance(11 * time.Second) // proxy-1 died

	got, _ := mustReserve(t, s, leased("unsent", "proxy-2", lease()), record.ReserveOptions{})
	takenOver(t, "a Reserve that replaced an orphan never sent", got.Orphan, unsent.ID, record.Failed)
	got, _ = mustReserve(t, s, leased("sent", "proxy-2", lease()), record.ReserveOptions{})
	takenOver(t, "a Reserve that met an orphan sent", got.Orphan, sent.ID, record.Unknown)
	got, _ = mustReserve(t, s, leased("sent", "proxy-2", lease()), record.ReserveOptions{})
	takenOver(t, "a Reserve after the takeover", got.Orphan, "", "")

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got, err := s.Wait(wctx, waited.ID)
	if err != nil {
		t.Fatal(err)
	}
	takenOver(t, "a Wait that settled an orphan", got.Orphan, waited.ID, record.Unknown)
	if got, err = s.Wait(wctx, waited.ID); err != nil {
		t.Fatal(err)
	}
	takenOver(t, "a Wait after the takeover", got.Orphan, "", "")
	if got, err = s.Get(ctx, waited.ID); err != nil {
		t.Fatal(err)
	}
	takenOver(t, "Get", got.Orphan, "", "")
}

// testConcurrentTakeoverReportedOnce: of many callers that meet one
// orphan at once, exactly one is told it settled it.
func testConcurrentTakeoverReportedOnce(t *testing.T, s record.Store, clock *Clock) {
	r, _ := mustReserve(t, s, leased("k", "proxy-1", clock.Now().Add(10*time.Second)), record.ReserveOptions{})
	mustUpdate(t, s, r.ID, record.Change{To: record.Dispatched})
	clock.Advance(11 * time.Second)
	var told atomic.Int32
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			var got *record.Record
			var err error
			if i%2 == 0 {
				got, _, err = s.Reserve(context.Background(), leased("k", "proxy-2", clock.Now().Add(10*time.Second)), record.ReserveOptions{})
			} else {
				got, err = s.Wait(context.Background(), r.ID)
			}
			if err != nil {
				t.Error(err)
				return
			}
			if got.Orphan != nil {
				told.Add(1)
			}
		})
	}
	wg.Wait()
	if n := told.Load(); n != 1 {
		t.Fatalf("%d callers were told they settled the orphan; want exactly 1", n)
	}
}
