package sqlitestore

import (
	"context"
	"fmt"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// Wait implements record.Store. Waits of this Store for one record share
// one channel, closed when an Update or an orphan takeover of this Store
// settles it; a change made by another Store or process is seen by polling
// on a backoff from 10 ms to 1 s. Wait also wakes when the lease lapses, to
// settle the orphan.
func (s *Store) Wait(ctx context.Context, id string) (*record.Record, error) {
	r, err := s.wait(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("waiting for %s: %w", id, err)
	}
	return r, nil
}

func (s *Store) wait(ctx context.Context, id string) (*record.Record, error) {
	poll := minPoll
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
		// The poll ends early when the lease lapses, so the orphan is
		// settled on time.
		wake, lapse := poll, false
		if !r.LeaseUntil.IsZero() {
			if d := r.LeaseUntil.Sub(s.clock()) + time.Millisecond; d < wake {
				wake, lapse = d, true
			}
		}
		t := time.NewTimer(wake)
		select {
		case <-w.ch:
		case <-t.C:
			if !lapse {
				poll = min(2*poll, maxPoll)
			}
		case <-s.closed:
			err = errClosed
		case <-ctx.Done():
			err = ctx.Err()
		}
		t.Stop()
		s.unsubscribe(id, w)
		if err != nil {
			return nil, err
		}
	}
}

// settleOrphan settles the record id with OrphanChange if it is still an
// orphan once it holds the write lock, and returns the record.
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
	return r, nil
}

// subscribe returns the wake-up for record id that this Store's Waits
// share, holding it until unsubscribe.
func (s *Store) subscribe(id string) *waiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.waiters[id]
	if w == nil {
		w = &waiter{ch: make(chan struct{})}
		s.waiters[id] = w
	}
	w.n++
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
