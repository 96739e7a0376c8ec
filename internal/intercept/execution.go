package intercept

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/telemetry"
)

// An execution is one call's run from the account's admission to its
// caller's answer: it takes room in the account, records each attempt in
// the store before its bytes go, sends, decides from the answer whether
// to send again, waits, and records and answers the outcome. run is its
// loop; the execution's state lives here and nowhere else.
//
// The loop stops while it waits for what it does not hold (the
// upstream's answer, a backoff, room in the account) and goes on from
// where it stopped on the goroutine that ends the wait. So a first call
// is sent on the caller's goroutine and answered on the one that reads
// the upstream, with no goroutine of its own, as a blocking send would
// need; only the waits between attempts and for a full account take one.
// At any moment one goroutine at most runs the loop.
//
// An execution holds one count of Interceptor.work from its start, which
// end, the last step of every execution, releases.
type execution struct {
	in  *Interceptor
	req *Request
	// rec is the record as the call found it; nil for an unrecorded call
	// (Unrecorded), which nothing records.
	rec  *record.Record
	m    marking // how the outcome's answer is marked
	step step
	// ranBefore is set once an attempt before the next may have run: a
	// re-dispatch of an unknown execution, or an attempt sent again
	// after an answer that does not prove it did nothing. The execution
	// can then not end failed (DESIGN 4: known not to have run).
	ranBefore bool
	// turns hands the loop on past a send: the goroutine that made the
	// send and the answer each add one, and the second of them runs the
	// loop on, whichever it is. Reset before each send.
	turns atomic.Int32
	n     int // attempts sent
	// notes says why attempts are sent or not, once it has something to
	// say (attemptNotes): a new execution's first attempt has not, and
	// the Request, a proxy's call with it, keeps to a smaller size class.
	notes *attemptNotes
	// result and err are the last attempt's answer.
	result json.RawMessage
	err    error
	// sent is when the last attempt was sent, if an Observer times it,
	// since the Interceptor's epoch: a Duration, not a Time, to keep
	// the Request within its size class (see acct). From a decision to
	// send again to that send, it holds the backoff instead, which the
	// Observer is told of only if the send goes: one field, not two,
	// for the same reason.
	sent time.Duration
}

// attemptNotes is what an execution says of its attempts.
type attemptNotes struct {
	// why is why the next attempt is sent: for the first, why it is
	// dispatched ("" for a new execution); for a later one, resend.why.
	why string
	// stopped is why the last answer was not sent again though the rule
	// would have (a deadline, the retry budget, the account, the
	// session's end); "" if the rule itself ended the attempts.
	stopped string
}

// why and stopped return what e.notes says, "" when it is nil.
func (e *execution) why() string {
	if e.notes == nil {
		return ""
	}
	return e.notes.why
}

func (e *execution) stopped() string {
	if e.notes == nil {
		return ""
	}
	return e.notes.stopped
}

// notesPart returns e.notes, made if it is nil.
func (e *execution) notesPart() *attemptNotes {
	if e.notes == nil {
		e.notes = new(attemptNotes)
	}
	return e.notes
}

// A step is where an execution's loop is.
type step uint8

const (
	admitting step = iota // taking room in the account for the next attempt
	claiming              // recording the next attempt before it goes
	sending               // sending it
	deciding              // its answer is in: settle, or send again
	resuming              // a backoff ended: go on to admitting, if still wanted
)

// execute runs rec, a won reservation or a re-dispatch of an unknown
// execution under the same id (note says why), as an execution of its
// own: it runs on from here detached from the caller that started it, so
// a dispatched side effect is never dropped because its caller left.
func (in *Interceptor) execute(rec *record.Record, req *Request, note string) {
	e := in.newExecution(req, rec)
	// why becomes note, empty or not; notes are made only to hold one.
	if note != "" || e.notes != nil {
		e.notesPart().why = note
	}
	if in.storeWaits && (rec.State == record.Accepted || rec.State == record.Authorized) {
		in.unsent.add(rec) // until its dispatch, or its end (ownExecution)
	}
	if rec.State == record.Unknown {
		e.m = resumed
		// Its first send may have run, unless the status tool said it
		// did not (on_unknown recover).
		e.ranBefore = req.joinedHow != joinedRecover
	}
	e.run()
}

