package pgstore

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
)

// An update of a record the store knows is answered with what changed,
// not the whole record, and returns the record as stored all the same:
// with decisions, notes JSON escapes, claims, renewals and attaches in
// between. A record another process moved on, or a note the store
// rewrites, goes the long way, and is right too.
func TestUpdatesAnswerWhatChanged(t *testing.T) {
	u, schema := serverURL(t), newSchema(t)
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 999_999_999, time.UTC))
	s, other := open(t, u, schema, clock.Now), open(t, u, schema, clock.Now)
	ctx := t.Context()
	r := newRecord("k", clock.Now())
	r.Owner, r.LeaseUntil = "proxy-1", clock.Now().Add(time.Minute)
	if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	step := recordtest.Steps(t, clock, s, other, r.ID)

	// Only the statement for a known record can run: a change that took
	// the long way fails.
	full := s.q.update
	s.q.update = "SELECT 'the long way was taken'::int"
	step("authorized", record.Change{To: record.Authorized, From: record.Accepted, By: "alice", Via: record.ApproverOperator,
		Note: "a \"quoted\" <note> / with \\ slashes, é, \u2028 and a tab\t"})
	if err := s.Renew(ctx, "proxy-1", clock.Now().Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	step("dispatched", record.Change{To: record.Dispatched})
	// Counted by another process, and written at its Close.
	attach := open(t, u, schema, clock.Now)
	if got, won, err := attach.Reserve(ctx, newRecord("k", clock.Now()), record.ReserveOptions{}); err != nil || won || got.ID != r.ID {
		t.Fatalf("attach: %v won=%v err=%v", got, won, err)
	}
	if err := attach.Close(); err != nil {
		t.Fatal(err)
	}
	step("unknown", record.Change{To: record.Unknown, Note: "\x01 no answer"})
	lease := clock.Now().Add(time.Hour)
	if got := step("dispatched again, by a new owner", record.Change{To: record.Dispatched, Note: "retry", Owner: "proxy-2", LeaseUntil: lease}); got.Owner != "proxy-2" || !got.LeaseUntil.Equal(lease.Truncate(time.Microsecond)) {
		t.Errorf("stored owner %q, lease %v; want proxy-2, %v", got.Owner, got.LeaseUntil, lease)
	}
	s.q.update = full

	// Another process moves the record on: this one's copy is stale.
	if _, err := other.Update(ctx, r.ID, record.Change{To: record.Unknown}); err != nil {
		t.Fatal(err)
	}
	step("dispatched after another process's change", record.Change{To: record.Dispatched, Note: "a NUL \x00 the store replaces"})
	step("completed", record.Change{To: record.Completed, Result: json.RawMessage(`{"content":[]}`)})
	step("delivered", record.Change{To: record.Delivered, From: record.Completed})
}

// An empty result is no result: the store keeps none, and says so.
func TestKnownRecordEmptyResult(t *testing.T) {
	u, schema := serverURL(t), newSchema(t)
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	s, other := open(t, u, schema, clock.Now), open(t, u, schema, clock.Now)
	r := newRecord("k", clock.Now())
	if _, _, err := s.Reserve(t.Context(), r, record.ReserveOptions{Dispatch: true}); err != nil {
		t.Fatal(err)
	}
	step := recordtest.Steps(t, clock, s, other, r.ID)
	step("completed", record.Change{To: record.Completed, Result: json.RawMessage{}, Error: json.RawMessage{}})
	step("delivered", record.Change{To: record.Delivered})
}
