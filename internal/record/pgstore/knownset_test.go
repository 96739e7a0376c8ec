package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// updateTogether makes the changes of changes, in one batch of updates
// if they can: it holds the senders with updates of hold, a dispatched
// record it locks, until every change is queued. It returns each
// change's record and error.
func updateTogether(t *testing.T, s *Store, hold string, ids []string, changes []record.Change) ([]*record.Record, []error) {
	t.Helper()
	tx := lockRow(t, s, hold)
	var held sync.WaitGroup
	for range senders {
		held.Go(func() { _, _ = s.Update(context.Background(), hold, record.Change{To: record.Completed}) })
	}
	lockWaits(t, s, senders)
	recs, errs := make([]*record.Record, len(ids)), make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { recs[i], errs[i] = s.Update(context.Background(), id, changes[i]) })
	}
	queued(t, s.updateQ, len(ids))
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	held.Wait()
	return recs, errs
}

// statements returns how many statements wrote the records ids: their
// rows' cmin, the command that wrote each within its transaction.
func statements(t *testing.T, s *Store, ids []string) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(t.Context(), s.sql(`SELECT count(DISTINCT (xmin::text, cmin::text)) FROM {schema}.records WHERE id = ANY($1)`), ids).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// knownChanges are changes of every kind a batch of updates carries,
// and the state each applies to.
var knownChanges = []struct {
	from record.State
	c    record.Change
}{
	{record.Dispatched, record.Change{To: record.Completed, Holder: "p1", Result: json.RawMessage(`{"content":[{"type":"text","text":"charged"}]}`)}},
	{record.Dispatched, record.Change{To: record.Failed, Holder: "p1", Note: "upstream refused", Error: json.RawMessage(`{"code":-32000,"message":"no"}`)}},
	{record.Dispatched, record.Change{To: record.Unknown, Note: "upstream exited"}},
	{record.Dispatched, record.Change{To: record.Completed}},
	{record.Accepted, record.Change{To: record.Dispatched, Owner: "p2", Lease: time.Minute}},
	{record.Accepted, record.Change{To: record.Authorized, By: "ops@example.com", Via: record.ApproverOperator}},
	{record.Completed, record.Change{To: record.Delivered}},
	{record.Unknown, record.Change{To: record.Dispatched, From: record.Unknown, Owner: "p2", Lease: time.Minute, Attempts: 1}},
}

// knownRecords reserves a record for each of knownChanges, with keys
// prefixed by prefix, and brings it to the state its change applies
// to, through s, which knows it then.
func knownRecords(t *testing.T, s *Store, prefix string, now time.Time) []string {
	t.Helper()
	ids := make([]string, len(knownChanges))
	for i, k := range knownChanges {
		r := newRecord(fmt.Sprint(prefix, i), now)
		r.Owner = "p1"
		if _, _, err := s.Reserve(t.Context(), r, record.ReserveOptions{Dispatch: k.from != record.Accepted, Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
		switch k.from {
		case record.Completed, record.Unknown:
			if _, err := s.Update(t.Context(), r.ID, record.Change{To: k.from}); err != nil {
				t.Fatal(err)
			}
		}
		ids[i] = r.ID
	}
	return ids
}

// TestKnownUpdatesGoInOneStatement: the updates of records a Store knows
// that wait together are made by one statement, and it writes, and
// answers, what a statement each does: every column, for every kind of
// change.
func TestKnownUpdatesGoInOneStatement(t *testing.T) {
	at := time.Now().Round(time.Millisecond)
	s := newStore(t, func() time.Time { return at })
	hold := dispatched(t, s, 1)[0]
	together := knownRecords(t, s, "together", at)
	alone := knownRecords(t, s, "alone", at)
	changes := make([]record.Change, len(knownChanges))
	for i, k := range knownChanges {
		changes[i] = k.c
	}

	got, errs := updateTogether(t, s, hold, together, changes)
	want := make([]*record.Record, len(alone))
	for i, id := range alone {
		r, err := s.Update(t.Context(), id, changes[i])
		if err != nil {
			t.Fatalf("%s alone: %v", changes[i].To, err)
		}
		want[i] = r
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s in a batch: %v", changes[i].To, err)
		}
	}
	if n := statements(t, s, together); n != 1 {
		t.Errorf("%d updates of known records that waited together were made by %d statements; want 1", len(together), n)
	}
	for i := range together {
		stored, err := s.Get(t.Context(), together[i])
		if err != nil {
			t.Fatal(err)
		}
		storedAlone, err := s.Get(t.Context(), alone[i])
		if err != nil {
			t.Fatal(err)
		}
		if a, b := sameRecord(got[i], want[i]), sameRecord(stored, storedAlone); a != "" || b != "" {
			t.Errorf("%s in a batch, against alone:\nanswered: %s\nstored: %s", changes[i].To, a, b)
		}
	}
}

// sameRecord returns how a and b differ but for their ids and keys, or
// "" if they do not.
func sameRecord(a, b *record.Record) string {
	a, b = a.Clone(), b.Clone()
	b.ID, b.Key, b.Fingerprint = a.ID, a.Key, a.Fingerprint
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) == string(jb) {
		return ""
	}
	return fmt.Sprintf("%s\nagainst %s", ja, jb)
}

