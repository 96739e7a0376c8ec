package record

import (
	"context"
	"sync"
	"time"
)

// AttachCounts are the attaches a store counted and has not yet written,
// by execution id: a store that batches them (see Store.Reserve) counts
// each with Add, adds them to the records it returns with Show, and has
// them written every so often by the function it gave Start, and at
// Close. It is safe for concurrent use.
type AttachCounts struct {
	mu      sync.Mutex
	pending map[string]int

	every     time.Duration
	write     func(ctx context.Context, ids []string, ns []int32) error
	onError   func(error)
	once      sync.Once // starts the writer, or, at Close, keeps it from starting
	closeOnce sync.Once
	stop      chan struct{} // closed by Close
	stopped   chan struct{} // closed when the writer has returned; nil if it never started
}

// Start sets how the counts are written: every period, from the first
// Add on, write is called with the counts a Snapshot gives, and must
// call Written for those it wrote. onError, if not nil, is told of each
// failed write; the counts it did not write are kept for the next.
func (a *AttachCounts) Start(every time.Duration, write func(ctx context.Context, ids []string, ns []int32) error, onError func(error)) {
	a.every, a.write, a.onError = every, write, onError
	a.stop = make(chan struct{})
}

// Add counts one more caller attached to id and returns the count of id
// not yet written, this one included.
func (a *AttachCounts) Add(id string) int {
	a.mu.Lock()
	if a.pending == nil {
		a.pending = make(map[string]int)
	}
	a.pending[id]++
	n := a.pending[id]
	a.mu.Unlock()
	if a.write != nil {
		a.once.Do(func() {
			a.stopped = make(chan struct{})
			go a.loop()
		})
	}
	return n
}

// Of returns the attaches of id not yet written.
func (a *AttachCounts) Of(id string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pending[id]
}

// Show adds to rec, just read, the attaches of it not yet written.
func (a *AttachCounts) Show(rec *Record) *Record {
	if rec != nil {
		rec.Attached += a.Of(rec.ID)
	}
	return rec
}

// Snapshot returns the counts to write, by id.
func (a *AttachCounts) Snapshot() (ids []string, ns []int32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, n := range a.pending {
		ids, ns = append(ids, id), append(ns, int32(n))
	}
	return ids, ns
}

// Written takes counts that a Snapshot gave, now written, off the
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
			if err := a.flush(context.Background()); err != nil && a.onError != nil {
				a.onError(err)
			}
		}
	}
}

// flush writes the pending counts.
func (a *AttachCounts) flush(ctx context.Context) error {
	ids, ns := a.Snapshot()
	if len(ids) == 0 {
		return nil
	}
	return a.write(ctx, ids, ns)
}

// Close stops the writer and writes, under ctx, what is left. The store
// calls it before it closes its connections; Add must not follow it.
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
		err = a.flush(ctx)
	})
	return err
}
