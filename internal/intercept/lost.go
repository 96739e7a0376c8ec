package intercept

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// A store that loses its data (a Redis restarted without persistence)
// forgets the executions under way with it. This process still holds the
// outcome of each of its own that it sent: written again, as the
// execution it was, the outcome is replayed to a retry, or to an
// identical call through any proxy, where a new reservation would run
// the call a second time.

// restoredNote is the note of a lost execution's dispatch, written again.
const restoredNote = "written again: the store had lost this execution after it was sent"

// restore writes sent, an execution this process sent and whose record
// the store lost, again, with c, its outcome, and returns the record. It
// returns nil and no error when the store holds another execution of the
// call by now: that one stands, and the outcome is not recorded. An
// error is the store's: calling again may do.
func (in *Interceptor) restore(req *Request, sent *record.Record, c record.Change) (*record.Record, error) {
	if in.mayHaveExpired(sent) {
		in.log.Error("the store no longer holds this execution, and this process's lease on it lapsed longer ago than its retention: another process may have taken it over, and the store dropped it since; this outcome was not recorded",
			"execution", sent.ID, "tool", sent.Tool, "state", c.To)
		return nil, nil
	}
	again := &record.Record{
		ID:          sent.ID,
		Key:         sent.Key,
		Fingerprint: sent.Fingerprint,
		Actor:       sent.Actor,
		Scope:       sent.Scope,
		Upstream:    sent.Upstream,
		Tool:        sent.Tool,
		Retention:   sent.Retention,
		Owner:       in.owner,
		LeaseUntil:  in.now().Add(in.lease),
	}
	rec, won, err := in.store.Reserve(req.bg(), again, record.ReserveOptions{Lease: in.lease})
	if err != nil {
		return nil, err
	}
	in.journalizeTakeover(req, rec)
	if !won && rec.ID != sent.ID {
		in.log.Error("the store lost this execution, and holds another of the same call by now: this outcome was not recorded",
			"execution", sent.ID, "tool", sent.Tool, "state", c.To, "other", rec.ID)
		return nil, nil
	}
	// Won, or written by an earlier try whose answer was lost.
	if rec.State == record.Accepted || rec.State == record.Authorized {
		if rec, err = in.redispatch(req, sent, rec); err != nil {
			return nil, err
		}
	}
	if !rec.State.Settled() {
		if rec, err = in.change(req.bg(), req, sent.ID, c); err != nil {
			return nil, err
		}
	}
	in.log.Error("the store had lost this execution; it is written again, with its outcome: did the store lose its data?",
		"execution", sent.ID, "tool", sent.Tool, "state", rec.State)
	return rec, nil
}

// mayHaveExpired reports whether the store may have dropped sent, an
// execution of this process's, for its age rather than in a loss of its
// data. Once this process's lease on it lapsed (a store it could not
// reach kept it from renewing), another process may have taken it over
// and settled it, and the store drops a settled record at the end of its
// retention. Written again then, it would stand over that takeover
// (DESIGN 8), and replay to calls its retention no longer covers.
func (in *Interceptor) mayHaveExpired(sent *record.Record) bool {
	lease := sent.LeaseUntil
	if r := time.Unix(0, in.renewed.Load()); r.After(lease) {
		lease = r
	}
	return !in.now().Before(lease.Add(sent.Retention))
}

// redispatch writes again the moves of sent, a lost execution that rec,
// in flight, holds again, up to its dispatch: its approval, if it was
// approved (who decided, through which channel, with what note), then
// the dispatch.
func (in *Interceptor) redispatch(req *Request, sent, rec *record.Record) (*record.Record, error) {
	for _, d := range sent.History {
		if d.State != record.Authorized || rec.State != record.Accepted {
			continue
		}
		a := record.Change{To: record.Authorized, Holder: in.owner, Note: d.Note, By: d.By, Via: d.Via}
		var err error
		if rec, err = in.store.Update(req.bg(), sent.ID, a); err != nil {
			return nil, err
		}
	}
	return in.store.Update(req.bg(), sent.ID, record.Change{To: record.Dispatched, Holder: in.owner, Note: restoredNote})
}

// outcomeOfLost answers e's caller with c, e's outcome, which the store
// could not record: it no longer holds the execution. Written again, the
// record answers; otherwise the caller gets the outcome this process
// holds, and a store that did not answer is tried again later.
func (in *Interceptor) outcomeOfLost(ctx context.Context, e *execution, c record.Change) {
	req, sent := e.req, e.rec
	rec, err := in.restore(req, sent, c)
	if rec != nil {
		in.answer(ctx, req, rec, e.m)
		return
	}
	lost := sent.Clone()
	lost.Apply(&c, in.now())
	if err != nil {
		in.log.Error("the store no longer holds this execution, and did not take it again: trying again later",
			"execution", sent.ID, "tool", sent.Tool, "state", c.To, "err", err)
		in.recordLater(req, sent, c)
	}
	in.answer(ctx, req, lost, e.m)
}