// executeDispatched runs rec, which the store reserved and recorded as
// dispatched in one step, from its send.
func (in *Interceptor) executeDispatched(rec *record.Record, req *Request) {
	// The store dispatches at once only when there is no account.
	e := in.newExecution(req, rec)
	e.claimed(rec, &dispatchedWithReservation)
	if e.send() {
		e.run() // the answer came during the send
	}
}

// dispatchedWithReservation is the change executeDispatched's store made
// with the reservation, as claimed reads it: shared, and never written,
// where one on the stack is 200 bytes zeroed on every call.
var dispatchedWithReservation = record.Change{To: record.Dispatched}

// ctx returns the caller's context: its end stops the waits (stop).
func (e *execution) ctx() context.Context { return e.req.caller.Context }

// newExecution returns the execution of req, taking its count of
// in.work. rec is nil for an unrecorded call.
func (in *Interceptor) newExecution(req *Request, rec *record.Record) *execution {
	in.work.Start()
	e := &req.exec
	e.in, e.req, e.rec = in, req, rec
	if in.shadow && rec != nil {
		in.shadowRuns.Store(rec.ID, req)
	}
	return e
}

// acct returns the account the execution's sends take from, or nil.
// Looked up, not kept: the execution shares its Request's allocation,
// which the proxy makes for every call, and a few bytes more put that
// in a larger size class.
func (e *execution) acct() *account { return e.in.accountOf(e.req) }

// attempt numbers the next attempt as the record counts them: a
// re-dispatch of an unknown execution goes on from the attempts the
// record held, where e.n counts this run's sends alone.
func (e *execution) attempt() int {
	if e.m == resumed {
		return e.rec.Attempts + e.n + 1
	}
	return e.n + 1
}

// tool names the tool the execution calls.
func (e *execution) tool() string {
	if e.rec != nil {
		return e.rec.Tool
	}
	return e.req.Call.Name
}

// observed is the execution's tool as its Observer is told of it.
func (e *execution) observed() Tool { return Tool{Name: e.tool(), Listed: e.req.Listed} }

// run runs the execution's steps until it waits for something or ends.
// Whatever ends a wait calls run again.
func (e *execution) run() {
	for {
		var more bool
		switch e.step {
		case admitting:
			more = e.admit()
		case claiming:
			more = e.claim()
		case sending:
			more = e.send()
		case deciding:
			more = e.decide()
		case resuming:
			more = e.resume()
		}
		if !more {
			return
		}
	}
}

// end is the last step of every execution: it answers the caller, with
// answer if one is given, else with the last attempt's answer, recorded
// (finish); and it releases the execution's count of work.
func (e *execution) end(answer func()) {
	defer e.in.work.Done()
	if e.in.shadow && e.rec != nil {
		defer e.in.shadowRuns.CompareAndDelete(e.rec.ID, e.req)
	}
	if e.rec != nil && e.in.storeWaits {
		defer e.in.sent.drop(e.rec.Key, e.rec.ID)
		defer e.in.unsent.drop(e.rec.Key, e.rec.ID)
	}
	switch {
	case answer != nil:
		answer()
	case e.rec == nil:
		e.in.answerUnrecorded(e.ctx(), e.req, e.result, e.err)
	default:
		e.recordOutcome()
	}
}

// finish ends the execution with the last attempt's answer.
func (e *execution) finish() { e.end(nil) }

// stop returns why a wait of the execution is given up, or nil. A
// recorded execution is the record's, not its caller's (other callers
// may attach to it), so only its session's end stops it, since nothing
// will be sent after that. An unrecorded call is its caller's alone.
func (e *execution) stop() error {
	err := e.ctx().Err()
	if e.rec == nil || errors.Is(err, ErrSessionEnded) {
		return err
	}
	return nil
}

// admit takes room in the account for the next attempt: at once when it
// has room (and, with a cap, a free slot); else the execution waits for
// room, never holding a goroutine for longer than a store's answer
// takes, up to the call's deadline.
//
// The slot comes first: room taken from the allowance is spent, and a
// call that then found the cap full until its deadline would have spent
// it on a send that never went, leaving the account's next send to wait
// for room no send used.
func (e *execution) admit() bool {
	a := e.acct()
	e.step = claiming
	if a == nil {
		return true
	}
	if err := e.stop(); err != nil {
		return e.refuse(refusal{Gone: err}) // before taking room no one will use
	}
	if a.slots != nil {
		select {
		case a.slots <- struct{}{}:
		default:
			go e.waitSlot()
			return false
		}
	}
	return e.takeRoom()
}

