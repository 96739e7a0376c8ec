package intercept

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// A store outage longer than the lease keeps this process from renewing
// the leases of its executions, and from recording the outcomes it got
// meanwhile (recordLater). Once the store answers again, a call of this
// same process may meet such an execution first, find its lease lapsed,
// and settle it as an orphan: unknown, its owner taken for gone. The
// owner is this process, which holds the outcome. DESIGN 8 refuses the
// outcome of a process whose execution another took over; here no other
// did, so the outcome is recorded over that unknown, if nothing moved
// the execution since (no re-dispatch, no resolution).

// ownTakeovers holds, for this process's executions, the outcomes still
// to be recorded and the executions a call of its own settled as gone.
type ownTakeovers struct {
	mu sync.Mutex
	// kept holds the outcomes recordLater tries to record, by execution.
	kept map[string]*keptOutcome
	// keptN counts kept, so that a call finds none without the lock.
	keptN atomic.Int32
	// taken holds the executions this process settled as orphans while
	// it still ran them, with their attempts then: their outcome, once
	// known, is recorded over the unknown. Bounded: a process runs few.
	taken map[string]int
}

// maxTaken bounds ownTakeovers.taken.
const maxTaken = 1024

// A keptOutcome is an outcome recordLater tries to record.
type keptOutcome struct {
	req  *Request
	sent *record.Record // the execution as this process sent it
	c    record.Change
	// nudge wakes recordLater at once.
	nudge chan struct{}
	// finished is closed once recordLater is done with it.
	finished chan struct{}

	mu sync.Mutex // held while the outcome is being written
	// rec is the record once the outcome is in it, written over this
	// process's own takeover or not.
	rec *record.Record
	// over says that recordLater is to stop: the outcome is recorded, or
	// never can be.
	over bool
	// conflicts counts the tries the store refused as a conflict that
	// no takeover of this process's explained: the first may come just
	// before the call that made the takeover notes it.
	conflicts int
}

// keep registers the outcome c of execution sent, which recordLater is
// to record.
func (o *ownTakeovers) keep(req *Request, sent *record.Record, c record.Change) *keptOutcome {
	k := &keptOutcome{req: req, sent: sent, c: c, nudge: make(chan struct{}, 1), finished: make(chan struct{})}
	o.mu.Lock()
	if o.kept == nil {
		o.kept = make(map[string]*keptOutcome)
	}
	o.kept[sent.ID] = k
	o.keptN.Store(int32(len(o.kept)))
	o.mu.Unlock()
	return k
}

// forget drops execution id's kept outcome.
func (o *ownTakeovers) forget(id string, k *keptOutcome) {
	o.mu.Lock()
	if o.kept[id] == k {
		delete(o.kept, id)
	}
	o.keptN.Store(int32(len(o.kept)))
	o.mu.Unlock()
}

// keptForCall returns the kept outcome of an execution matched on key
// with fingerprint fp, if any: a call identical to one whose outcome
// the store has not taken yet.
func (o *ownTakeovers) keptForCall(key, fp string) *keptOutcome {
	// Small enough to be inlined: most often nothing is kept.
	if o.keptN.Load() == 0 {
		return nil
	}
	return o.findKept(key, fp)
}

// findKept is keptForCall with outcomes kept.
func (o *ownTakeovers) findKept(key, fp string) *keptOutcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, k := range o.kept {
		if k.sent.Key == key && k.sent.Fingerprint == fp {
			return k
		}
	}
	return nil
}

// keptFor returns execution id's kept outcome, if any.
func (o *ownTakeovers) keptFor(id string) *keptOutcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.kept[id]
}

// tookOver notes that a call of this process settled its own execution
// id as an orphan, sent attempts times, and returns the outcome kept for
// it, if any.
func (o *ownTakeovers) tookOver(id string, attempts int) *keptOutcome {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.taken == nil {
		o.taken = make(map[string]int)
	}
	if len(o.taken) < maxTaken {
		o.taken[id] = attempts
	}
	return o.kept[id]
}

// take returns the attempts of execution id when this process settled
// it as an orphan, if it did, and forgets it.
func (o *ownTakeovers) take(id string) (attempts int, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	attempts, ok = o.taken[id]
	delete(o.taken, id)
	return attempts, ok
}

// wake wakes k's recordLater, if it sleeps.
func (k *keptOutcome) wake() {
	select {
	case k.nudge <- struct{}{}:
	default:
	}
}

// finish tells those waiting on k that recordLater is done with it.
func (k *keptOutcome) finish() { close(k.finished) }

