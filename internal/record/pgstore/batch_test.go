package pgstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/batch"
)

// holdSenders makes every sender of s's reservations busy: each sends a
// reservation of a key that a transaction of the test holds, and waits
// for it. The returned function lets them go and waits for them.
func holdSenders(t *testing.T, s *Store) func() {
	t.Helper()
	return holdSendersWith(t, s, "held", senders)
}

// holdSendersWith is holdSenders, with a held key of its own, once n
// statements on the schema wait for a lock: the senders of other Stores
// held on it too.
func holdSendersWith(t *testing.T, s *Store, key string, n int) func() {
	t.Helper()
	ctx := t.Context()
	if err := s.ensure(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) }) // a no-op once released
	held := newRecord(key, time.Now())
	if _, err := tx.Exec(ctx, s.sql(`INSERT INTO {schema}.records (id, key, holds_key, fingerprint, actor, scope, upstream, tool,
		state, history, attempts, attached, retention, owner)
		VALUES ($1, $2, true, '', '', '', '', '', 'accepted', '[]', 0, 0, '1 hour', '')`), held.ID, key); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range senders {
		wg.Go(func() {
			if _, _, err := s.Reserve(context.Background(), newRecord(key, time.Now()), record.ReserveOptions{}); err != nil {
				t.Errorf("a held reservation: %v", err)
			}
		})
	}
	lockWaits(t, s, n)
	var once sync.Once
	release := func() {
		once.Do(func() {
			if err := tx.Rollback(context.Background()); err != nil {
				t.Error(err)
			}
		})
		wg.Wait()
	}
	t.Cleanup(release)
	return release
}