// takeRoom takes room in the allowance for the next attempt, which holds
// a slot of the account's cap if it has one. Without room, the slot goes
// back while the execution waits: the calls the cap lets through may
// send in the meantime.
func (e *execution) takeRoom() bool {
	a := e.acct()
	now := e.in.now()
	ok, wait, err := a.take(e.ctx(), now)
	if ok && err == nil {
		return true
	}
	a.release()
	if err != nil {
		return e.refuse(refusal{Err: err})
	}
	// As in retry.Backoff.Next, a wait that ends at the deadline
	// leaves the call no time, and is not begun either.
	if d := e.in.deadlineOf(e.req); !d.IsZero() && !now.Add(wait).Before(d) {
		return e.refuse(refusal{Wait: wait})
	}
	e.step = admitting
	e.in.traceEvent(e.req, "account wait", wait, attribute.String("mcp_idempotent.account", a.name))
	e.pause(wait, func(err error) { e.refuse(refusal{Gone: err}) })
	return false
}

// waitSlot waits, on its own goroutine, for a slot of the account's
// concurrency cap, up to the call's deadline, and runs the loop on.
func (e *execution) waitSlot() {
	var expired <-chan time.Time
	if d := e.in.deadlineOf(e.req); !d.IsZero() {
		t := time.NewTimer(d.Sub(e.in.now()))
		defer t.Stop()
		expired = t.C
	}
	done := e.ctx().Done()
	for {
		select {
		case e.acct().slots <- struct{}{}:
			if e.takeRoom() {
				e.run()
			}
			return
		case <-expired:
			e.refuse(refusal{Full: true})
			return
		case <-done:
			if err := e.stop(); err != nil {
				e.refuse(refusal{Gone: err})
				return
			}
			done = nil // not a reason to give up: wait on
		}
	}
}

// pause waits d on a goroutine of its own and runs the loop on; or, if
// the wait is given up first (stop), calls gone with why.
func (e *execution) pause(d time.Duration, gone func(error)) {
	go func() {
		t := time.NewTimer(d)
		defer t.Stop()
		done := e.ctx().Done()
		for {
			select {
			case <-t.C:
				e.run()
				return
			case <-done:
				if err := e.stop(); err != nil {
					gone(err)
					return
				}
				done = nil // not a reason to give up: wait on
			}
		}
	}()
}

// refuse ends an execution the account did not let send: with the last
// answer after the first attempt, else with why nothing was sent.
func (e *execution) refuse(r refusal) bool {
	a := e.acct()
	if r.Err != nil && (e.rec == nil || e.n == 0) {
		if e.rec == nil {
			e.in.log.Error("the account's allowance could not be read; not sending", "tool", e.tool(), "account", a.name, "err", r.Err)
		} else {
			e.in.log.Error("the account's allowance could not be read; not sending", "execution", e.rec.ID, "account", a.name, "err", r.Err)
		}
	}
	switch {
	case e.n > 0:
		e.notAgain(r.message(a.name))
	case e.rec == nil:
		e.end(func() { e.unrecordedNotSent(r.message(a.name), r.Gone) })
	default:
		e.end(func() { e.notSent(r.message(a.name)) })
	}
	return false
}

