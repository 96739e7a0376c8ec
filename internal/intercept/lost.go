package intercept

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// lostReservations holds the reservations whose answer the store did not
// give (it timed out, its connection broke). The store may have made them
// all the same, and each would then stay in flight under this live
// process's name, its lease renewed, every retry attaching to it and
// waiting. Nothing was sent under them, so this process fails each as
// soon as it can: when a call finds it, and at each lease renewal.
type lostReservations struct {
	// n counts reqs, so that the common case, none lost, takes no lock.
	n    atomic.Int64
	mu   sync.Mutex          // guards reqs, and n's changes
	reqs map[string]*Request // by execution id: the call that asked for it
}

// maxLost bounds lostReservations: past it, the oldest are forgotten, and
// a forgotten one is settled as any orphan is, once this process is gone.
const maxLost = 4096

// lostNote is the note of a lost reservation's failure.
const lostNote = "failed before it was sent: the store's answer to its reservation was lost"

func (l *lostReservations) add(id string, req *Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.reqs == nil {
		l.reqs = make(map[string]*Request)
	}
	if len(l.reqs) >= maxLost {
		for old := range l.reqs {
			delete(l.reqs, old)
			break
		}
	}
	l.reqs[id] = req
	l.n.Store(int64(len(l.reqs)))
}

// take removes id and returns the call that asked for it, or nil if id is
// not a lost reservation.
func (l *lostReservations) take(id string) *Request {
	if l.n.Load() == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	req := l.reqs[id]
	delete(l.reqs, id)
	l.n.Store(int64(len(l.reqs)))
	return req
}

// ids returns the lost reservations' ids.
func (l *lostReservations) ids() []string {
	if l.n.Load() == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := make([]string, 0, len(l.reqs))
	for id := range l.reqs {
		ids = append(ids, id)
	}
	return ids
}

// settleLost fails rec, a reservation of this process's whose answer the
// store lost, if it is still in flight under this process's name, and
// reports whether it did.
func (in *Interceptor) settleLost(ctx context.Context, req *Request, rec *record.Record) bool {
	if rec.Owner != in.owner || rec.State.Settled() {
		return false // taken over, or settled otherwise
	}
	if _, err := in.change(ctx, req, rec.ID, record.Change{To: record.Failed, Note: lostNote}); err != nil {
		in.log.Warn("failing a reservation whose answer the store had lost", "execution", rec.ID, "err", err)
		return false
	}
	in.log.Info("failed a reservation whose answer the store had lost; nothing was sent", "execution", rec.ID)
	return true
}

// settleLostReservations fails every lost reservation the store now holds,
// and forgets those it does not hold. One the store cannot tell of yet is
// kept for the next try.
func (in *Interceptor) settleLostReservations(ctx context.Context) {
	for _, id := range in.lost.ids() {
		rec, err := in.store.Get(ctx, id)
		switch {
		case errors.Is(err, record.ErrNotFound):
			in.lost.take(id) // never made
		case err != nil:
			return // the store is still down
		default:
			if req := in.lost.take(id); req != nil && !in.settleLost(ctx, req, rec) && !rec.State.Settled() && rec.Owner == in.owner {
				in.lost.add(id, req) // the update failed: next time
			}
		}
	}
}
