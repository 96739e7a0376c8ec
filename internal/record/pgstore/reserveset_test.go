package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// reserveTogether reserves recs, each with its options, in one batch if
// they can: it holds the senders until every reservation is queued. It
// returns each reservation's record, whether it won, and its error.
func reserveTogether(t *testing.T, s *Store, recs []*record.Record, opts []record.ReserveOptions) ([]*record.Record, []bool, []error) {
	t.Helper()
	release := holdSenders(t, s)
	got, won, errs := make([]*record.Record, len(recs)), make([]bool, len(recs)), make([]error, len(recs))
	var wg sync.WaitGroup
	for i, r := range recs {
		wg.Go(func() { got[i], won[i], errs[i] = s.Reserve(context.Background(), r, opts[i]) })
	}
	queued(t, s.reserveQ, len(recs))
	release()
	wg.Wait()
	return got, won, errs
}

// reservations are reservations of every kind a batch carries: a record
// and its options, for keys prefixed by prefix, made at now.
func reservations(prefix string, now time.Time) ([]*record.Record, []record.ReserveOptions) {
	var recs []*record.Record
	var opts []record.ReserveOptions
	add := func(edit func(r *record.Record), o record.ReserveOptions) {
		r := newRecord(fmt.Sprint(prefix, len(recs)), now)
		edit(r)
		recs, opts = append(recs, r), append(opts, o)
	}
	add(func(r *record.Record) {}, record.ReserveOptions{})
	add(func(r *record.Record) { r.Owner = "p1" }, record.ReserveOptions{Dispatch: true, Lease: time.Minute})
	add(func(r *record.Record) { r.Owner, r.LeaseUntil = "p1", now.Add(time.Hour) }, record.ReserveOptions{Dispatch: true})
	add(func(r *record.Record) { r.Awaiting, r.Retention = record.ApproverOperator, 90*time.Minute }, record.ReserveOptions{Lease: time.Minute})
	add(func(r *record.Record) {
		r.Attempts, r.Attached, r.Actor, r.Scope = 2, 1, "bob", "actor"
		r.Result = json.RawMessage(`{"content":[]}`)
	}, record.ReserveOptions{Dispatch: true, Replace: []record.State{record.Completed, record.Delivered}})
	return recs, opts
}

// TestReservationsGoInOneStatement: reservations that wait together are
// made by one statement, and it writes, and answers, what a statement
// each does, for every kind of reservation.
func TestReservationsGoInOneStatement(t *testing.T) {
	at := time.Now().Round(time.Millisecond)
	s := newStore(t, func() time.Time { return at })
	together, topts := reservations("together", at)
	alone, aopts := reservations("alone", at)

	got, won, errs := reserveTogether(t, s, together, topts)
	ids := make([]string, len(together))
	for i, r := range alone {
		want, wonAlone, err := s.Reserve(t.Context(), r, aopts[i])
		if err != nil || !wonAlone {
			t.Fatalf("reserving %s alone: %v, won %v", r.Key, err, wonAlone)
		}
		if errs[i] != nil || !won[i] {
			t.Fatalf("reserving %s in a batch: %v, won %v", together[i].Key, errs[i], won[i])
		}
		storedAlone, err := s.Get(t.Context(), r.ID)
		if err != nil {
			t.Fatal(err)
		}
		stored, err := s.Get(t.Context(), together[i].ID)
		if err != nil {
			t.Fatal(err)
		}
		if a, b := sameRecord(got[i], want), sameRecord(stored, storedAlone); a != "" || b != "" {
			t.Errorf("reservation %d in a batch, against alone:\nanswered: %s\nstored: %s", i, a, b)
		}
		ids[i] = together[i].ID
	}
	if n := statements(t, s, ids); n != 1 {
		t.Errorf("%d reservations that waited together were made by %d statements; want 1", len(ids), n)
	}
}