// claim records the next attempt in the store before its bytes go: the
// first as the execution's dispatch, a later one as another attempt. An
// unrecorded call has nothing to record, but is not sent once its caller
// has gone.
func (e *execution) claim() bool {
	switch {
	case e.rec == nil:
		if err := e.ctx().Err(); err != nil {
			// It ended as a slot came free.
			e.acct().release()
			if e.n > 0 {
				e.notAgain(goneWords(err))
			} else {
				e.end(func() { e.unrecordedNotSent(goneWords(err), err) })
			}
			return false
		}
		e.step = sending
		return true
	case e.n > 0:
		// The same execution, sent again: recorded as another attempt
		// before the bytes go, and only while this process still holds
		// it (DESIGN 8): one whose lease lapsed during the backoff may
		// find it taken over and sent by another.
		again := record.Change{To: record.Dispatched, From: record.Dispatched, Holder: e.in.owner,
			Note: fmt.Sprintf("attempt %d: %s", e.attempt(), e.why())}
		cur, err := e.in.store.Update(e.req.bg(), e.rec.ID, again)
		if err != nil {
			e.acct().release()
			e.in.log.Error("recording another attempt; not sending", "execution", e.rec.ID, "err", err)
			e.finish()
			return false
		}
		e.in.obs.Transition(e.observed(), record.Dispatched)
		e.in.journalize(e.req, cur, &again)
		e.step = sending
		return true
	}
	// Persist before send: once bytes may have left, the record says so.
	claim := record.Change{To: record.Dispatched, Note: e.why()}
	switch e.rec.State {
	case record.Unknown:
		// A claim: of two callers re-dispatching it, one wins, and one
		// that decided from a copy read before another's re-dispatch
		// (it waited for its account, or for a status tool) finds it
		// sent since: an unknown execution is sent again once.
		claim.From, claim.Attempts = record.Unknown, e.rec.Attempts
		claim.Owner, claim.LeaseUntil, claim.Lease = e.in.owner, e.in.now().Add(e.in.lease), e.in.lease
	case record.Authorized:
		// Of two callers that both found it approved (two answers to
		// one question), one sends it; the other attaches.
		claim.From = record.Authorized
	}
	claimed, err := e.in.store.Update(e.req.bg(), e.rec.ID, claim)
	if err != nil {
		e.acct().release()
		e.end(func() { e.notDispatched(err) })
		return false
	}
	e.claimed(claimed, &claim)
	return true
}

// claimed marks the execution dispatched, as the store recorded it
// (claimed, by the change claim), and moves on to its send.
func (e *execution) claimed(claimed *record.Record, claim *record.Change) {
	if e.in.debug {
		// Guarded like settle's: the arguments cost allocations even
		// when debug is off.
		e.in.log.Debug("transition", "execution", e.rec.ID, "state", record.Dispatched, "note", claim.Note)
	}
	e.in.obs.Transition(e.observed(), record.Dispatched)
	e.in.traceRecord(e.req, claimed)
	e.in.journalize(e.req, claimed, claim)
	if e.in.storeWaits {
		// Only a store outside this process can lose a record while it
		// runs (lostSent).
		e.in.sent.add(claimed)
		e.in.unsent.drop(claimed.Key, claimed.ID)
	}
	e.step = sending
}

// send sends the next attempt. It reports whether the loop goes on at
// once, which it does on this goroutine only if the answer came before
// Upstream.Send returned; else it goes on on the goroutine that brings
// the answer (Answered).
func (e *execution) send() bool {
	req := e.req
	params, meta := req.Call.Params, req.Call.MetaAsSent()
	if e.rec != nil && !req.Policy.ForwardKey {
		// The member is the proxy's. A client's string in it would reach
		// the upstream as an execution id, and over HTTP as the
		// Idempotency-Key, on which two different calls may be deduped.
		params, meta = jsonrpc.WithoutMetaMember(params, meta, mcp.MetaExecutionID)
	}
	if e.n > 0 {
		// Sent again without the progress token: the client has had the
		// first attempt's progress, and MCP asks progress to increase,
		// which a second attempt's would not.
		params, meta = jsonrpc.WithoutMetaMember(params, meta, mcp.MetaProgressToken)
	}
	ctx, done := req.bg(), Answered(e)
	if e.rec == nil {
		// A caller that leaves takes its call back from the upstream:
		// nothing is recorded, and no one else waits on it.
		ctx = e.ctx()
	}
	var buf [96]byte
	members := buf[:0]
	if e.rec != nil && req.Policy.ForwardKey {
		// The execution id goes upstream, so a server that honours
		// idempotency keys can dedupe a re-dispatch itself.
		members = append(append(append(members, `"`+mcp.MetaExecutionID+`":"`...), e.rec.ID...), '"')
	}
	if e.in.tracer != nil {
		var carrier telemetry.Carrier
		ctx, carrier, done = e.traceSend(ctx, done)
		if traced := carrier.MetaMembers(); len(traced) > 0 {
			params, meta = carrier.WithoutStaleState(params, meta)
			if len(members) > 0 {
				members = append(members, ',')
			}
			members = append(members, traced...)
		}
	}
	var pooled *[]byte
	if len(members) > 0 {
		params, pooled = paramsWithMeta(req.Upstream, params, meta, members)
	}
	if e.n > 0 {
		// Counted as it goes, not when decided: a session that ends
		// during the backoff, or an account with no room after it,
		// stops a retry that would otherwise count as made.
		e.in.obs.Attempt(e.observed(), e.n+1, e.why(), e.sent)
	}
	if e.in.timed && e.rec != nil {
		e.sent = e.in.now().Sub(e.in.epoch)
	}
	e.n++
	e.step = deciding
	e.turns.Store(0)
	req.Upstream.Send(ctx, "tools/call", params, done)
	if pooled != nil {
		// The upstream has copied them (CopyingUpstream).
		if cap(params) <= maxKeptParams {
			*pooled = params[:0]
		}
		paramBufs.Put(pooled)
	}
	return e.turns.Add(1) == 2
}

