package recordtest

import (
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
