package record

import "sync"

// AttachCounts are the attaches a store counted and has not yet written,
// by execution id: a store that batches them (see Store.Reserve) keeps
// them here, adds them to the records it returns, and takes off what it
// wrote. It is safe for concurrent use; the zero value is empty.
type AttachCounts struct {
	mu      sync.Mutex
	pending map[string]int
}

// Add counts one more caller attached to id and returns the count of id
// not yet written, this one included.
func (a *AttachCounts) Add(id string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pending == nil {
		a.pending = make(map[string]int)
	}
	a.pending[id]++
	return a.pending[id]
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
