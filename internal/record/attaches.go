package record

import (
	"context"
	"errors"
	"sync"
	"time"
)

// AttachCounts are the attaches a store counted and has not yet written,
// by execution id: a store that batches them (see Store.Reserve) counts
// each, and adds them to the records it returns, through a Reading, and
// has them written every so often by the function it gave Start, and at
// Close. It is safe for concurrent use.
type AttachCounts struct {
	mu      sync.Mutex
	pending map[string]int
	// writes counts the writes of counts begun and ended, odd while one
	// is under way, and idle is closed when none is. Between a write's
	// commit and its Written, a record read shows the counts written
	// twice, in its stored count and in pending; read before the commit
	// and shown after Written, in neither. So a Reading a write
	// overlapped reads its stored counts again.
	writes   uint64
	idle     chan struct{}
	flushing sync.Mutex // one write of counts at a time

	every     time.Duration
	write     func(ctx context.Context, ids []string, ns []int32) error
	onError   func(error)
	once      sync.Once // starts the writer, or, at Close, keeps it from starting
	closeOnce sync.Once
	stop      chan struct{} // closed by Close
	stopped   chan struct{} // closed when the writer has returned; nil if it never started
}

// Start sets how the counts are written: every period, from the first
// attach counted on, write is called with the counts not yet written,
// and must call Written for those it wrote before it returns. onError,
// if not nil, is told of each failed write; the counts it did not write
// are kept for the next.
func (a *AttachCounts) Start(every time.Duration, write func(ctx context.Context, ids []string, ns []int32) error, onError func(error)) {
	a.every, a.write, a.onError = every, write, onError
	a.stop = make(chan struct{})
}

// startWriter starts the writer, once, if Start gave it a write.
func (a *AttachCounts) startWriter() {
	if a.write != nil {
		a.once.Do(func() {
			a.stopped = make(chan struct{})
			go a.loop()
		})
	}
}

// A Reading shows the counts not yet written in records a store reads:
// the store takes one with Begin before it reads them, and shows each
// with Show (or counts an attach to it with Add) after.
type Reading struct {
	a      *AttachCounts
	writes uint64
}

// Begin returns a Reading for records about to be read. It first waits
// out a write of the counts under way, which a read could meet on
// either side of its commit.
func (a *AttachCounts) Begin(ctx context.Context) (Reading, error) {
	for {
		a.mu.Lock()
		writes, idle := a.writes, a.idle
		a.mu.Unlock()
		if writes%2 == 0 {
			return Reading{a, writes}, nil
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return Reading{}, ctx.Err()
		}
	}
}

// TryBegin is Begin for a caller that must not wait: ok is false while
// a write of the counts is under way.
func (a *AttachCounts) TryBegin() (r Reading, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.writes%2 != 0 {
		return Reading{}, false
	}
	return Reading{a, a.writes}, true
}

// StoredCount reads the attached count of the record id as its store
// holds it.
type StoredCount func(ctx context.Context, id string) (int, error)

// Show adds to rec, read since r began, the attaches of it not yet
// written. If a write of the counts began since (one a second at most,
// so seldom), rec's stored count is read again with stored first. A
// nil rec is returned as it is.
func (r Reading) Show(ctx context.Context, rec *Record, stored StoredCount) (*Record, error) {
	return r.show(ctx, rec, stored, false)
}

// Add counts one more caller attached to rec, read since r began, and
// returns rec with its count as it now is, the attaches not yet written
// included, as Show does.
func (r Reading) Add(ctx context.Context, rec *Record, stored StoredCount) (*Record, error) {
	return r.show(ctx, rec, stored, true)
}

// Match shows rec, the holder of the key a reservation of fingerprint
// found, as Add does if it is of that action, else as Show does: a
// client key reused for another action is refused, not attached to.
func (r Reading) Match(ctx context.Context, rec *Record, fingerprint string, stored StoredCount) (*Record, error) {
	return r.show(ctx, rec, stored, rec.Fingerprint == fingerprint)
}

