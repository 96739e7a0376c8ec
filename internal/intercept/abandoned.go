package intercept

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// abandoned holds the executions this process holds in the store but
// will never send, whose settling the store did not take: a reservation
// whose answer was lost (it timed out, its connection broke: the store
// may have made it all the same), or a reservation whose dispatch or
// failure the store refused. Each would stay in flight under this live
// process's name, its lease renewed, every retry attaching to it and
// waiting for ever. Nothing was sent under them, so this process settles
// each as soon as the store takes it: when a call finds it, and at each
// lease renewal.
type abandoned struct {
	// n counts m, so that the common case, none abandoned, takes no lock.
	n  atomic.Int64
	mu sync.Mutex // guards m, and n's changes
	m  map[string]abandonment
}

// An abandonment is an execution abandoned, and how to settle it.
type abandonment struct {
	req *Request      // the call that reserved or claimed it
	c   record.Change // settles it, nothing having been sent
	// undecided marks an execution whose decision the store may have
	// taken, its answer lost: c settles it from accepted or authorized,
	// whichever it is in, and never once it is dispatched.
	undecided bool
}

// change returns the change that settles rec by a, and whether one may.
func (a abandonment) change(rec *record.Record) (record.Change, bool) {
	c := a.c
	if a.undecided {
		if rec.State != record.Accepted && rec.State != record.Authorized {
			return c, false
		}
		c.From = rec.State
	}
	return c, c.Allowed(rec.State)
}

// maxAbandoned bounds abandoned: past it, the oldest are forgotten, and a
// forgotten one is settled as any orphan is, once this process is gone.
const maxAbandoned = 4096

// lostNote is the note of a lost reservation's failure.
const lostNote = "failed before it was sent: the store's answer to its reservation was lost"

func (l *abandoned) add(id string, a abandonment) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = make(map[string]abandonment)
	}
	if _, ok := l.m[id]; !ok && len(l.m) >= maxAbandoned {
		for old := range l.m {
			delete(l.m, old)
			break
		}
	}
	l.m[id] = a
	l.n.Store(int64(len(l.m)))
}

// take removes id and returns its abandonment; ok is false if id is not
// abandoned.
func (l *abandoned) take(id string) (a abandonment, ok bool) {
	if l.n.Load() == 0 {
		return abandonment{}, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	a, ok = l.m[id]
	delete(l.m, id)
	l.n.Store(int64(len(l.m)))
	return a, ok
}

// has returns id's abandonment, if id is abandoned.
func (l *abandoned) has(id string) (a abandonment, ok bool) {
	if l.n.Load() == 0 {
		return abandonment{}, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	a, ok = l.m[id]
	return a, ok
}

// ids returns the abandoned executions' ids.
func (l *abandoned) ids() []string {
	if l.n.Load() == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := make([]string, 0, len(l.m))
	for id := range l.m {
		ids = append(ids, id)
	}
	return ids
}

// abandon settles execution id, which req's call reserved or claimed
// and will not send, by c, and returns the record it made. If the store
// refuses, it returns nil, and the execution is settled later
// (settleAbandoned).
func (in *Interceptor) abandon(req *Request, id string, c record.Change) *record.Record {
	rec, err := in.change(req.bg(), req, id, c)
	switch {
	case err == nil:
		return rec
	case errors.Is(err, record.ErrConflict), errors.Is(err, record.ErrNotFound):
		// Settled otherwise, taken over, or (a re-dispatch's claim the
		// store never wrote) still as it was: nothing is left to do.
		in.log.Debug("settling an execution that was not sent: nothing to settle", "execution", id, "state", c.To, "err", err)
	default:
		in.log.Error("settling an execution that was not sent; trying again later", "execution", id, "state", c.To, "err", err)
		in.abandoned.add(id, abandonment{req: req, c: c})
	}
	return nil
}

// abandonUndecided settles execution id as failed, whose decision the
// store did not take, or took with its answer lost: from accepted, or
// from authorized, but never once dispatched (another caller of this
// process may have found it authorized and sent it). If the store does
// not answer, it is settled later.
func (in *Interceptor) abandonUndecided(req *Request, id, note string) {
	a := abandonment{req: req, c: record.Change{To: record.Failed, Holder: in.owner, Note: note}, undecided: true}
	for _, from := range []record.State{record.Accepted, record.Authorized} {
		c := a.c
		c.From = from
		_, err := in.change(req.bg(), req, id, c)
		switch {
		case err == nil, errors.Is(err, record.ErrNotFound):
			return
		case errors.Is(err, record.ErrConflict):
			continue // in the other state, or moved on
		}
		in.log.Error("settling an execution that was not sent; trying again later", "execution", id, "state", c.To, "err", err)
		in.abandoned.add(id, a)
		return
	}
}

// settleAbandoned settles rec by a, if it is still in flight under this
// process's name, and reports whether it did. keep is true when the
// store refused and it is to be tried again.
func (in *Interceptor) settleAbandoned(ctx context.Context, a abandonment, rec *record.Record) (settled, keep bool) {
	c, ok := a.change(rec)
	if rec.Owner != in.owner || rec.State.Settled() || !ok {
		return false, false // taken over, or settled otherwise
	}
	_, err := in.change(ctx, a.req, rec.ID, c)
	switch {
	case err == nil:
		in.log.Info("settled an execution that was not sent", "execution", rec.ID, "state", c.To, "note", c.Note)
		return true, false
	case errors.Is(err, record.ErrConflict), errors.Is(err, record.ErrNotFound):
		return false, false
	default:
		in.log.Warn("settling an execution that was not sent", "execution", rec.ID, "state", a.c.To, "err", err)
		return false, true
	}
}

// settleAbandonedAll settles every abandoned execution the store now
// holds in flight, and forgets the others. It stops at the first that
// the store does not answer for, to leave the rest for the next try.
func (in *Interceptor) settleAbandonedAll(ctx context.Context) {
	for _, id := range in.abandoned.ids() {
		rec, err := in.store.Get(ctx, id)
		switch {
		case errors.Is(err, record.ErrNotFound):
			in.abandoned.take(id) // never made
		case err != nil:
			return // the store is still down, or too busy to answer
		default:
			a, ok := in.abandoned.take(id)
			if !ok {
				continue // a call took it meanwhile
			}
			if _, keep := in.settleAbandoned(ctx, a, rec); keep {
				in.abandoned.add(id, a)
			}
		}
	}
}

// SettleAbandoned settles the abandoned executions, trying again until
// none is left or ctx is done, for a process about to exit. One left
// stays in flight under the name of a process gone, and once its lease
// lapses it is unknown: the next identical call would be blocked, though
// nothing was sent and its caller was told to call again.
func (in *Interceptor) SettleAbandoned(ctx context.Context) error {
	wait := recordRetryMin
	for {
		in.settleAbandonedAll(ctx)
		if in.abandoned.n.Load() == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, recordRetryMax)
	}
}