// paramsWithMeta returns params with members added to their _meta, meta as
// the call found it. For an upstream that keeps nothing of them once
// Send returns (CopyingUpstream), they are built in a pooled buffer,
// returned too, for the caller to put back then; else in one of their
// own, and the buffer is nil.
func paramsWithMeta(u Upstream, params, meta json.RawMessage, members []byte) (json.RawMessage, *[]byte) {
	// mcp.ParseToolCall found the params' _meta (and their name: they
	// are not empty), so they need not be read again.
	if cu, ok := u.(CopyingUpstream); ok && cu.CopiesParams() {
		pooled := paramBufs.Get().(*[]byte)
		return jsonrpc.AppendInsertMeta((*pooled)[:0], params, meta, false, members), pooled
	}
	return jsonrpc.InsertMeta(params, meta, false, members), nil
}

// paramBufs holds *[]byte buffers for paramsWithMeta.
var paramBufs = sync.Pool{New: func() any { return new([]byte) }}

// maxKeptParams bounds the buffers paramBufs keeps: one call with large
// arguments does not pin its buffer.
const maxKeptParams = 16 << 10

// Answered implements Answered: it takes an attempt's answer, and runs
// the loop on if the send has returned. It is called on a goroutine of
// the transport's, most often the one that reads the upstream, which a
// store that waits on I/O must not hold (Upstream.Send): the
// upstream's other answers would wait for each outcome's write, and the
// calls in flight would settle one at a time. The loop then goes on on a
// goroutine of its own.
func (e *execution) Answered(result json.RawMessage, err error) {
	e.result, e.err = result, err
	if e.turns.Add(1) != 2 {
		return
	}
	if e.in.storeWaits {
		e.in.workers.Go(e.run)
		return
	}
	e.run()
}

// decide settles the execution from an attempt's answer or, where the
// tool's retry rule says the answer is transient and sending again is
// safe, waits a backoff and sends it again.
func (e *execution) decide() bool {
	in, a := e.in, e.acct()
	a.release()
	if in.timed && e.rec != nil && !notSent(e.err) {
		// A send that never left had no answer to time.
		in.obs.Upstream(e.observed(), in.now().Sub(in.epoch)-e.sent)
	}
	if e.req.Policy.Retry == nil {
		e.finish() // no rule, no second attempt (again)
		return false
	}
	r := in.again(e.req, e.n, e.result, e.err)
	if r.ok && a != nil && !a.budget.AllowRetry() {
		if e.rec == nil {
			in.log.Warn("retry budget exhausted; answering with the last result", "tool", e.tool(), "account", a.name, "request", e.req.Correlation)
		} else {
			in.log.Warn("retry budget exhausted; answering with the last result", "execution", e.rec.ID, "account", a.name)
		}
		r = resend{stop: fmt.Sprintf("the retry budget of account %s is exhausted, so this result was not retried", a.name)}
	}
	if !r.ok || e.rec == nil && e.ctx().Err() != nil {
		if r.stop != "" {
			e.notesPart().stopped = r.stop
			e.result, e.err = withNote(e.result, e.err, r.stop)
		}
		e.finish()
		return false
	}
	if e.rec == nil {
		in.log.Info("sending again", "tool", e.tool(), "attempt", e.n+1, "after", r.wait, "why", r.why, "request", e.req.Correlation)
	} else {
		in.log.Info("sending again", "execution", e.rec.ID, "tool", e.tool(), "attempt", e.attempt(), "after", r.wait, "why", r.why)
	}
	in.traceEvent(e.req, "backoff", r.wait, attribute.String("mcp_idempotent.why", r.why))
	e.notesPart().why = r.why
	e.sent = r.wait // for the Observer, when the attempt goes (send)
	if e.rec != nil && mayHaveRun(e.result, e.err, e.req.Policy.Retry) {
		e.ranBefore = true
	}
	e.step = resuming
	e.pause(r.wait, func(gone error) {
		if e.rec == nil {
			// The caller left, or the session ended: the last answer,
			// for a caller that may still read it.
			e.result, e.err = withNote(e.result, e.err, "not retried: "+goneWords(gone))
			e.finish()
			return
		}
		e.notAgain("the session ended during the backoff")
	})
	return false
}

