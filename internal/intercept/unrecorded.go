package intercept

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

// Unrecorded handles a call that is not recorded (a read-only tool, or a
// call without a client key to a tool matched by key only) but whose
// policy has a retry rule: every send takes from the rule's account, and
// an answer the rule calls transient is sent again as the rule says, where
// that is safe (DESIGN sections 6 and 7). Safe here is narrower than for a
// recorded call: no execution id goes upstream, so an upstream that dedupes
// on it (on_unknown: retry) cannot make a re-send of a side effect safe;
// only a read-only tool, or an answer that says nothing ran, can. Nothing
// is reserved, replayed or journaled: the caller gets the upstream's last
// answer as it came, or an error saying why the call was not sent.
//
// A call without a retry rule needs none of this: it is passed upstream
// as it came, under its own id, by the session.
func (in *Interceptor) Unrecorded(ctx context.Context, req *Request) {
	req.unrecorded = true
	req.deadline = deadline(in.now(), req.Policy.Retry, req.Call.Deadline)
	req.bg = context.WithoutCancel(ctx)
	in.work.Add(1) // released by the answer
	if in.storeWaits {
		// An account's allowance may be in the shared store: its answer
		// is not waited for on the session's goroutine.
		go in.sendUnrecorded(ctx, req, in.accountOf(req), 1, nil, nil)
		return
	}
	in.sendUnrecorded(ctx, req, in.accountOf(req), 1, nil, nil)
}

// sendUnrecorded sends attempt n of an unrecorded call once its account
// has room. lastResult and lastErr are the answer to attempt n-1, which
// the caller gets if attempt n cannot go.
func (in *Interceptor) sendUnrecorded(ctx context.Context, req *Request, a *account, n int, lastResult json.RawMessage, lastErr error) {
	tool := req.Call.Name
	// notSent answers for an attempt that does not go, for why: after the
	// first, with the last answer; else with why nothing was sent, unless
	// the caller left (gone, and not with the session), and no one is
	// there to tell.
	notSent := func(why string, gone error) {
		if n > 1 {
			in.log.Info("not sending again", "tool", tool, "attempt", n, "why", why, "request", req.Correlation)
			result, err := withNote(lastResult, lastErr, "not retried: "+why)
			in.answerUnrecorded(ctx, req, result, err)
			return
		}
		defer in.work.Done()
		switch {
		case errors.Is(gone, ErrSessionEnded):
			in.replyError(req, NotRunAtSessionEnd(tool))
		case gone == nil:
			in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInternalError,
				"mcp-idempotent: %s: %s was not sent (nothing ran; calling again later runs it)", why, tool))
		}
	}
	if err := ctx.Err(); n > 1 && err != nil {
		// The caller left (or its session ended) as the backoff ended:
		// the call is not worth another send, nor the account's room.
		notSent(goneWords(err), err)
		return
	}
	in.admit(ctx, a, req.deadline, ctx.Err, func() {
		if err := ctx.Err(); err != nil {
			// It ended as a slot came free.
			a.release()
			notSent(goneWords(err), err)
			return
		}
		params := req.Call.Params
		if n > 1 {
			params, _ = withoutProgressToken(params, req.Call.MetaAsSent)
		}
		// A caller that leaves takes its call back from the upstream:
		// nothing is recorded, and no one else waits on it.
		req.Upstream.Send(ctx, "tools/call", params, func(result json.RawMessage, err error) {
			a.release()
			r := in.again(req, n, result, err)
			if r.ok && a != nil && !a.budget.AllowRetry() {
				in.log.Warn("retry budget exhausted; answering with the last result", "tool", tool, "account", a.name, "request", req.Correlation)
				r = resend{stop: fmt.Sprintf("the retry budget of account %s is exhausted, so this result was not retried", a.name)}
			}
			if !r.ok || ctx.Err() != nil {
				if r.stop != "" {
					result, err = withNote(result, err, r.stop)
				}
				in.answerUnrecorded(ctx, req, result, err)
				return
			}
			in.log.Info("sending again", "tool", tool, "attempt", n+1, "after", r.wait, "why", r.why, "request", req.Correlation)
			in.obs.Attempt(tool, n+1, r.why, r.wait)
			in.wake(ctx, r.wait, ctx.Err, func() { in.sendUnrecorded(ctx, req, a, n+1, result, err) }, func(gone error) {
				// The caller left, or the session ended: the last answer,
				// for a caller that may still read it.
				result, err := withNote(result, err, "not retried: "+goneWords(gone))
				in.answerUnrecorded(ctx, req, result, err)
			})
		})
	}, func(ref refusal) {
		if ref.Err != nil {
			in.log.Error("the account's allowance could not be read; not sending", "tool", tool, "account", a.name, "err", ref.Err)
		}
		notSent(ref.message(a.name), ref.Gone)
	})
}

// answerUnrecorded gives the caller of an unrecorded call the upstream's
// answer: a result or a JSON-RPC error as they came, or, when none came,
// an error saying whether the call was sent.
func (in *Interceptor) answerUnrecorded(ctx context.Context, req *Request, result json.RawMessage, err error) {
	defer in.work.Done()
	tool := req.Call.Name
	switch rpcErr, isRPC := rpcError(err); {
	case err == nil:
		in.reply(ctx, req, Answer{Result: result}, nil)
	case retry.IsNotSent(err):
		in.reply(ctx, req, errorAnswer(jsonrpc.Errorf(jsonrpc.CodeInternalError,
			"mcp-idempotent: %s was not sent (nothing ran; calling again runs it): %v", tool, err)), nil)
	case isRPC:
		in.reply(ctx, req, errorAnswer(rpcErr), nil)
	default:
		in.reply(ctx, req, errorAnswer(jsonrpc.Errorf(jsonrpc.CodeInternalError,
			"mcp-idempotent: %s was sent, and no answer came: %v", tool, err)), nil)
	}
}

// errorAnswer is an Answer carrying e (as it came, if it came from the
// upstream).
func errorAnswer(e *jsonrpc.Error) Answer {
	return Answer{Error: e.Object()}
}
