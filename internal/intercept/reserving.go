package intercept

import (
	"context"
	"errors"
	"slices"
	"sync"
	"syscall"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// A store that waits (Options.StoreWaits) may take its time to reserve a
// call: a SQLite file whose write lock another process holds, a server
// slow to answer. The reservation is not under the caller's context
// (handle), so it may outlast the call's session, whose caller is owed an
// answer all the same: the session's end gives it (EndReserving), and the
// call's goroutine, once the store answers, fails what it reserved rather
// than send it. Request.stage says which of the two answers the call;
// each takes it with a compare-and-swap, so only one does, and a call
// answered that it did not run is never sent.
//
// The call's goroutine marks the call reserving before it reads its
// context, and the session ends the context before it looks at the mark:
// so a call the session's end finds not yet reserving sees its context
// ended, and answers itself (leftBeforeReserving).

// Where a call is with its reservation (Request.stage).
const (
	stageBefore    int32 = iota // not reserving, or with a store that does not wait
	stageReserving              // the store is asked; either may answer the call
	stageReserved               // the call's goroutine answers it
	stageEnded                  // the session's end answered it: nothing is sent
)

// startReserving marks req as reserving, with a store that waits.
func (in *Interceptor) startReserving(req *Request) {
	if in.storeWaits {
		req.stage.Store(stageReserving)
		in.asking.add(req)
	}
}

// keepsCall reports whether the call's goroutine still answers req, once
// it stops reserving: it does unless the session's end answered it.
func (in *Interceptor) keepsCall(req *Request) bool {
	if !in.storeWaits {
		return true
	}
	in.asking.drop(req)
	return req.stage.CompareAndSwap(stageReserving, stageReserved)
}

// askingCalls are the calls of a tool that asks for approval that a
// store that waits is reserving, by session. A caller that detached
// while its call was reserved is no longer among the calls its session
// ends (EndReserving), and its context does not end with the session:
// its execution would then await, after the session, a decision that
// nothing could act on, or be refused for a client no longer there.
// EndSession ends their reservations instead. Other calls are not kept:
// their sends fail with the session's upstream, and say so.
type askingCalls struct {
	mu sync.Mutex
	m  map[string]map[*Request]struct{}
}

func asks(req *Request) bool {
	return req.Origin.Session != "" && req.Policy.NeedsApproval()
}

func (a *askingCalls) add(req *Request) {
	if !asks(req) {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = make(map[string]map[*Request]struct{})
	}
	if a.m[req.Origin.Session] == nil {
		a.m[req.Origin.Session] = make(map[*Request]struct{})
	}
	a.m[req.Origin.Session][req] = struct{}{}
}

func (a *askingCalls) drop(req *Request) {
	if !asks(req) {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.m[req.Origin.Session], req)
	if len(a.m[req.Origin.Session]) == 0 {
		delete(a.m, req.Origin.Session)
	}
}

// take forgets and returns the calls of session still reserving.
func (a *askingCalls) take(session string) []*Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	var reqs []*Request
	for req := range a.m[session] {
		reqs = append(reqs, req)
	}
	delete(a.m, session)
	return reqs
}

// EndReserving answers req, a call whose session is ending, if a store
// that waits is still reserving it: nothing was sent, so it is told it did
// not run (NotRunAtSessionEnd), and may be made again. The reservation, if
// the store makes it all the same, is failed, never sent. It reports
// whether it answered. The session must have ended req's context with
// ErrSessionEnded first: a call not yet reserving then answers itself.
func (in *Interceptor) EndReserving(req *Request) bool {
	// Counted before the swap: the call's goroutine, which counts it
	// done, may see the swap at once.
	in.late.add()
	if !req.stage.CompareAndSwap(stageReserving, stageEnded) {
		in.late.done()
		return false
	}
	in.leftBeforeReserving(req, ErrSessionEnded)
	return true
}

// WaitLate waits, until ctx is done, for the calls EndReserving answered
// to be done with the store: each reservation the store made failed, or
// remembered to be (abandoned). A proxy told to stop waits for them a
// moment: one the store makes after the process is gone stays in flight,
// to be unknown once its lease lapses, though it was never sent.
func (in *Interceptor) WaitLate(ctx context.Context) error {
	return in.late.wait(ctx)
}

// lateCalls counts calls, and tells when none are left. Unlike a
// WaitGroup's, its count may rise again while someone waits.
type lateCalls struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n falls to 0; nil when no one waits
}

func (l *lateCalls) add() {
	l.mu.Lock()
	l.n++
	l.mu.Unlock()
}