// TryMatch is Match for a caller that must not wait: if a write of the
// counts began since r began, it counts nothing and reports false, where
// Match would read rec's stored count again.
func (r Reading) TryMatch(rec *Record, fingerprint string) bool {
	return r.a.showSince(r.writes, rec, rec.Fingerprint == fingerprint)
}

// ShowAll shows each of recs, read since r began, as Show does, and
// leaves out those whose count, read again, the store no longer holds.
func (r Reading) ShowAll(ctx context.Context, recs []*Record, stored StoredCount) ([]*Record, error) {
	shown := recs[:0]
	for _, rec := range recs {
		switch _, err := r.Show(ctx, rec, stored); {
		case err == nil:
			shown = append(shown, rec)
		case !errors.Is(err, ErrNotFound): // else purged since
			return nil, err
		}
	}
	return shown, nil
}

func (r Reading) show(ctx context.Context, rec *Record, stored StoredCount, add bool) (*Record, error) {
	if rec == nil {
		return nil, nil
	}
	for {
		if r.a.showSince(r.writes, rec, add) {
			return rec, nil
		}
		var err error
		if r, err = r.a.Begin(ctx); err != nil {
			return nil, err
		}
		n, err := stored(ctx, rec.ID)
		if err != nil {
			return nil, err
		}
		rec.Attached = n
	}
}

// showSince adds to rec its attaches not yet written, this one first if
// add, unless a write of the counts began since writes.
func (a *AttachCounts) showSince(writes uint64, rec *Record, add bool) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.writes != writes {
		return false
	}
	if add {
		if a.pending == nil {
			a.pending = make(map[string]int)
		}
		a.pending[rec.ID]++
		a.startWriter()
	}
	rec.Attached += a.pending[rec.ID]
	return true
}

// begin starts a write of the counts, and returns them by id; none, and
// no write, if there are none.
func (a *AttachCounts) begin() (ids []string, ns []int32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, n := range a.pending {
		ids, ns = append(ids, id), append(ns, int32(n))
	}
	if len(ids) > 0 {
		a.writes++
		a.idle = make(chan struct{})
	}
	return ids, ns
}

// end ends the write of the counts begin started.
func (a *AttachCounts) end() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.writes++
	close(a.idle)
}

// Written takes counts that write was given, now written, off the
// pending ones; attaches counted meanwhile stay.
func (a *AttachCounts) Written(ids []string, ns []int32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, id := range ids {
		if a.pending[id] -= int(ns[i]); a.pending[id] <= 0 {
			delete(a.pending, id)
		}
	}
}

// loop writes the counts every period until Close.
func (a *AttachCounts) loop() {
	defer close(a.stopped)
	t := time.NewTicker(a.every)
	defer t.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-t.C:
			if err := a.Flush(context.Background()); err != nil && a.onError != nil {
				a.onError(err)
			}
			// A period from the write's end, not its start: a write as
			// slow as the period (a store that times out) would else
			// follow the last at once, and a read, which waits out
			// each, would never begin.
			t.Reset(a.every)
		}
	}
}

// Flush writes the pending counts now, as the writer does every period.
func (a *AttachCounts) Flush(ctx context.Context) error {
	a.flushing.Lock()
	defer a.flushing.Unlock()
	ids, ns := a.begin()
	if len(ids) == 0 {
		return nil
	}
	defer a.end()
	return a.write(ctx, ids, ns)
}

// Close stops the writer and writes, under ctx, what is left. The store
// calls it before it closes its connections; no attach may be counted
// after it.
func (a *AttachCounts) Close(ctx context.Context) (err error) {
	if a.write == nil {
		return nil
	}
	a.closeOnce.Do(func() {
		a.once.Do(func() {}) // no writer starts from here on
		close(a.stop)
		if a.stopped != nil {
			<-a.stopped
		}
		err = a.Flush(ctx)
	})
	return err
}
