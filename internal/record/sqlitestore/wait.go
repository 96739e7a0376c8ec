package sqlitestore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// Wait implements record.Store. Waits of this Store for one record share
// one channel, closed when an Update or an orphan takeover of this Store
// settles it, or when the Store's poller finds it settled by another
// Store or process (poll). Wait also wakes when the lease lapses, to
// settle the orphan.
func (s *Store) Wait(ctx context.Context, id string) (*record.Record, error) {
	r, err := s.wait(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("waiting for %s: %w", id, err)
	}
	return s.attaches.Show(r), nil
}

func (s *Store) wait(ctx context.Context, id string) (*record.Record, error) {
	for {
		// Subscribed before the read, so a settle after it is not missed.
		w := s.subscribe(id)
		r, err := getRecord(ctx, s.st.get, id)
		if err == nil && r.Orphaned(s.clock()) {
			r, err = s.settleOrphan(ctx, id)
		}
		if err != nil || r.State.Settled() {
			s.unsubscribe(id, w)
			return r, err
		}
		var lapse <-chan time.Time
		var t *time.Timer
		if !r.LeaseUntil.IsZero() {
			t = time.NewTimer(r.LeaseUntil.Sub(s.clock()) + time.Millisecond)
			lapse = t.C
		}
		select {
		case <-w.ch:
		case <-lapse:
		case <-s.closed:
			err = errClosed
		case <-ctx.Done():
			err = ctx.Err()
		}
		if t != nil {
			t.Stop()
		}
		s.unsubscribe(id, w)
		if err != nil {
			return nil, err
		}
	}
}

// settleOrphan settles the record id with OrphanChange if it is still an
// orphan once it holds the write lock, and returns the record, with its
// Orphan set if this call settled it.
func (s *Store) settleOrphan(ctx context.Context, id string) (*record.Record, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	now := s.clock()
	r, err := getRecord(ctx, tx.StmtContext(ctx, s.st.byID), id)
	if err != nil || !r.Orphaned(now) {
		return r, err
	}
	apply(r, record.OrphanChange(r), now)
	if err := s.writeRecord(ctx, tx, r); err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	s.notify(id)
	return r.WithOrphan(r.Clone()), nil
}

// subscribe returns the wake-up for record id that this Store's Waits
// share, holding it until unsubscribe, and sees that the poller runs.
func (s *Store) subscribe(id string) *waiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.waiters[id]
	if w == nil {
		w = &waiter{ch: make(chan struct{})}
		s.waiters[id] = w
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	w.n++
	if !s.polling {
		s.polling = true
		go s.poll()
	}
	return w
}

func (s *Store) unsubscribe(id string, w *waiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.n--
	if w.n == 0 && s.waiters[id] == w {
		delete(s.waiters, id)
	}
}

// notify wakes every Wait of this Store for record id.
func (s *Store) notify(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.waiters[id]; w != nil {
		close(w.ch)
		delete(s.waiters, id)
	}
}

// poll wakes the Waits of this Store whose records another Store or
// process settled, until none waits or the Store closes. Each round reads
// the states of all their records, pollChunk ids a statement: thousands
// of Waits reading each its own record would take the CPU and the file
// from the work they wait for.
func (s *Store) poll() {
	interval, floor := minPoll, minPoll
	for {
		t := time.NewTimer(interval)
	pause:
		for {
			select {
			case <-t.C:
				break pause
			case <-s.kick:
				// A new record to wait for: the round comes soon.
				if interval > floor {
					interval = floor
					t.Reset(floor)
				}
			case <-s.closed:
				t.Stop()
				return
			}
		}
		ids := s.waited()
		if ids == nil {
			return
		}
		// A round's cost grows with the records waited on, and so does
		// the pause after one that found something.
		floor = minPoll + time.Duration(len(ids))*pollPerRecord
		settled, err := s.settledOf(ids)
		for _, id := range settled {
			s.notify(id)
		}
		if err != nil || len(settled) == 0 {
			// A read that failed is tried again as a round that found
			// nothing is: after a longer pause.
			interval = min(max(2*interval, floor), maxPoll)
		} else {
			interval = min(floor, maxPoll)
		}
	}
}

// waited returns the records some Wait of this Store waits on; nil, and
// the poller marked stopped, if there are none.
func (s *Store) waited() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.waiters) == 0 {
		s.polling = false
		return nil
	}
	ids := make([]string, 0, len(s.waiters))
	for id := range s.waiters {
		ids = append(ids, id)
	}
	return ids
}

// settledOf returns those of ids whose records are no longer in flight,
// or gone.
func (s *Store) settledOf(ids []string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), busyTimeout)
	defer cancel()
	inFlight := make(map[string]bool, len(ids))
	for chunk := range slices.Chunk(ids, pollChunk) {
		q := "SELECT id FROM records WHERE state IN ('accepted', 'dispatched') AND id IN (?" + strings.Repeat(", ?", len(chunk)-1) + ")"
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		if err := s.collect(ctx, q, args, inFlight); err != nil {
			return nil, err
		}
	}
	var settled []string
	for _, id := range ids {
		if !inFlight[id] {
			settled = append(settled, id)
		}
	}
	return settled, nil
}

// collect adds to ids the id each row of the query q gives.
func (s *Store) collect(ctx context.Context, q string, args []any, ids map[string]bool) error {
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return err
		}
		ids[id] = true
	}
	return rows.Err()
}
