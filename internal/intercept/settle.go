package intercept

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

// recordLater keeps trying to record c, the outcome of execution sent
// that the store refused, on a goroutine of its own, waiting longer each
// time (up to recordRetryMax), until the store takes it or has another
// answer for the record (a conflict: it was settled otherwise). Callers
// attached to the execution are then woken with it, and calls after it
// replay it. A store that lost the execution gets it again, with its
// outcome (restore). The outcome is kept before recordLater returns, so a
// retry its caller makes at once finds it (reserve).
func (in *Interceptor) recordLater(req *Request, sent *record.Record, c record.Change) {
	k := in.own.keep(req, sent, c)
	in.work.Start()
	go in.retryKept(k)
}

// retryKept is recordLater's goroutine.
func (in *Interceptor) retryKept(k *keptOutcome) {
	defer in.work.Done()
	defer k.finish()
	defer in.own.forget(k.sent.ID, k)
	wait := recordRetryMin
	for {
		select {
		case <-time.After(wait):
		case <-k.nudge:
		}
		if in.tryKept(k) {
			return
		}
		wait = min(2*wait, recordRetryMax)
	}
}

// landed returns execution id's record if it holds c, as this process's
// settle: a write whose answer was lost may have been taken. Nil if it
// does not, or cannot be read.
func (in *Interceptor) landed(ctx context.Context, id string, c record.Change) *record.Record {
	rec, err := in.store.Get(ctx, id)
	if err != nil || rec.Owner != c.Holder || !bytes.Equal(rec.Result, c.Result) || !bytes.Equal(rec.Error, c.Error) {
		return nil
	}
	for _, t := range rec.History {
		if t.State == c.To && t.Note == c.Note {
			return rec
		}
	}
	return nil
}

// The waits of recordLater.
const (
	recordRetryMin = 100 * time.Millisecond
	recordRetryMax = 5 * time.Second
)

// settle applies c, made by req's call, and returns the settled record, or
// nil if the store refused.
func (in *Interceptor) settle(ctx context.Context, req *Request, id string, c record.Change) *record.Record {
	rec, err := in.change(ctx, req, id, c)
	if err != nil {
		in.log.Error("recording a transition", "execution", id, "state", c.To, "err", err)
		return nil
	}
	return rec
}

// change applies c, made by req's call, to execution id in the store,
// counts and journals it, and returns the record it made. Until its
// journal line is written, the "delivered" lines of the callers the
// store wakes with it wait (journalGates).
func (in *Interceptor) change(ctx context.Context, req *Request, id string, c record.Change) (*record.Record, error) {
	if in.journal != nil && c.To != record.Delivered {
		defer in.settling.hold(id)()
	}
	rec, err := in.store.Update(ctx, id, c)
	if err != nil {
		return nil, err
	}
	in.obs.Transition(Tool{Name: rec.Tool, Listed: req.Listed}, c.To)
	in.traceRecord(req, rec)
	in.journalize(req, rec, &c)
	if in.debug {
		in.log.Debug("transition", "execution", id, "state", c.To, "note", c.Note)
	}
	return rec, nil
}

// recordOutcome settles a recorded execution from its last answer and
// answers its caller.
func (e *execution) recordOutcome() {
	in, ctx, rec, req := e.in, e.ctx(), e.rec, e.req
	var c record.Change
	e.outcomeChange(&c)
	// Fenced to this process (DESIGN 8): if its lease lapsed and another
	// took the execution over, the store refuses this outcome.
	c.Holder = in.owner
	settled, err := in.change(req.bg(), req, rec.ID, c)
	if err == nil {
		e.outcomeStored()
		in.answer(ctx, req, settled, e.m)
		return
	}
	if errors.Is(err, record.ErrConflict) {
		own, oerr := in.settleOverOwn(req.bg(), req, rec.ID, c)
		switch {
		case own != nil:
			// A call of this process's own had taken it for gone.
			e.outcomeStored()
			in.answer(ctx, req, own, e.m)
			return
		case oerr == nil || errors.Is(oerr, record.ErrConflict):
			// Settled otherwise while this send ran: this process's
			// lease lapsed and another took the execution over. The
			// caller gets what the record says, as any caller now would.
			in.log.Warn("the store holds another outcome for this execution, and refused this one; answering from the store's",
				"execution", rec.ID, "refused", c.To, "err", err)
			in.journalizeFenced(req, rec, &c)
			in.answerFromRecord(ctx, req, rec.ID)
			return
		}
		// Taken for gone by this process's own call, and the store did
		// not answer the write over it: kept, as any outcome the store
		// did not take (the takeover stays noted for recordLater).
		err = oerr
	}
	if errors.Is(err, record.ErrNotFound) {
		// The store answered, and no longer holds the execution: it lost
		// its data (a Redis restarted without persistence).
		in.outcomeOfLost(ctx, e, c)
		return
	}
	in.log.Error("recording a transition", "execution", rec.ID, "state", c.To, "err", err)
	// The outcome is known, and the execution must not stay in flight
	// (its lease renewed by this process) while callers wait on it.
	in.recordLater(req, rec, c)
	req.got = gotNoOutcome
	in.replyError(req, notRecordedYet(rec))
}