// takenOver journals the orphan rec says req's call settled, if any
// (journalizeTakeover), and returns the record the call goes on with:
// rec, or, where the execution was this process's own and its outcome is
// kept, the record with that outcome written over the unknown.
func (in *Interceptor) takenOver(req *Request, rec *record.Record) *record.Record {
	in.journalizeTakeover(req, rec)
	if rec.State != record.Unknown || rec.Owner != in.owner {
		return rec
	}
	if o := rec.Orphan; o != nil && o.ID == rec.ID && in.ownOrphan(o) {
		// This call took this process's own execution for gone.
		k := in.own.tookOver(o.ID, o.Attempts)
		if k == nil {
			return rec // still running: its outcome is recorded over it (settleOverOwn)
		}
		if settled := in.recordKept(req.bg(), o.ID, k); settled != nil {
			return settled
		}
		return rec
	}
	// A caller woken by the takeover: if this process holds the outcome,
	// it waits for its write, which follows the takeover if that was
	// this process's own.
	k := in.own.keptFor(rec.ID)
	if k == nil {
		return rec
	}
	select {
	case <-k.finished:
	case <-time.After(2 * recordRetryMax):
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.rec != nil {
		return k.rec
	}
	return rec
}

// ownOrphan reports whether o, an orphan a call of this process settled,
// was an execution this process sent.
func (in *Interceptor) ownOrphan(o *record.Record) bool {
	return o.Owner == in.owner && o.State == record.Unknown && o.Attempts > 0
}

// recordKept writes k's outcome over the unknown that this process's own
// takeover made of execution id, and returns the record, or nil if the
// store refused: recordLater, woken, then goes on trying.
func (in *Interceptor) recordKept(ctx context.Context, id string, k *keptOutcome) *record.Record {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.rec != nil {
		return k.rec // recordLater did
	}
	rec, err := in.settleOverOwn(ctx, k.req, id, k.c)
	if err != nil {
		in.log.Warn("recording an outcome over this process's own takeover", "execution", id, "state", k.c.To, "err", err)
	}
	k.rec = rec
	k.wake() // to try again, or, recorded, to end
	return rec
}

// tryKept tries once to record k's outcome, and reports whether that is
// over: recorded, or never to be.
func (in *Interceptor) tryKept(k *keptOutcome) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.rec != nil || k.over {
		return true // recorded over this process's own takeover, or by a call
	}
	k.over = in.recordKeptOnce(k)
	return k.over
}

// recordKeptOnce is tryKept's one try. k.mu must be held.
func (in *Interceptor) recordKeptOnce(k *keptOutcome) bool {
	req, id, c := k.req, k.sent.ID, k.c
	rec, err := in.change(req.bg(), req, id, c)
	switch {
	case err == nil:
		in.log.Info("recorded an outcome the store had refused", "execution", id, "state", c.To)
		k.rec = rec
		return true
	case errors.Is(err, record.ErrConflict):
		if rec := in.landed(req.bg(), id, c); rec != nil {
			// The failed write had reached the store, its answer
			// lost (a timeout): the outcome is recorded, and its
			// line goes in the journal as any transition's does.
			in.log.Info("recorded an outcome the store had refused: the earlier write had reached it", "execution", id, "state", c.To)
			in.obs.Transition(Tool{Name: rec.Tool, Listed: req.Listed}, c.To)
			in.journalize(req, rec, &c)
			k.rec = rec
			return true
		}
		rec, oerr := in.settleOverOwn(req.bg(), req, id, c)
		switch {
		case rec != nil:
			k.rec = rec
			return true
		case oerr != nil && !errors.Is(oerr, record.ErrConflict):
			return false // the store did not answer: again later
		case oerr == nil && k.conflicts == 0:
			k.conflicts++
			return false // once more, after the takeover's call had time to note it
		}
		in.log.Error("an outcome the store had refused was not recorded", "execution", id, "state", c.To, "err", err)
		return true
	case errors.Is(err, record.ErrNotFound):
		rec, err := in.restore(req, k.sent, c)
		if err != nil {
			in.log.Warn("writing again an execution the store lost; trying again later", "execution", id, "state", c.To, "err", err)
			return false
		}
		k.rec = rec
		return true
	}
	return false
}

// settleOverOwn records c, the outcome this process holds for execution
// id, over the unknown a call of its own settled it as, if one did. It
// returns the record, or nil and why not: nil if no call of this process
// took id over. A refusal leaves the takeover noted, to try again.
func (in *Interceptor) settleOverOwn(ctx context.Context, req *Request, id string, c record.Change) (*record.Record, error) {
	attempts, ok := in.own.take(id)
	if !ok || c.To == record.Unknown {
		return nil, nil
	}
	rec, err := in.change(ctx, req, id, overOwnTakeover(c, attempts))
	if err != nil {
		if !errors.Is(err, record.ErrConflict) {
			in.own.tookOver(id, attempts) // the store did not answer: again later
		}
		return nil, err
	}
	in.log.Info("recorded an outcome over the unknown this process had settled its own execution as", "execution", id, "state", c.To)
	return rec, nil
}

// overOwnTakeover is c, an outcome this process holds, as written over
// the unknown that its own takeover made of an execution sent attempts
// times: only from that unknown, and only if it was not sent again since.
func overOwnTakeover(c record.Change, attempts int) record.Change {
	c.Holder, c.From, c.Attempts = "", record.Unknown, attempts
	note := "its lease lapsed while the store did not answer, and this process, its owner, had taken it for gone"
	if c.Note != "" {
		note = c.Note + "; " + note
	}
	c.Note = note
	return c
}