// resume goes on to the next attempt after a backoff, unless the caller
// of an unrecorded call has left (or its session ended) as the backoff
// ended: the call is then not worth another send, nor the account's room.
func (e *execution) resume() bool {
	if err := e.ctx().Err(); e.rec == nil && err != nil {
		e.notAgain(goneWords(err))
		return false
	}
	e.step = admitting
	return true
}

// notAgain ends an execution whose next attempt does not go, for why:
// the caller gets the last answer, with why.
func (e *execution) notAgain(why string) {
	if e.rec == nil {
		e.in.log.Info("not sending again", "tool", e.tool(), "attempt", e.n+1, "why", why, "request", e.req.Correlation)
	} else {
		e.in.log.Info("not sending again", "execution", e.rec.ID, "tool", e.tool(), "attempt", e.attempt(), "why", why)
	}
	e.notesPart().stopped = "not retried: " + why
	e.result, e.err = withNote(e.result, e.err, e.stopped())
	e.finish()
}

// notSent answers the caller of a recorded execution whose first attempt
// the account did not let go, for why.
func (e *execution) notSent(why string) {
	rec, req := e.rec, e.req
	if rec.State == record.Unknown {
		// A re-dispatch not sent: the first send may still have run.
		result, _ := withNote(unknownResult(rec), nil, "not sent again: "+why)
		req.got = gotUnknown
		e.in.reply(e.ctx(), req, Answer{Result: result}, nil)
		return
	}
	e.in.abandon(req, rec.ID, record.Change{To: record.Failed, Note: why})
	again := "calling again later runs it"
	if req.Policy.NeedsApproval() && !e.in.shadow {
		// The approval went with the failed execution: a call again is
		// a new one, asked about, as answer.go tells an attached caller.
		again += " once approved"
	}
	e.in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInternalError,
		"mcp-idempotent: %s: %s was not sent (nothing ran; %s)", why, rec.Tool, again))
}

// notDispatched answers the caller of an execution whose dispatch the
// store did not record: err says why.
func (e *execution) notDispatched(err error) {
	in, rec, req := e.in, e.rec, e.req
	if errors.Is(err, record.ErrConflict) {
		// Another caller re-dispatched it first, or another process
		// settled it meanwhile (this one's lease lapsed while it
		// waited for its account, and the record was taken over as
		// never sent): the caller gets what the record comes to.
		in.goAttach(e.ctx(), rec, req)
		return
	}
	in.log.Error("recording dispatch; not sending", "execution", rec.ID, "err", err)
	why := "the store refused the dispatch: " + err.Error()
	if rec.State == record.Unknown {
		// A re-dispatch: nothing was sent this time, but the first send
		// may have run. If the claim was made all the same, it goes
		// back to unknown, never to failed, which would run it anew.
		in.abandon(req, rec.ID, record.Change{To: record.Unknown, From: record.Dispatched, Note: "not sent again: " + why})
		result, _ := withNote(unknownResult(rec), nil, "not sent again: "+why)
		req.got = gotUnknown
		in.reply(e.ctx(), req, Answer{Result: result}, nil)
		return
	}
	if settled := in.abandon(req, rec.ID, record.Change{To: record.Failed, Note: why}); settled != nil {
		in.answer(e.ctx(), req, settled, live)
		return
	}
	in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInternalError,
		"mcp-idempotent: the record store is unavailable, so %s was not executed: %v", rec.Tool, err))
}