func (l *lateCalls) done() {
	l.mu.Lock()
	if l.n--; l.n == 0 && l.zero != nil {
		close(l.zero)
		l.zero = nil
	}
	l.mu.Unlock()
}

// wait waits until the count is 0 or ctx is done.
func (l *lateCalls) wait(ctx context.Context) error {
	l.mu.Lock()
	if l.n == 0 {
		l.mu.Unlock()
		return nil
	}
	if l.zero == nil {
		l.zero = make(chan struct{})
	}
	zero := l.zero
	l.mu.Unlock()
	select {
	case <-zero:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// reserve asks the store to reserve fresh for req, and journals what it
// made of it. A won reservation, or an error, is req's to act on.
func (in *Interceptor) reserve(req *Request, fresh *record.Record, opts record.ReserveOptions) (*record.Record, bool, error) {
	// Not under the caller's context: a reservation the store made but
	// whose answer a cancellation cut off would stay reserved, never sent,
	// and every retry would attach to it. Once asked for, it is seen
	// through (the store bounds its own operations).
	if k := in.own.keptForCall(fresh.Key, fresh.Fingerprint); k != nil && in.tryKept(k) {
		// This process holds the outcome of an execution of this very
		// call, which the store had not taken: it has now (or has it
		// again, having lost it), and this call finds it.
		k.wake()
	}
	if req.Call.Key != "" {
		if sent := in.lostKey(req, fresh); sent != nil {
			return sent, false, nil
		}
	}
	if slices.Contains(opts.Replace, record.Delivered) {
		// A caller that got the answer of an execution of this call may
		// ask again before the store has recorded that it got it: once
		// recorded, this call replaces it rather than replaying it.
		in.delivering.wait(fresh.Key)
	}
	rec, won, err := in.store.Reserve(req.bg(), fresh, opts)
	if err != nil {
		return nil, false, err
	}
	rec = in.takenOver(req, rec)
	if won {
		if sent := in.lostSent(req, rec); sent != nil {
			return sent, false, nil
		}
		return rec, true, nil
	}
	if a, ok := in.abandoned.take(rec.ID); ok && in.retake(req.bg(), rec, a) {
		// The call found an execution of this process's that was never
		// sent nor settled (the store's answer to its reservation was
		// lost, or it refused the dispatch): settled now, it is reserved
		// again, and this call runs or attaches to what it came to.
		opts.Unheld = false // held, by rec
		if rec, won, err = in.store.Reserve(req.bg(), fresh, opts); err != nil {
			return nil, false, err
		}
		rec = in.takenOver(req, rec)
	}
	return rec, won, nil
}

// reservedAfterEnd sees through the reservation of req, of execution id,
// a call the session's end answered while the store reserved it
// (EndReserving): what the store made (rec, won; or err) is never sent. A
// won reservation is failed, at once or, if the store refuses, later
// (abandoned); one the store did not answer for is remembered to be
// failed if it was made.
func (in *Interceptor) reservedAfterEnd(req *Request, id string, rec *record.Record, won bool, err error) {
	switch {
	case err != nil:
		in.log.Warn("the store refused the reservation of a call its session's end answered", "tool", req.Call.Name, "request", req.Correlation, "err", err)
		in.mayHaveReserved(req, id, err)
	case won:
		if rec.State == record.Dispatched {
			in.journalizeAccepted(req, rec, "")
		} else {
			in.journalize(req, rec, &record.Change{To: record.Accepted})
		}
		in.log.Info("the session ended while the store reserved the call; failing it, unsent", "execution", rec.ID, "tool", rec.Tool, "request", req.Correlation)
		in.abandon(req, rec.ID, record.Change{To: record.Failed, From: rec.State, Note: endedNote})
	}
	// Otherwise it matched an execution under way, or settled: the
	// call made nothing of its own.
}

// endedNote is the note of a reservation failed because its call's
// session ended while the store made it.
const endedNote = "failed before it was sent: the session ended while the store reserved it"

// mayHaveReserved remembers execution id, whose reservation for req the
// store refused or did not answer, to be failed once the store answers:
// it may have made it all the same (abandoned).
func (in *Interceptor) mayHaveReserved(req *Request, id string, err error) {
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, record.ErrNotSent) {
		// It never reached the store: nothing to fail later, nor for
		// an exiting proxy to wait for.
		return
	}
	in.abandoned.add(id, abandonment{req: req, c: record.Change{To: record.Failed, Note: lostNote}})
}