// lockWaits waits until n statements on s's schema wait for a lock.
func lockWaits(t *testing.T, s *Store, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting int
		if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND position($1 in query) > 0`, s.schema).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d statements wait for a lock; want %d", waiting, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// queued waits until n statements wait in q for a sender.
func queued(t *testing.T, q *batch.Queue[*stmt], n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for q.Queued() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d statements queued; want %d", q.Queued(), n)
		}
		runtime.Gosched()
	}
}

// xmins returns how many transactions wrote the records ids.
func xmins(t *testing.T, s *Store, ids []string) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(t.Context(), s.sql(`SELECT count(DISTINCT xmin::text) FROM {schema}.records WHERE id = ANY($1)`), ids).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestWaitingReservationsCommitTogether: reservations that wait while the
// senders are busy are written in a few transactions, not one each, and
// each caller gets its own record.
func TestWaitingReservationsCommitTogether(t *testing.T) {
	const n = 40
	s := newStore(t, nil)
	release := holdSenders(t, s)
	recs := make([]*record.Record, n)
	var wg sync.WaitGroup
	for i := range recs {
		recs[i] = newRecord(fmt.Sprint("k", i), time.Now())
		wg.Go(func() {
			got, won, err := s.Reserve(context.Background(), recs[i], record.ReserveOptions{Dispatch: true})
			switch {
			case err != nil:
				t.Errorf("reserving %s: %v", recs[i].Key, err)
			case !won || got.ID != recs[i].ID || got.State != record.Dispatched:
				t.Errorf("reserving %s: got %s in %s, won=%v; want its own, dispatched", recs[i].Key, got.ID, got.State, won)
			}
		})
	}
	queued(t, s.reserveQ, n)
	release()
	wg.Wait()
	ids := make([]string, n)
	for i, r := range recs {
		ids[i] = r.ID
	}
	// A sender takes what waits when it gets its turn: with each sender
	// held, at most a few batches.
	if got := xmins(t, s, ids); got > 2*senders {
		t.Errorf("%d reservations that waited together were written by %d transactions; want at most %d", n, got, 2*senders)
	}
}

// TestBatchRolledBackSendsTheRestAgain: a statement the server refuses
// rolls its batch back; only its own caller gets the error, and the
// others are sent again, together. Of the ten calls, one goes alone and
// the rest in one batch, which holds at least two of the three refused.
func TestBatchRolledBackSendsTheRestAgain(t *testing.T) {
	const n = 10
	s := newStore(t, nil)
	taken := newRecord("taken", time.Now())
	if _, _, err := s.Reserve(t.Context(), taken, record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	release := holdSenders(t, s)
	recs := make([]*record.Record, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range recs {
		recs[i] = newRecord(fmt.Sprint("k", i), time.Now())
		if i%4 == 1 {
			recs[i].ID = taken.ID // another key, an execution id already used
		}
		wg.Go(func() {
			_, _, errs[i] = s.Reserve(context.Background(), recs[i], record.ReserveOptions{})
		})
	}
	queued(t, s.reserveQ, n)
	release()
	wg.Wait()
	var ids []string
	for i, err := range errs {
		switch {
		case i%4 == 1:
			if err == nil || !strings.Contains(err.Error(), "execution id already used") {
				t.Errorf("a reservation with a used id: %v; want it refused", err)
			}
		case err != nil:
			t.Errorf("reserving %s beside a refused statement: %v", recs[i].Key, err)
		default:
			ids = append(ids, recs[i].ID)
		}
	}
	if got := xmins(t, s, ids); got > 2 {
		t.Errorf("after the batch rolled back, %d records were written by %d transactions; want the batch's rest in one, and the call that went alone", len(ids), got)
	}
}

// TestWaitingUpdatesCommitTogether: updates are batched as reservations
// are, and a change the record's state does not allow is still refused
// with ErrConflict, to its caller alone.
func TestWaitingUpdatesCommitTogether(t *testing.T) {
	const n = 20
	s := newStore(t, nil)
	ids := make([]string, n)
	for i := range ids {
		r := newRecord(fmt.Sprint("k", i), time.Now())
		if _, _, err := s.Reserve(t.Context(), r, record.ReserveOptions{Dispatch: i > 0}); err != nil {
			t.Fatal(err)
		}
		ids[i] = r.ID
	}
	// Hold the updates' senders with updates of a row the test locks.
	tx, err := s.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) }) // a no-op once released
	locked := ids[1]
	if _, err := tx.Exec(t.Context(), s.sql(`SELECT FROM {schema}.records WHERE id = $1 FOR UPDATE`), locked); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range senders {
		wg.Go(func() {
			if _, err := s.Update(context.Background(), locked, record.Change{To: record.Completed}); err != nil && !errors.Is(err, record.ErrConflict) {
				t.Errorf("a held update: %v", err)
			}
		})
	}
	lockWaits(t, s, senders)
	errs := make([]error, n)
	for i, id := range ids {
		if id == locked {
			continue
		}
		wg.Go(func() {
			_, errs[i] = s.Update(context.Background(), id, record.Change{To: record.Completed})
		})
	}
	queued(t, s.updateQ, n-1)
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	// ids[0] was only accepted: completing it is a conflict.
	if !errors.Is(errs[0], record.ErrConflict) {
		t.Errorf("completing an accepted record: %v; want ErrConflict", errs[0])
	}
	var done []string
	for i, id := range ids[2:] {
		if err := errs[i+2]; err != nil {
			t.Errorf("completing %s: %v", id, err)
		}
		done = append(done, id)
	}
	if got := xmins(t, s, done); got > 2*senders {
		t.Errorf("%d updates that waited together were written by %d transactions; want at most %d", len(done), got, 2*senders)
	}
}

// TestLeaseStartsAtTheWrite: a reservation that waits in the queue gets
// its lease from the moment its batch writes it, not from before its
// wait: one that waited longer than its lease does not land lapsed.
func TestLeaseStartsAtTheWrite(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	s := newStore(t, clock)
	release := holdSenders(t, s)
	var (
		got *record.Record
		err error
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		got, _, err = s.Reserve(context.Background(), newRecord("leased", clock()), record.ReserveOptions{Lease: 10 * time.Second})
	}()
	queued(t, s.reserveQ, 1)
	now.Add(int64(20 * time.Second)) // its wait in the queue
	release()
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if want := clock().Add(10 * time.Second); got.LeaseUntil.Before(want.Add(-time.Second)) || got.Orphaned(clock()) {
		t.Errorf("lease until %v at %v; want about %v", got.LeaseUntil, clock(), want)
	}
}

// lockRow locks the record id in a transaction of the test's, which
// it returns.
func lockRow(t *testing.T, s *Store, id string) pgx.Tx {
	t.Helper()
	tx, err := s.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(t.Context(), s.sql(`SELECT FROM {schema}.records WHERE id = $1 FOR UPDATE`), id); err != nil {
		t.Fatal(err)
	}
	return tx
}

// updateBatch completes the records ids but the first, dispatched, in
// one batch of updates: it holds the senders with updates of ids[0],
// which the test locks, until all are queued. It returns each update's
// error.
func updateBatch(t *testing.T, s *Store, ids []string) []error {
	t.Helper()
	tx := lockRow(t, s, ids[0])
	var held sync.WaitGroup
	for range senders {
		held.Go(func() { _, _ = s.Update(context.Background(), ids[0], record.Change{To: record.Completed}) })
	}
	lockWaits(t, s, senders)
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids[1:] {
		wg.Go(func() { _, errs[i+1] = s.Update(context.Background(), id, record.Change{To: record.Completed}) })
	}
	queued(t, s.updateQ, len(ids)-1)
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	held.Wait()
	return errs
}

// dispatched reserves n records, dispatched, and returns their ids.
func dispatched(t *testing.T, s *Store, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		r := newRecord(fmt.Sprint("k", i), time.Now())
		if _, _, err := s.Reserve(t.Context(), r, record.ReserveOptions{Dispatch: true}); err != nil {
			t.Fatal(err)
		}
		ids[i] = r.ID
	}
	return ids
}

// TestLockedRowsDoNotHoldTheBatch: updates in a batch that wait for rows
// another transaction holds do not hold up or fail the others: those are
// written while the rows are still locked, and the locked ones are
// written once they are free. Of the batch's calls one may go alone;
// with three rows locked, the batch holds at least two.
func TestLockedRowsDoNotHoldTheBatch(t *testing.T) {
	const n, locked = 12, 3
	s := newStore(t, nil)
	ids := dispatched(t, s, n)
	slices.Sort(ids)
	tx, err := s.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(t.Context(), s.sql(`SELECT FROM {schema}.records WHERE id = ANY($1) FOR UPDATE`), ids[1:1+locked]); err != nil {
		t.Fatal(err)
	}
	done := make(chan []error)
	go func() { done <- updateBatch(t, s, ids) }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var completed int
		if err := s.pool.QueryRow(t.Context(), s.sql(`SELECT count(*) FROM {schema}.records WHERE state = 'completed'`)).Scan(&completed); err != nil {
			t.Fatal(err)
		}
		if completed == n-locked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d records completed while %d rows of the batch were locked; want %d", completed, locked, n-locked)
		}
	}
	if err := tx.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	for i, err := range <-done {
		if i > 0 && err != nil {
			t.Errorf("completing %s in a batch with locked rows: %v", ids[i], err)
		}
	}
}

// TestUndecodableRowFailsItsCallerOnly: a row that cannot be decoded
// (here a history another writer left unreadable) fails its own caller;
// the others of its batch, which committed with it, get their records.
func TestUndecodableRowFailsItsCallerOnly(t *testing.T) {
	const n = 8
	s := newStore(t, nil)
	ids := dispatched(t, s, n)
	bad := ids[n/2]
	if _, err := s.pool.Exec(t.Context(), s.sql(`UPDATE {schema}.records SET history = '[{"state":"dispatched","at":"yesterday"}]' WHERE id = $1`), bad); err != nil {
		t.Fatal(err)
	}
	for i, err := range updateBatch(t, s, ids) {
		switch {
		case i == 0:
		case ids[i] == bad:
			if err == nil {
				t.Error("an update whose record cannot be read succeeded")
			}
		case err != nil:
			t.Errorf("completing %s beside an unreadable record: %v", ids[i], err)
		}
	}
}
