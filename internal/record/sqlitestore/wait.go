package sqlitestore

import (
	"context"
	"fmt"
	"maps"
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
	r, err := s.waitShown(ctx, waitKey{id, untilSettled})
	if err != nil {
		return nil, fmt.Errorf("waiting for %s: %w", id, err)
	}
	return r, nil
}

// WaitDecided implements record.Decider as Wait does, woken when the
// record leaves Accepted: by this Store's Update at once, by another
// process's through the same poll.
func (s *Store) WaitDecided(ctx context.Context, id string) (*record.Record, error) {
	r, err := s.waitShown(ctx, waitKey{id, untilDecided})
	if err != nil {
		return nil, fmt.Errorf("waiting for the decision on %s: %w", id, err)
	}
	return r, nil
}

// waitShown is wait, with the attaches of the record not yet written.
func (s *Store) waitShown(ctx context.Context, k waitKey) (*record.Record, error) {
	reading, err := s.attaches.Begin(ctx)
	if err != nil {
		return nil, err
	}
	r, err := s.wait(ctx, k)
	if err != nil {
		return nil, err
	}
	if r, err = reading.Show(ctx, r, s.storedAttached); err != nil {
		return nil, err
	}
	return record.ShowOrphanAsItself(r), nil
}

// An until is the change a Wait waits for.
type until uint8

const (
	untilSettled until = iota // the record left the in-flight states
	untilDecided              // the record left Accepted
)

// reached reports whether a record in state st is past the change.
func (u until) reached(st record.State) bool {
	if u == untilDecided {
		return st != record.Accepted
	}
	return st.Settled()
}

// A waitKey names the waiter that the Waits for one change of one record
// share.
type waitKey struct {
	id    string
	until until
}

func (s *Store) wait(ctx context.Context, k waitKey) (*record.Record, error) {
	for {
		// Subscribed before the read, so a change after it is not missed.
		w := s.subscribe(k)
		r, err := getRecord(ctx, s.st.get, k.id)
		if err == nil && r.Orphaned(s.clock()) {
			r, err = s.settleOrphan(ctx, k.id)
		}
		if err != nil || k.until.reached(r.State) {
			s.unsubscribe(k, w)
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
		s.unsubscribe(k, w)
		if err != nil {
			return nil, err
		}
	}
}

// settleOrphan settles the record id with OrphanChange if it is still an
// orphan once it holds the write lock, and returns the record, with its
// Orphan set if this call settled it.
func (s *Store) settleOrphan(ctx context.Context, id string) (*record.Record, error) {
	tx, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	now := s.clock()
	r, err := getRecord(ctx, tx.stmt(ctx, s.st.byID), id)
	if err != nil || !r.Orphaned(now) {
		return r, err
	}
	apply(r, record.OrphanChange(r), now)
	if _, err := s.writeRecord(ctx, tx, r); err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	s.notify(id, r.State)
	return r.WithOrphan(r.Clone()), nil
}

// subscribe returns the wake-up for k that this Store's Waits share,
// holding it until unsubscribe, and sees that the poller runs.
func (s *Store) subscribe(k waitKey) *waiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.waiters[k]
	if w == nil {
		w = &waiter{ch: make(chan struct{})}
		s.waiters[k] = w
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

func (s *Store) unsubscribe(k waitKey, w *waiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.n--
	if w.n == 0 && s.waiters[k] == w {
		delete(s.waiters, k)
	}
}

// notify wakes the Waits of this Store for record id that its new state
// st ends.
func (s *Store) notify(id string, st record.State) {
	for _, u := range []until{untilSettled, untilDecided} {
		if u.reached(st) {
			s.wake(waitKey{id, u})
		}
	}
}

// wake wakes every Wait of this Store for k.
func (s *Store) wake(k waitKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.waiters[k]; w != nil {
		close(w.ch)
		delete(s.waiters, k)
	}
}

// poll wakes the Waits of this Store whose records another Store or
// process changed as they wait for, until none waits or the Store closes.
// Each round reads the states of all their records, pollChunk ids a
// statement: thousands of Waits reading each its own record would take
// the CPU and the file from the work they wait for.
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
		keys := s.waited()
		if keys == nil {
			return
		}
		// A round's cost grows with the records waited on, and so does
		// the pause after one that found something.
		floor = minPoll + time.Duration(len(keys))*pollPerRecord
		reached, err := s.reachedOf(keys)
		for _, k := range reached {
			s.wake(k)
		}
		if err != nil || len(reached) == 0 {
			// A read that failed is tried again as a round that found
			// nothing is: after a longer pause.
			interval = min(max(2*interval, floor), maxPoll)
		} else {
			interval = min(floor, maxPoll)
		}
	}
}

// waited returns what some Wait of this Store waits for; nil, and the
// poller marked stopped, if nothing.
func (s *Store) waited() []waitKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.waiters) == 0 {
		s.polling = false
		return nil
	}
	keys := make([]waitKey, 0, len(s.waiters))
	for k := range s.waiters {
		keys = append(keys, k)
	}
	return keys
}

// reachedOf returns those of keys whose records have changed as they
// wait for, or are gone.
func (s *Store) reachedOf(keys []waitKey) ([]waitKey, error) {
	ctx, cancel := context.WithTimeout(context.Background(), busyTimeout)
	defer cancel()
	states := make(map[string]record.State, len(keys))
	for _, k := range keys {
		states[k.id] = ""
	}
	ids := slices.Collect(maps.Keys(states))
	for chunk := range slices.Chunk(ids, pollChunk) {
		q := "SELECT id, state FROM records WHERE id IN (?" + strings.Repeat(", ?", len(chunk)-1) + ")"
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		if err := s.collect(ctx, q, args, states); err != nil {
			return nil, err
		}
	}
	var reached []waitKey
	for _, k := range keys {
		if st := states[k.id]; st == "" || k.until.reached(st) {
			reached = append(reached, k)
		}
	}
	return reached, nil
}

// collect sets in states the state of each record the query q gives.
func (s *Store) collect(ctx context.Context, q string, args []any, states map[string]record.State) error {
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var st record.State
		if err := rows.Scan(&id, &st); err != nil {
			return err
		}
		states[id] = st
	}
	return rows.Err()
}
