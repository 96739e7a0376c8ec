package intercept

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// answerFromRecord answers req's caller with what the store holds for
// execution id: its stored outcome once settled, after waiting for it
// while it is in flight.
func (in *Interceptor) answerFromRecord(ctx context.Context, req *Request, id string) {
	cur, err := in.store.Get(req.bg(), id)
	switch {
	case err != nil:
		req.got = gotNoOutcome
		in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInternalError,
			"mcp-idempotent: execution %s ran, and its record could not be read: %v; calling again attaches to it", id, err))
	case cur.State.Settled():
		in.answer(ctx, req, cur, replayed)
	default:
		in.goAttach(ctx, cur, req)
	}
}

// goAttach runs attach on a goroutine of its own, counted in in.work: its
// caller's journal line, written after the answer, is in before Wait
// returns and the journal is closed.
func (in *Interceptor) goAttach(ctx context.Context, rec *record.Record, req *Request) {
	in.work.Start()
	go func() {
		defer in.work.Done()
		in.attach(ctx, rec, req)
	}()
}

// attach waits, on its own goroutine, for an execution under way that
// req's caller joined, then answers the caller.
func (in *Interceptor) attach(ctx context.Context, rec *record.Record, req *Request) {
	// The window counts from the caller's arrival, not from here: the
	// store may have taken a while to answer its reservation. For an
	// approved call (restartDeadline) it counts from the decision. The
	// caller's own deadline shortens it, as it shortens the first
	// caller's wait for an approval; the execution goes on.
	now := in.now()
	start := now
	if arrived := in.arrivalOf(req); !arrived.IsZero() {
		start = arrived
	}
	end := start.Add(req.Policy.AttachWindow)
	if c := in.clientDeadline(req); !c.IsZero() && c.Before(end) {
		end = c
	}
	window := max(end.Sub(start), 0)
	wctx, cancel := context.WithTimeout(ctx, max(end.Sub(now), 0))
	stopProgress := in.tellAttached(wctx, req, rec)
	settled, err := in.wait(wctx, rec.ID)
	stopProgress()
	cancel()
	if err == nil {
		settled = in.takenOver(req, settled)
	}
	switch {
	case errors.Is(ctx.Err(), ErrSessionEnded):
		// The caller did not leave: its session ended while the
		// execution went on elsewhere. It is told so, if its transport
		// still takes an answer; or, if the execution settled meanwhile
		// (the session's end may be what settled it), told how.
		cur, gerr := in.store.Get(req.bg(), rec.ID)
		if gerr != nil {
			cur = rec
		}
		if settled != nil && !cur.State.Settled() {
			cur = settled
		}
		if cur.State.Settled() {
			in.answer(ctx, req, cur, replayed)
			return
		}
		if in.toldNotRecorded(req, cur) {
			return
		}
		in.decided(req, rec.Tool, "in_progress")
		in.log.Info("the session ended; told the caller the execution is still in progress", "execution", rec.ID, "request", req.Correlation)
		req.got = gotInProgress
		in.reply(ctx, req, Answer{Result: inProgressResult(cur, in.now().Sub(cur.At(record.Accepted)).Round(time.Millisecond), holdsDelivery(req))}, nil)
	case ctx.Err() != nil:
		// The session has said so at info, for starters and attached callers alike.
		in.log.Debug("caller cancelled; detached, the execution goes on", "execution", rec.ID, "request", req.Correlation)
		req.got = gotInProgress
		in.journalizeAttach(req, ErrCallerLeft)
	case errors.Is(err, context.DeadlineExceeded):
		in.windowPassed(ctx, req, rec, window)
	case err != nil:
		in.log.Error("waiting for the execution", "execution", rec.ID, "err", err)
		req.got = gotNoOutcome
		in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInternalError,
			"mcp-idempotent: lost track of execution %s of %s: %v", rec.ID, rec.Tool, err))
	default:
		in.answerSettled(ctx, req, settled)
	}
}

// answerSettled answers req's caller, attached to an execution, with
// settled, the execution as it settled.
func (in *Interceptor) answerSettled(ctx context.Context, req *Request, settled *record.Record) {
	if settled.SettledAsOrphan() && settled.Owner != in.owner {
		// Its process went away before any caller was told: this
		// caller is the next to meet the unknown outcome, and the
		// tool's on_unknown decides, as for a call made after it. (An
		// orphan of this process's own is still under way here, and
		// its outcome is recorded over it: takenOver.)
		in.unknown(ctx, settled, req)
		return
	}
	in.answer(ctx, req, settled, replayed)
}