// TestKnownSetLeavesWhatMoved: records that moved on since the Store
// knew them (another process changed them), and a second change of one
// record in the same batch, are left by the one statement, and each
// caller then gets what a statement each would have given it: the
// others of the batch are made all the same.
func TestKnownSetLeavesWhatMoved(t *testing.T) {
	s := newStore(t, nil)
	ids := dispatched(t, s, 8)
	hold, done, again, fenced, twice := ids[0], ids[1], ids[2], ids[3], ids[4]
	other := open(t, serverURL(t), s.schema, nil)
	for _, c := range []struct {
		id string
		c  record.Change
	}{
		{done, record.Change{To: record.Completed, Note: "by another process"}},
		{again, record.Change{To: record.Unknown}},
		{again, record.Change{To: record.Dispatched, From: record.Unknown, Owner: "p2", Lease: time.Minute}},
		{fenced, record.Change{To: record.Unknown}},
		{fenced, record.Change{To: record.Dispatched, From: record.Unknown, Owner: "p2", Lease: time.Minute}},
	} {
		if _, err := other.Update(t.Context(), c.id, c.c); err != nil {
			t.Fatal(err)
		}
	}
	batch := []string{done, again, fenced, twice, twice, ids[5], ids[6], ids[7]}
	changes := make([]record.Change, len(batch))
	for i := range changes {
		changes[i] = record.Change{To: record.Completed}
	}
	changes[2].Holder = "p1" // the owner it was taken from
	recs, errs := updateTogether(t, s, hold, batch, changes)

	if !errors.Is(errs[0], record.ErrConflict) {
		t.Errorf("completing a record another process completed: %v; want ErrConflict", errs[0])
	}
	// Dispatched again, by another process: still in a state completed
	// may leave, with a longer history than the Store knew.
	if stored, err := s.Get(t.Context(), again); err != nil || errs[1] != nil {
		t.Errorf("completing a record dispatched again: %v, %v", errs[1], err)
	} else if diff := sameRecord(recs[1], stored); diff != "" || len(stored.History) != 5 {
		t.Errorf("completing a record dispatched again answered what is not stored, or lost a transition: %s", diff)
	}
	if !errors.Is(errs[2], record.ErrConflict) {
		t.Errorf("completing, fenced to its old owner, a record another process took over: %v; want ErrConflict", errs[2])
	}
	if (errs[3] == nil) == (errs[4] == nil) || !errors.Is(errors.Join(errs[3], errs[4]), record.ErrConflict) {
		t.Errorf("completing one record twice in a batch: %v and %v; want one done and one ErrConflict", errs[3], errs[4])
	}
	for i, id := range batch[5:] {
		if err := errs[i+5]; err != nil || recs[i+5].State != record.Completed {
			t.Errorf("completing %s beside them: %v", id, err)
		}
	}
	if n := statements(t, s, batch[5:]); n != 1 {
		t.Errorf("the %d updates beside them were made by %d statements; want 1", len(batch[5:]), n)
	}
	for id, want := range map[string]int{done: 3, fenced: 4, twice: 3} {
		r, err := s.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.History) != want {
			t.Errorf("%s has %d transitions; want %d", id, len(r.History), want)
		}
	}
}

// TestResendable: a batch sent as one statement is sent again as a
// statement each only after an error the server would blame on one of
// them; after any other, and after the end of the session, its calls
// go alone.
func TestResendable(t *testing.T) {
	for _, c := range []struct {
		severity, code string
		want           bool
	}{
		{"ERROR", "55P03", true},  // a row held past the lock timeout
		{"ERROR", "40P01", true},  // a deadlock
		{"ERROR", "22P02", true},  // a value refused
		{"ERROR", "23505", true},  // a constraint
		{"ERROR", "57014", false}, // the statement's timeout
		{"ERROR", "XX000", false},
		{"FATAL", "57P01", false}, // the backend terminated
		{"FATAL", "55P03", false},
	} {
		err := fmt.Errorf("updating: %w", &pgconn.PgError{Severity: c.severity, SeverityUnlocalized: c.severity, Code: c.code})
		if got := resendable(err); got != c.want {
			t.Errorf("resendable(%s %s) = %v; want %v", c.severity, c.code, got, c.want)
		}
	}
	if resendable(errors.New("conn closed")) {
		t.Error("resendable(an error of the connection) = true; want false")
	}
}
