// Package memstore is the in-memory record.Store: one process, fastest, and
// forgotten when the process exits.
package memstore

import (
	"container/heap"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// Store is a record.Store held in memory. Settled records are dropped once
// they expire, so memory is bounded by what the retention keeps.
//
// Records are copied on write: the store never changes a record it has
// handed out, so it hands out the one it holds, and each change makes the
// next version. A call costs one copy per change, not one per read.
type Store struct {
	now func() time.Time

	mu    sync.Mutex        // guards byID, byKey, live and expires
	byID  map[string]*entry // every record not yet purged
	byKey map[string]*entry // the record currently holding each key
	// live holds the records in flight or completed and not yet
	// delivered: the few the next change is most likely for, looked up
	// before byID, and those Renew looks through.
	live    map[string]*entry
	expires expiryHeap // settled records by expiry
}

// entry is one execution: the current version of its record and the
// channel its waiters share.
type entry struct {
	rec *record.Record // never modified; replaced by each change
	// settled is closed when rec leaves the in-flight states; Wait selects
	// on it, so one close wakes every waiter at once. It is made by the
	// first Wait, not with the record: most executions are never waited
	// on, and the store keeps every record for its retention. A record
	// that goes back in flight (a re-dispatch of an unknown one) starts
	// again without one.
	settled chan struct{}
	index   int // position in the expiry heap, -1 when not in it
	// expires is the entry's key in the expiry heap: the record's
	// ExpiresAt when it was pushed, in Unix nanoseconds. A later change
	// only moves ExpiresAt later, so the key may lag behind it; purge
	// pushes such an entry again rather than dropping it. The heap is
	// thus not reordered on every change, and comparing two keys reads
	// no record.
	expires int64
	// history is where the record's versions keep their transitions:
	// room for the common life, in the entry's own allocation.
	history [commonLife]record.Transition
	// final is the version in a state no change leaves (delivered,
	// failed), in the entry's own allocation too: written once, when the
	// record enters that state, and never changed after.
	final     record.Record
	finalUsed bool
}

var _ record.Store = (*Store)(nil)

// New returns an empty Store.
func New(opts Options) *Store {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	return &Store{now: now, byID: make(map[string]*entry), byKey: make(map[string]*entry), live: make(map[string]*entry)}
}

// commonLife is the number of transitions of an execution that is
// accepted, dispatched, completed and delivered.
const commonLife = 4

// purgeBatch bounds the expired records dropped per call, so no single
// call pays for a large backlog.
const purgeBatch = 64

// Reserve implements record.Store.
func (s *Store) Reserve(ctx context.Context, r *record.Record, opts record.ReserveOptions) (*record.Record, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.purge(now, purgeBatch)

	cur, ok := s.byKey[r.Key]
	var orphan *record.Record // settled here
	if ok && cur.rec.Orphaned(now) {
		s.apply(cur, record.OrphanChange(cur.rec), now)
		orphan = cur.rec
	}
	if ok && !s.replaceable(cur.rec, r, now, opts) {
		if cur.rec.Fingerprint == r.Fingerprint {
			attached := *cur.rec
			attached.Attached++
			cur.rec = &attached
		}
		return cur.rec.WithOrphan(orphan), false, nil
	}
	if _, dup := s.byID[r.ID]; dup {
		return nil, false, fmt.Errorf("reserving %s: execution id already used", r.ID)
	}
	rec := r // the store's now (record.Store)
	rec.State = record.Accepted
	rec.LeaseUntil = opts.LeaseFrom(r, now)
	// Room for the common life (accepted, dispatched, completed,
	// delivered) up front: one allocation instead of three as it grows.
	// Each version appends past the end of the one before, which never
	// sees it.
	rec.ExpiresAt = time.Time{}
	e := &entry{rec: rec, index: -1}
	rec.History = append(e.history[:0], record.Transition{State: record.Accepted, At: now})
	s.byID[rec.ID] = e
	s.byKey[rec.Key] = e
	s.live[rec.ID] = e
	if opts.Dispatch {
		// No one has this version yet: it may change in place.
		rec.Apply(record.Change{To: record.Dispatched}, now)
	}
	return rec.WithOrphan(orphan), true, nil
}

func (s *Store) replaceable(r, next *record.Record, now time.Time, opts record.ReserveOptions) bool {
	if r.State.Settled() && !now.Before(r.ExpiresAt) {
		return true
	}
	return r.Fingerprint == next.Fingerprint && (r.State == record.Failed || slices.Contains(opts.Replace, r.State))
}

// Update implements record.Store.
func (s *Store) Update(ctx context.Context, id string, c record.Change) (*record.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	// Most changes are to a record under way: the small map first.
	e, ok := s.live[id]
	if !ok {
		e, ok = s.byID[id]
	}
	if !ok {
		return nil, fmt.Errorf("updating %s: %w", id, record.ErrNotFound)
	}
	r := e.rec
	if r.State == record.Delivered && c.To == record.Delivered && c.From == "" {
		return r, nil
	}
	if !c.Allowed(r.State) {
		return nil, fmt.Errorf("updating %s from %s to %s: %w", id, r.State, c.To, record.ErrConflict)
	}
	s.apply(e, c, now)
	return e.rec, nil
}

// apply moves e's record by c, which CanTransition allows. s.mu must be
// held.
func (s *Store) apply(e *entry, c record.Change, now time.Time) {
	var r *record.Record
	if (c.To == record.Delivered || c.To == record.Failed) && !e.finalUsed {
		e.final, e.finalUsed = *e.rec, true
		r = &e.final
	} else {
		next := *e.rec
		r = &next
	}
	wasInFlight, wasLive := r.State.InFlight(), isLive(r.State)
	r.Apply(c, now)
	e.rec = r
	switch live := isLive(r.State); {
	case wasLive && !live:
		delete(s.live, r.ID)
	case live && !wasLive:
		s.live[r.ID] = e
	}
	switch {
	case c.To.Settled():
		switch expires := r.ExpiresAt.UnixNano(); {
		case e.index < 0:
			e.expires = expires
			heap.Push(&s.expires, e)
		case expires < e.expires:
			e.expires = expires
			heap.Fix(&s.expires, e.index)
		}
		if wasInFlight {
			if e.settled != nil {
				close(e.settled)
				e.settled = nil // waiters hold it; a later Wait finds the record settled
			}
		}
	case !wasInFlight:
		// Back in flight (a re-dispatch of an unknown one): new waiters
		// need a channel that is still open (the next Wait makes it), and
		// the owner a lease.
		e.settled = nil
		if e.index >= 0 {
			heap.Remove(&s.expires, e.index)
		}
	}
}

// isLive reports whether a record in state st belongs in Store.live.
func isLive(st record.State) bool { return st.InFlight() || st == record.Completed }

// Renew implements record.Store.
func (s *Store) Renew(ctx context.Context, owner string, until time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.PurgeExpired()
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, e := range s.live {
		switch r := e.rec; {
		case r.State.InFlight() && r.Owner == owner:
			renewed := *r
			renewed.LeaseUntil = until
			e.rec = &renewed
		case r.State == record.Completed && now.Sub(r.At(record.Completed)) > staleCompletion:
			// Its caller left without the answer: no delivery is
			// coming soon, and live stays small.
			delete(s.live, id)
		}
	}
	return nil
}

// staleCompletion is how long a completed record stays in live waiting
// for its delivery; Update finds it in byID after that.
const staleCompletion = time.Minute

// Get implements record.Store.
func (s *Store) Get(ctx context.Context, id string) (*record.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.byID[id]
	if !ok {
		return nil, fmt.Errorf("getting %s: %w", id, record.ErrNotFound)
	}
	return e.rec, nil
}

// Wait implements record.Store.
func (s *Store) Wait(ctx context.Context, id string) (*record.Record, error) {
	for {
		now := s.now()
		s.mu.Lock()
		e, ok := s.byID[id]
		if !ok {
			s.mu.Unlock()
			return nil, fmt.Errorf("waiting for %s: %w", id, record.ErrNotFound)
		}
		var orphan *record.Record // settled here
		if e.rec.Orphaned(now) {
			s.apply(e, record.OrphanChange(e.rec), now)
			orphan = e.rec
		}
		if e.rec.State.Settled() {
			r := e.rec
			s.mu.Unlock()
			return r.WithOrphan(orphan), nil
		}
		if e.settled == nil {
			e.settled = make(chan struct{})
		}
		settled := e.settled
		lease := e.rec.LeaseUntil
		s.mu.Unlock()
		if err := waitFor(ctx, settled, lease, now); err != nil {
			return nil, err
		}
	}
}

// waitFor waits for settled to close, or for lease (if set) to pass, so
// that an orphan is noticed.
func waitFor(ctx context.Context, settled <-chan struct{}, lease, now time.Time) error {
	var lapse <-chan time.Time
	if !lease.IsZero() {
		t := time.NewTimer(lease.Sub(now) + time.Millisecond)
		defer t.Stop()
		lapse = t.C
	}
	select {
	case <-settled:
	case <-lapse:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// Records returns every record the store holds, in no order. They are
// shared: read them, never change them.
func (s *Store) Records() []*record.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	recs := make([]*record.Record, 0, len(s.byID))
	for _, e := range s.byID {
		recs = append(recs, e.rec)
	}
	return recs
}

// List implements record.Lister.
func (s *Store) List(ctx context.Context, f record.Filter) ([]*record.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	floor := ""
	if !f.Since.IsZero() {
		floor = record.IDFloor(f.Since)
	}
	var recs []*record.Record
	for _, r := range s.Records() {
		if (f.Tool == "" || r.Tool == f.Tool) && (f.State == "" || r.State == f.State) && r.ID >= floor {
			recs = append(recs, r)
		}
	}
	slices.SortFunc(recs, func(a, b *record.Record) int { return strings.Compare(b.ID, a.ID) })
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	if len(recs) > limit {
		recs = recs[:limit]
	}
	return recs, nil
}

// Len returns how many records the store holds.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byID)
}

// purge drops up to max expired records and reports whether it stopped
// at max, with more perhaps due. s.mu must be held.
func (s *Store) purge(now time.Time, max int) (more bool) {
	// By the wall clock alone, as the heap's keys: a time's monotonic
	// reading, which Before would use, can disagree with it after the
	// machine slept or its clock was set, and an entry due by one and
	// not by the other would be popped and pushed back for ever.
	wall := now.UnixNano()
	for i := 0; i < max; i++ {
		if len(s.expires) == 0 {
			return false
		}
		e := s.expires[0]
		if wall < e.expires {
			return false
		}
		heap.Pop(&s.expires)
		if later := e.rec.ExpiresAt.UnixNano(); later > e.expires {
			// Settled again since it was pushed (delivered after
			// completed): it expires later.
			e.expires = later
			heap.Push(&s.expires, e)
			continue
		}
		delete(s.byID, e.rec.ID)
		delete(s.live, e.rec.ID) // completed, and never delivered
		if s.byKey[e.rec.Key] == e {
			delete(s.byKey, e.rec.Key)
		}
	}
	return true
}

// PurgeExpired drops every record whose retention has run out, a batch
// under the lock at a time, so that calls go on between batches. Renew
// calls it: a proxy renews its leases every few seconds, busy or idle, so
// a store that no call reaches is purged too.
func (s *Store) PurgeExpired() {
	for more := true; more; {
		now := s.now()
		s.mu.Lock()
		more = s.purge(now, purgeIdleBatch)
		s.mu.Unlock()
	}
}

// purgeIdleBatch bounds the records PurgeExpired drops under the lock at
// once: about a millisecond's work.
const purgeIdleBatch = 4096

// expiryHeap orders settled entries by ExpiresAt, soonest first.
type expiryHeap []*entry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expires < h[j].expires }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *expiryHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	e.index = -1
	*h = old[:len(old)-1]
	return e
}