// TestReservationSetFindsHolders: in one batch, a reservation of a key
// whose holder may be matched gets the holder; one whose holder is an
// orphan, or replaceable, gets what its next pass makes of it; and of
// two reservations of one key, one wins and the other is matched to it.
func TestReservationSetFindsHolders(t *testing.T) {
	s := newStore(t, nil)
	holder := func(key string, edit func(r *record.Record), opts record.ReserveOptions) *record.Record {
		r := newRecord(key, time.Now())
		edit(r)
		if _, _, err := s.Reserve(t.Context(), r, opts); err != nil {
			t.Fatal(err)
		}
		return r
	}
	live := holder("live", func(r *record.Record) { r.Owner = "p1" }, record.ReserveOptions{Dispatch: true, Lease: time.Minute})
	orphan := holder("orphan", func(r *record.Record) { r.Owner = "p1" }, record.ReserveOptions{Dispatch: true, Lease: time.Minute})
	if _, err := s.pool.Exec(t.Context(), s.sql(`UPDATE {schema}.records SET lease_until = $2 WHERE id = $1`), orphan.ID, time.Now().Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	failed := holder("failed", func(r *record.Record) {}, record.ReserveOptions{Dispatch: true})
	if _, err := s.Update(t.Context(), failed.ID, record.Change{To: record.Failed}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"replaced", "kept"} {
		done := holder(key, func(r *record.Record) {}, record.ReserveOptions{Dispatch: true})
		if _, err := s.Update(t.Context(), done.ID, record.Change{To: record.Completed}); err != nil {
			t.Fatal(err)
		}
	}
	keys := []string{"live", "orphan", "failed", "twice", "twice", "fresh", "replaced", "kept"}
	recs, opts := make([]*record.Record, len(keys)), make([]record.ReserveOptions, len(keys))
	for i, k := range keys {
		recs[i], opts[i] = newRecord(k, time.Now()), record.ReserveOptions{Dispatch: true, Lease: time.Minute}
	}
	opts[6].Replace = []record.State{record.Delivered, record.Completed}
	got, won, errs := reserveTogether(t, s, recs, opts)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("reserving %s: %v", keys[i], err)
		}
	}
	if won[0] || got[0].ID != live.ID {
		t.Errorf("a key held by a live execution: won %v, got %s; want %s matched", won[0], got[0].ID, live.ID)
	}
	if won[1] || got[1].ID != orphan.ID || got[1].State != record.Unknown || got[1].Orphan == nil {
		t.Errorf("a key held by an orphan: won %v, got %s in %s; want the orphan, settled unknown, matched", won[1], got[1].ID, got[1].State)
	}
	if !won[2] || got[2].ID != recs[2].ID {
		t.Errorf("a key held by a failed execution: won %v, got %s; want a new execution", won[2], got[2].ID)
	}
	if won[3] == won[4] || got[3].ID != got[4].ID {
		t.Errorf("two reservations of one key: won %v and %v, got %s and %s; want one winner, the other matched to it", won[3], won[4], got[3].ID, got[4].ID)
	}
	if !won[5] {
		t.Error("a fresh key was not won")
	}
	if !won[6] || won[7] || got[7].State != record.Completed {
		t.Errorf("keys held by completed executions: won %v with completed to replace, %v (got %s) without; want a new execution, then the completed one matched", won[6], won[7], got[7].State)
	}
}

// TestReservationSetOneRecordTwice: a record reserved twice in one
// batch, as a retried reservation of a lost one may be, is won once.
func TestReservationSetOneRecordTwice(t *testing.T) {
	s := newStore(t, nil)
	r := newRecord("once", time.Now())
	recs := []*record.Record{r, r, newRecord("other", time.Now())}
	got, won, errs := reserveTogether(t, s, recs, make([]record.ReserveOptions, len(recs)))
	for i, err := range errs {
		if err != nil {
			t.Fatalf("reserving %s: %v", recs[i].Key, err)
		}
	}
	if won[0] == won[1] || got[0].ID != r.ID || got[1].ID != r.ID || !won[2] {
		t.Errorf("one record reserved twice beside another: won %v; want it won once, and the other won", won)
	}
}

