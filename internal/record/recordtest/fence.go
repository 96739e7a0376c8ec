package recordtest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// testLateOutcomeIsFenced: a send's outcome names the owner that sent it
// (Change.Holder). Once that owner's lease lapsed and another process
// took the execution over, the outcome is refused, whether the record
// was settled as an orphan or claimed again; the new owner's is taken.
func testLateOutcomeIsFenced(t *testing.T, s record.Store, clock *Clock) {
	ctx := context.Background()
	r, _ := mustReserve(t, s, leased("k", "proxy-1", clock.Now().Add(10*time.Second)), record.ReserveOptions{Dispatch: true})
	clock.Advance(11 * time.Second) // proxy-1 is slow, not gone
	if got, _ := mustReserve(t, s, leased("k", "proxy-2", clock.Now().Add(10*time.Second)), record.ReserveOptions{}); got.State != record.Unknown {
		t.Fatalf("the takeover left %s; want unknown", got.State)
	}
	late := func(holder string) error {
		_, err := s.Update(ctx, r.ID, record.Change{To: record.Completed, Result: json.RawMessage(`{"from":"` + holder + `"}`), Holder: holder})
		return err
	}
	if err := late("proxy-1"); !errors.Is(err, record.ErrConflict) {
		t.Errorf("proxy-1's outcome after its execution was settled as an orphan: %v; want ErrConflict", err)
	}
	mustUpdate(t, s, r.ID, record.Change{To: record.Dispatched, From: record.Unknown, Owner: "proxy-2", Lease: time.Minute})
	if err := late("proxy-1"); !errors.Is(err, record.ErrConflict) {
		t.Errorf("proxy-1's outcome after proxy-2 claimed the execution: %v; want ErrConflict", err)
	}
	if err := late("proxy-2"); err != nil {
		t.Fatalf("proxy-2's own outcome: %v", err)
	}
	got, err := s.Get(ctx, r.ID)
	if err != nil || got.State != record.Completed || string(got.Result) != `{"from":"proxy-2"}` {
		t.Errorf("the record is %v %s (%v); want completed with proxy-2's result", got.State, got.Result, err)
	}
}

// testStaleClaimIsRefused: a claim decided from a copy read a while ago
// names the attempts that copy had (Change.Attempts): once another
// caller has sent the execution again meanwhile, and it came back
// unknown, the claim is refused rather than send it a third time.
func testStaleClaimIsRefused(t *testing.T, s record.Store, clock *Clock) {
	ctx := context.Background()
	r, _ := mustReserve(t, s, leased("k", "proxy-1", clock.Now().Add(time.Minute)), record.ReserveOptions{Dispatch: true})
	copyRead := mustUpdate(t, s, r.ID, record.Change{To: record.Unknown, Note: "the upstream exited"})
	claim := record.Change{To: record.Dispatched, From: record.Unknown, Owner: "proxy-1", Lease: time.Minute, Attempts: copyRead.Attempts}
	mustUpdate(t, s, r.ID, claim) // the first caller's re-dispatch
	mustUpdate(t, s, r.ID, record.Change{To: record.Unknown, Note: "unknown again"})
	if _, err := s.Update(ctx, r.ID, claim); !errors.Is(err, record.ErrConflict) {
		t.Fatalf("a second claim from the copy of %d attempts, after a re-dispatch: %v; want ErrConflict", copyRead.Attempts, err)
	}
	got, err := s.Get(ctx, r.ID)
	if err != nil || got.State != record.Unknown || got.Attempts != copyRead.Attempts+1 {
		t.Errorf("the record is %v after %d attempts (%v); want unknown after %d", got.State, got.Attempts, err, copyRead.Attempts+1)
	}
	fresh := claim
	fresh.Attempts = got.Attempts
	if _, err := s.Update(ctx, r.ID, fresh); err != nil {
		t.Errorf("a claim from the current copy: %v", err)
	}
}