// outcomeChange sets c to the change that settles the execution from its
// last answer: what the answer says, read with the tool's policy and
// with what the attempts before it may have done. c is the caller's, not
// returned: a Change is 200 bytes, copied on every return.
func (e *execution) outcomeChange(c *record.Change) {
	in, rec, req, result, err := e.in, e.rec, e.req, e.result, e.err
	outcome(c, result, err)
	if c.To == record.Failed {
		// Looked into for a failure only: a completion pays no error
		// unwrapping.
		if f, _ := failure(err); retry.StatusMayHaveRun(f.HTTPStatus) {
			// The status may have come after the tool ran (a gateway gave
			// up waiting, the server failed mid-call): nobody saw the
			// outcome.
			*c = record.Change{To: record.Unknown, Note: fmt.Sprintf("no answer from the upstream: HTTP %d", f.HTTPStatus)}
		}
	}
	if malformed(result, err) {
		// A bug upstream, not a passing failure: said loudly.
		in.log.Error("the upstream sent a malformed answer", "execution", rec.ID, "tool", rec.Tool, "err", c.Note)
	}
	if resent := e.ranBefore || e.m == resumed; resent && err == nil && c.To == record.Completed {
		if _, ok := firstMatch(result, req.Policy.AlreadyDone); ok {
			// A re-send found the effect in place (a delete of something
			// gone): a send before it did it, so the execution is done.
			// Not after sends that did nothing (not sent, a 429): this
			// one was the first that could.
			in.log.Info("a re-send found the effect already done; completing as a success", "execution", rec.ID, "tool", rec.Tool)
			c.Result = alreadyDoneResult(rec, result)
			c.Note = "already done: the re-send found the effect in place"
		}
	}
	rerunSafe := false
	if err == nil && req.Policy.Retry != nil && c.To == record.Completed && c.Note == "" {
		if match, ok := transient(result, req.Policy.Retry); ok && safeToResend(req.Policy, match) {
			// Still transient after the last attempt: the effect did not
			// happen, so it is not replayed (Stripe does not cache a 429
			// either); the caller sees this last result.
			*c = record.Change{To: record.Failed, Result: result, Note: "still transient after the last attempt"}
			if e.stopped() != "" {
				// Attempts were left: the record says what ended them.
				c.Note = "still transient: " + e.stopped()
			}
			// A read-only or idempotent tool may run again whatever
			// its earlier attempts did: the upstream answered, so this
			// is no unknown outcome.
			rerunSafe = retry.SafeToResend(retry.Safety{ToolClass: string(req.Policy.Class), Sent: true})
		}
	}
	if c.To == record.Failed && e.ranBefore && !rerunSafe {
		// This attempt did not run, or was refused, but one before it
		// may have run: failed would let the next identical call run
		// the action again, under a new execution id.
		*c = record.Change{To: record.Unknown, Note: "an earlier attempt may have run; the last: " + c.Note}
	}
	if c.To == record.Unknown && e.stopped() != "" && !strings.HasSuffix(c.Note, e.stopped()) {
		// The rule would have sent it again: the caller, told only the
		// note of an unknown outcome, learns what stopped that (the
		// retry budget, the deadline), as the last answer would say.
		c.Note += "; " + e.stopped()
	}
}

// outcomeStored notes that the store holds the execution's outcome: from
// now on, a store without its record purged it once its retention ran
// out, and an identical call runs again (lostSent looks no further).
func (e *execution) outcomeStored() { e.in.sent.drop(e.rec.Key, e.rec.ID) }