// sentCalls holds this process's executions from their dispatch until
// they end, by the key their calls are matched on: a call that wins a
// reservation while one of them runs finds the store lost it (lostSent).
type sentCalls struct {
	n  atomic.Int32 // len(m), so that a call finds none without the lock
	mu sync.Mutex
	m  map[string]*record.Record
}

// add notes rec, dispatched.
func (s *sentCalls) add(rec *record.Record) {
	s.mu.Lock()
	if s.m == nil {
		s.m = make(map[string]*record.Record)
	}
	s.m[rec.Key] = rec
	s.n.Store(int32(len(s.m)))
	s.mu.Unlock()
}

// drop forgets execution id, matched on key, once it ended. Small
// enough to be inlined: an execution's add comes before its drop, on its
// own way, so with none held there is none of its to forget, and a
// proxy whose store does not wait on I/O never adds one.
func (s *sentCalls) drop(key, id string) {
	if s.n.Load() != 0 {
		s.dropHeld(key, id)
	}
}

// dropHeld is drop with executions held.
func (s *sentCalls) dropHeld(key, id string) {
	s.mu.Lock()
	if r := s.m[key]; r != nil && r.ID == id {
		delete(s.m, key)
		s.n.Store(int32(len(s.m)))
	}
	s.mu.Unlock()
}

// other returns the execution of won's call, other than won, that this
// process runs, if any.
func (s *sentCalls) other(won *record.Record) *record.Record {
	if s.n.Load() == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.m[won.Key]; r != nil && r.ID != won.ID && r.Fingerprint == won.Fingerprint {
		return r
	}
	return nil
}

// of returns a copy of the execution matched on key, with fingerprint
// fp, that this process runs, if any.
func (s *sentCalls) of(key, fp string) *record.Record {
	if s.n.Load() == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.m[key]; r != nil && r.Fingerprint == fp {
		return r.Clone()
	}
	return nil
}

// otherAction returns a copy of the execution matched on key, a client
// key, that this process runs for an action other than fp's, if any.
func (s *sentCalls) otherAction(key, fp string) *record.Record {
	if s.n.Load() == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.m[key]; r != nil && r.Fingerprint != fp {
		return r.Clone()
	}
	return nil
}

// runningNote is the note of a reservation failed because this process
// runs an execution of the same call, which the store had lost.
const runningNote = "failed before it was sent: this process runs an execution of the same call, which the store had lost"

// lostKey returns the execution this process sent, and still runs,
// under the client key of req's call for another action, if the store
// lost it (a Redis restarted without persistence). The call matches it,
// and is refused for reusing the key (resolve), as it would be had the
// store kept it. It is matched before the call reserves anything: won
// and failed, as lostSent fails one, its reservation would stand under
// the key for another action, and keep the running one from being
// written again (restore), so that its own retries were refused.
func (in *Interceptor) lostKey(req *Request, fresh *record.Record) *record.Record {
	sent := in.sent.otherAction(fresh.Key, fresh.Fingerprint)
	if sent == nil || in.mayHaveExpired(sent) {
		// Expired, it is not written again (restore): the key is free.
		return nil
	}
	if _, err := in.store.Get(req.bg(), sent.ID); !errors.Is(err, record.ErrNotFound) {
		return nil // held, or unknown: the store's record decides
	}
	in.log.Error("the store had lost an execution this process runs under the call's client key: the key still names it",
		"execution", sent.ID, "tool", sent.Tool)
	return sent
}

// lostSent returns, for req's call, which won the reservation won, the
// execution of the same call this process sent and still runs, if the
// store lost it (a Redis restarted without persistence): run, won would
// do the action a second time. won is failed unsent, and the call
// attaches to the execution under way, which this process writes again
// with its outcome (restore).
func (in *Interceptor) lostSent(req *Request, won *record.Record) *record.Record {
	// Small enough to be inlined: most often none is held.
	if in.sent.n.Load() == 0 {
		return nil
	}
	return in.lostHeld(req, won)
}

// lostHeld is lostSent with executions held.
func (in *Interceptor) lostHeld(req *Request, won *record.Record) *record.Record {
	sent := in.sent.other(won)
	if sent == nil {
		return nil
	}
	if _, err := in.store.Get(req.bg(), sent.ID); !errors.Is(err, record.ErrNotFound) {
		return nil // held, or unknown: won is what the store made of it
	}
	in.log.Error("the store had lost an execution of this call that this process runs: the call waits for it rather than running the action again",
		"execution", sent.ID, "tool", sent.Tool, "other", won.ID)
	if won.State == record.Dispatched {
		in.journalizeAccepted(req, won, "")
	} else {
		in.journalize(req, won, &record.Change{To: record.Accepted})
	}
	in.abandon(req, won.ID, record.Change{To: record.Failed, From: won.State, Note: runningNote})
	return sent
}