// windowPassed answers req's caller, whose attach window passed while
// it waited for rec: "still in progress", unless the execution settled
// between the end of the wait and the read of its record. The caller
// then gets its outcome: told "in progress" of a finished execution, it
// would call again for an answer it could have had, and under replay:
// undelivered that call runs the action again.
func (in *Interceptor) windowPassed(ctx context.Context, req *Request, rec *record.Record, window time.Duration) {
	cur, gerr := in.store.Get(ctx, rec.ID)
	if gerr != nil {
		cur = rec
	}
	if cur.State.Settled() {
		in.answerSettled(ctx, req, in.takenOver(req, cur))
		return
	}
	if in.toldNotRecorded(req, cur) {
		return
	}
	in.decided(req, rec.Tool, "in_progress")
	req.got = gotInProgress
	in.log.Info("attach window passed; told the caller it is still in progress",
		"execution", rec.ID, "window", window, "request", req.Correlation)
	in.reply(ctx, req, Answer{Result: inProgressResult(cur, window, holdsDelivery(req))}, nil)
}

// toldNotRecorded tells req's caller, whose wait for cur, not settled in
// the store, ended, what this process knows and the store does not yet,
// and reports whether it did: that cur ran, and its outcome, which this
// process holds (recordLater), could not be recorded yet; or that it was
// not executed, its dispatch refused (abandoned). "Still in progress"
// would be untrue. Its first caller was told the same, and a retry
// matched by this process in a store outage (attachOwn) gets it too.
func (in *Interceptor) toldNotRecorded(req *Request, cur *record.Record) bool {
	var e *jsonrpc.Error
	if in.own.keptFor(cur.ID) != nil {
		e = notRecordedYet(cur)
	} else if a, ok := in.abandoned.has(cur.ID); ok && a.c.To == record.Failed {
		again := "calling again runs it"
		if req.Policy.NeedsApproval() && !in.shadow {
			again += " once approved"
		}
		e = jsonrpc.Errorf(jsonrpc.CodeInternalError,
			"mcp-idempotent: execution %s of %s was not sent: %s (nothing ran; %s)", cur.ID, cur.Tool, a.c.Note, again)
	} else {
		return false
	}
	in.log.Info("the wait ended; told the caller what the store has not recorded yet", "execution", cur.ID, "request", req.Correlation)
	req.got = gotNoOutcome
	in.replyError(req, e)
	return true
}

// tellAttached tells req's caller, if it asked for progress, that it is
// attached to rec, at once and then every approvalProgress until ctx ends
// or stop is called. A retry is most often a client's after a timeout:
// one that resets its timeout on progress then waits for the execution,
// rather than timing out and retrying again. The upstream's progress goes
// to the first caller's token alone.
func (in *Interceptor) tellAttached(ctx context.Context, req *Request, rec *record.Record) (stop func()) {
	asker, ok := req.Reply.(Asker)
	if !ok {
		return func() {}
	}
	waiting := fmt.Sprintf("attached to execution %s of %s, which an identical call started: waiting for its outcome", rec.ID, rec.Tool)
	asker.Progress(waiting)
	return in.tellProgress(ctx, asker, waiting)
}

// wait waits for execution id to settle, until ctx ends. A failure of the
// store (a connection dropped, a server restarting) is not the waiter's
// answer: it waits on, trying the store again after a backoff, so that
// the caller gets the execution's answer, or is told it is still in
// progress, rather than an error that says neither. So does a store that
// lost the execution (a Redis restarted without persistence): the process
// that sent it writes it again with its outcome (restore), and a caller
// told to call again meanwhile would run the action a second time.
func (in *Interceptor) wait(ctx context.Context, id string) (*record.Record, error) {
	return in.waitOn(ctx, id, "waiting for an execution: the store failed; trying again", func(ctx context.Context, id string) (*record.Record, error) {
		rec, err := in.store.Wait(ctx, id)
		if errors.Is(err, record.ErrNotFound) {
			return nil, fmt.Errorf("the store no longer holds it, and its owner writes it again once it ends: %s", err)
		}
		return rec, err
	})
}

// waitOn is wait with wait, a store's wait for execution id; warning
// says what failed, for the log.
func (in *Interceptor) waitOn(ctx context.Context, id, warning string, wait func(context.Context, string) (*record.Record, error)) (*record.Record, error) {
	backoff := recordRetryMin
	for {
		rec, err := wait(ctx, id)
		if err == nil || ctx.Err() != nil || errors.Is(err, record.ErrNotFound) {
			return rec, err
		}
		in.log.Warn(warning, "execution", id, "in", backoff, "err", err)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
		backoff = min(2*backoff, recordRetryMax)
	}
}
