package pgstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// holdSenders makes every sender of s's reservations busy: each sends a
// reservation of a key that a transaction of the test holds, and waits
// for it. The returned function lets them go and waits for them.
func holdSenders(t *testing.T, s *Store) func() {
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
	held := newRecord("held", time.Now())
	if _, err := tx.Exec(ctx, s.sql(`INSERT INTO {schema}.records (id, key, holds_key, fingerprint, actor, scope, upstream, tool,
		state, history, attempts, attached, retention, owner)
		VALUES ($1, 'held', true, '', '', '', '', '', 'accepted', '[]', 0, 0, '1 hour', '')`), held.ID); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range senders {
		wg.Go(func() {
			if _, _, err := s.Reserve(context.Background(), newRecord("held", time.Now()), record.ReserveOptions{}); err != nil {
				t.Errorf("a held reservation: %v", err)
			}
		})
	}
	lockWaits(t, s, senders)
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

// queuedReserves waits until n reservations of s wait for a sender.
func queuedReserves(t *testing.T, s *Store, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.reserveQ.Queued() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d reservations queued; want %d", s.reserveQ.Queued(), n)
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
	queuedReserves(t, s, n)
	release()
	wg.Wait()
	ids := make([]string, n)
	for i, r := range recs {
		ids[i] = r.ID
	}
	// A sender takes what waits when it gets its turn: two senders, at
	// most a few batches.
	if got := xmins(t, s, ids); got > 2*senders {
		t.Errorf("%d reservations that waited together were written by %d transactions; want at most %d", n, got, 2*senders)
	}
}

// TestBatchRolledBackRunsEachAlone: a statement the server refuses rolls
// its batch back; the others are then written alone, and only its own
// caller gets the error. Of the ten calls, one goes alone and the rest
// in one batch, which holds at least two of the three refused.
func TestBatchRolledBackRunsEachAlone(t *testing.T) {
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
	queuedReserves(t, s, n)
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
	if got := xmins(t, s, ids); got != len(ids) {
		t.Errorf("after the batch rolled back, %d records were written by %d transactions; want each alone", len(ids), got)
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
	for deadline := time.Now().Add(10 * time.Second); s.updateQ.Queued() < n-1; {
		if time.Now().After(deadline) {
			t.Fatalf("%d updates queued; want %d", s.updateQ.Queued(), n-1)
		}
		runtime.Gosched()
	}
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