// TestReservationSetOneIDTwoKeys: an execution id reserved with two
// keys in one batch, the first held by a live execution and the second
// free, is matched to the holder for the first and wins the second, as
// a statement each would; a third key beside them wins.
func TestReservationSetOneIDTwoKeys(t *testing.T) {
	s := newStore(t, nil)
	live := newRecord("a", time.Now())
	live.Owner = "p1"
	if _, _, err := s.Reserve(t.Context(), live, record.ReserveOptions{Dispatch: true, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	first, second := newRecord("a", time.Now()), newRecord("b", time.Now())
	second.ID = first.ID
	recs := []*record.Record{first, second, newRecord("c", time.Now())}
	got, won, errs := reserveTogether(t, s, recs, make([]record.ReserveOptions, len(recs)))
	for i, err := range errs {
		if err != nil {
			t.Fatalf("reserving %s: %v", recs[i].Key, err)
		}
	}
	if won[0] || got[0].ID != live.ID || !won[1] || got[1].Key != "b" || !won[2] {
		t.Errorf("one id with a held key and a free one, beside another: won %v, got %s (%s) and %s; want the holder matched, then two won",
			won, got[0].ID, got[0].Key, got[1].Key)
	}
}

// TestReservationSetReleasedMeanwhile: a holder released by a
// transaction that commits while the batch's statement waits for it is
// still the holder in the statement's snapshot; the reservation that
// inserts in its place gets its own record, once.
func TestReservationSetReleasedMeanwhile(t *testing.T) {
	s := newStore(t, nil)
	h := newRecord("k", time.Now())
	if _, _, err := s.Reserve(t.Context(), h, record.ReserveOptions{Dispatch: true}); err != nil {
		t.Fatal(err)
	}
	tx := lockRow(t, s, h.ID)
	if _, err := tx.Exec(t.Context(), s.sql(`UPDATE {schema}.records SET holds_key = false WHERE id = $1`), h.ID); err != nil {
		t.Fatal(err)
	}
	recs := []*record.Record{newRecord("k", time.Now()), newRecord("z", time.Now())}
	type result struct {
		got  []*record.Record
		won  []bool
		errs []error
	}
	done := make(chan result)
	go func() {
		got, won, errs := reserveTogether(t, s, recs, make([]record.ReserveOptions, len(recs)))
		done <- result{got, won, errs}
	}()
	setWaits(t, s)
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	r := <-done
	for i, err := range r.errs {
		if err != nil || !r.won[i] || r.got[i].ID != recs[i].ID {
			t.Errorf("reserving %s: %v, won %v; want its own record", recs[i].Key, err, r.won[i])
		}
	}
}

// setWaits waits until a statement of s's schema for a batch of rows
// waits for a lock.
func setWaits(t *testing.T, s *Store) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		var waiting bool
		if err := s.pool.QueryRow(t.Context(), `SELECT count(*) > 0 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND position($1 in query) > 0
				AND position('unnest' in query) > 0`, s.schema).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no batch of rows waits for a lock")
		}
	}
}

// TestReservationSetsRace: two Stores on one schema, each sending a
// batch of reservations of the same keys at once, some twice: each key
// is won once, and every other reservation of it is matched to the
// winner. It checks outcomes only: a batch that waited past the lock
// timeout or deadlocked is sent again a statement each, with the same
// outcomes, so the order the rows are locked in (by key, the batch's)
// shows in no outcome.
func TestReservationSetsRace(t *testing.T) {
	a := newStore(t, nil)
	b := open(t, serverURL(t), a.schema, nil)
	for round := range 10 {
		type outcome struct {
			mine, got, key string
			won            bool
			err            error
		}
		var (
			mu  sync.Mutex
			all []outcome
			wg  sync.WaitGroup
		)
		var releases []func()
		for n, s := range []*Store{a, b} {
			releases = append(releases, holdSendersWith(t, s, fmt.Sprint("held", round, n), (n+1)*senders))
			for i := range 12 {
				r := newRecord(fmt.Sprintf("r%d-k%d", round, i%8), time.Now())
				wg.Go(func() {
					got, won, err := s.Reserve(context.Background(), r, record.ReserveOptions{Dispatch: true})
					mu.Lock()
					defer mu.Unlock()
					o := outcome{mine: r.ID, key: r.Key, won: won, err: err}
					if got != nil {
						o.got = got.ID
					}
					all = append(all, o)
				})
			}
			queued(t, s.reserveQ, 12)
		}
		for _, release := range releases {
			go release()
		}
		wg.Wait()
		winners := map[string][]string{}
		for _, o := range all {
			if o.err != nil {
				t.Fatalf("round %d, reserving %s: %v", round, o.key, o.err)
			}
			if o.won {
				winners[o.key] = append(winners[o.key], o.mine)
			}
		}
		for _, o := range all {
			if w := winners[o.key]; len(w) != 1 || o.got != w[0] {
				t.Errorf("round %d, key %s: winners %v, reservation %s got %s", round, o.key, w, o.mine, o.got)
			}
		}
	}
}

// TestReservationSetReusedID: a reservation whose execution id is taken
// fails alone, with its own error, and the others of its batch win.
func TestReservationSetReusedID(t *testing.T) {
	s := newStore(t, nil)
	taken := newRecord("taken", time.Now())
	if _, _, err := s.Reserve(t.Context(), taken, record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	recs := []*record.Record{newRecord("a", time.Now()), newRecord("b", time.Now()), newRecord("c", time.Now())}
	recs[1].ID = taken.ID
	opts := make([]record.ReserveOptions, len(recs))
	_, won, errs := reserveTogether(t, s, recs, opts)
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "already used") {
		t.Errorf("reserving with an execution id already used: %v; want that error", errs[1])
	}
	for _, i := range []int{0, 2} {
		if errs[i] != nil || !won[i] {
			t.Errorf("reserving %s beside it: %v, won %v", recs[i].Key, errs[i], won[i])
		}
	}
}
