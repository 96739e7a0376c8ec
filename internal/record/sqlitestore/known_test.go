package sqlitestore

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
)

// An update of a record the store knows is written without reading the
// record, and returns the record as stored all the same: with decisions,
// notes JSON escapes and claims. One renewed or attached to since is read
// first, as is one another process moved on, and is right too.
func TestUpdatesOfKnownRecordsReadNothing(t *testing.T) {
	ctx := context.Background()
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 999_999_999, time.UTC))
	open := storesOn(t, clock)
	s, other := open(), open()
	r := &record.Record{ID: record.NewID(clock.Now()), Key: "k", Fingerprint: "k", Actor: "alice", Scope: "session:1",
		Upstream: "stdio:server", Tool: "charge_card", Retention: time.Hour, Owner: "proxy-1", LeaseUntil: clock.Now().Add(time.Minute)}
	if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	step := recordtest.Steps(t, clock, s, other, r.ID)

	// While the writer's read of a record by id fails, an update that
	// read the record would fail.
	unread := unreadable(t, s)
	step("authorized", record.Change{To: record.Authorized, From: record.Accepted, By: "alice", Via: record.ApproverOperator,
		Note: "a \"quoted\" <note> / with \\ slashes, é, \u2028 and a tab\t"})
	unread()

	if err := s.Renew(ctx, "proxy-1", clock.Now().Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	step("dispatched, renewed since", record.Change{To: record.Dispatched})
	// Counted by another process, and written at its Close.
	attach := open()
	if got, won, err := attach.Reserve(ctx, &record.Record{ID: record.NewID(clock.Now()), Key: "k", Fingerprint: "k"}, record.ReserveOptions{}); err != nil || won || got.ID != r.ID {
		t.Fatalf("attach: %v won=%v err=%v", got, won, err)
	}
	if err := attach.Close(); err != nil {
		t.Fatal(err)
	}
	step("unknown, attached to since", record.Change{To: record.Unknown, Note: "\x01 no answer"})

	unread = unreadable(t, s)
	lease := clock.Now().Add(time.Hour)
	if got := step("dispatched again, by a new owner", record.Change{To: record.Dispatched, Note: "retry", Owner: "proxy-2", LeaseUntil: lease}); got.Owner != "proxy-2" || !got.LeaseUntil.Equal(lease) {
		t.Errorf("stored owner %q, lease %v; want proxy-2, %v", got.Owner, got.LeaseUntil, lease)
	}
	unread()

	// Another process moves the record on: this one's copy is stale.
	if _, err := other.Update(ctx, r.ID, record.Change{To: record.Unknown}); err != nil {
		t.Fatal(err)
	}
	step("dispatched after another process's change", record.Change{To: record.Dispatched})
	step("completed", record.Change{To: record.Completed, Result: json.RawMessage(`{"content":[]}`)})
	step("delivered", record.Change{To: record.Delivered, From: record.Completed})
}

// unreadable makes the writer's read of a record by id fail until the
// returned func is called.
func unreadable(t *testing.T, s *Store) (restore func()) {
	t.Helper()
	byID := s.st.byID
	unread, err := s.w.PrepareContext(context.Background(), "SELECT 'the record was read' WHERE ? IS NOT NULL")
	if err != nil {
		t.Fatal(err)
	}
	s.st.byID = unread
	return func() {
		s.st.byID = byID
		unread.Close()
	}
}

// A record the store remembers keeps to what is stored: a caller that
// reuses its result's buffer changes nothing stored or returned, and a
// name that JSON cannot keep as it is, or an empty result, is returned
// as stored by the updates after it.
func TestKnownRecordsKeepToWhatIsStored(t *testing.T) {
	ctx := context.Background()
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	open := storesOn(t, clock)
	s, other := open(), open()
	reserve := func(key string) *record.Record {
		r := &record.Record{ID: record.NewID(clock.Now()), Key: key, Fingerprint: key, Tool: "charge_card", Retention: time.Hour}
		if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil {
			t.Fatal(err)
		}
		return r
	}

	r := reserve("reused buffer")
	step := recordtest.Steps(t, clock, s, other, r.ID)
	// Moved on by another process: this one's copy is stale, and the
	// next change goes the long way.
	if _, err := other.Update(ctx, r.ID, record.Change{To: record.Dispatched}); err != nil {
		t.Fatal(err)
	}
	buf := []byte(`{"n":1}`)
	step("completed", record.Change{To: record.Completed, Result: buf})
	copy(buf, `{"n":2}`)
	if got := step("delivered", record.Change{To: record.Delivered}); string(got.Result) != `{"n":1}` {
		t.Errorf("stored result %s; want {\"n\":1}", got.Result)
	}

	r = reserve("invalid UTF-8")
	step = recordtest.Steps(t, clock, s, other, r.ID)
	// Stored with U+FFFD; this Update returns the name as given.
	if _, err := s.Update(ctx, r.ID, record.Change{To: record.Authorized, By: "al\xffice", Via: record.ApproverOperator}); err != nil {
		t.Fatal(err)
	}
	step("dispatched", record.Change{To: record.Dispatched})
	step("completed, with an empty result", record.Change{To: record.Completed, Result: json.RawMessage{}})
	step("delivered", record.Change{To: record.Delivered})
}

// storesOn returns a func that opens a Store on one new file, closed when
// the test ends, as another process would: each has its own connections.
func storesOn(t *testing.T, clock *recordtest.Clock) func() *Store {
	path := filepath.Join(t.TempDir(), "records.db")
	return func() *Store {
		s, err := Open(context.Background(), path, Options{Now: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
}
