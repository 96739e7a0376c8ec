package intercept

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
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
// It runs as an execution (execution.go) with no record: the same loop of
// admission, send, decision and backoff, which only skips the store.
//
// A call without a retry rule needs none of this: it is passed upstream
// as it came, under its own id, by the session.
func (in *Interceptor) Unrecorded(ctx context.Context, req *Request) {
	req.unrecorded = true
	in.startDeadline(req, in.now())
	req.caller.Context = ctx
	e := in.newExecution(req, nil)
	if in.storeWaits {
		// An account's allowance may be in the shared store: its answer
		// is not waited for on the session's goroutine.
		in.workers.Go(e.run)
		return
	}
	e.run()
}

// unrecordedNotSent answers an unrecorded call whose first attempt did not
// go, for why, unless the caller left (gone, and not with the session),
// and no one is there to tell.
func (e *execution) unrecordedNotSent(why string, gone error) {
	switch {
	case errors.Is(gone, ErrSessionEnded):
		e.in.replyError(e.req, NotRunAtSessionEnd(e.tool()))
	case gone == nil:
		e.in.replyError(e.req, jsonrpc.Errorf(jsonrpc.CodeInternalError,
			"mcp-idempotent: %s: %s was not sent (nothing ran; calling again later runs it)", why, e.tool()))
	}
}

// answerUnrecorded gives the caller of an unrecorded call the upstream's
// answer: a result or a JSON-RPC error as they came, or, when none came,
// an error saying whether the call was sent.
func (in *Interceptor) answerUnrecorded(ctx context.Context, req *Request, result json.RawMessage, err error) {
	tool := req.Call.Name
	if malformed(result, err) {
		// A bug upstream, said loudly as for a recorded call
		// (outcomeChange); the caller still gets the answer as it came.
		var c record.Change
		outcome(&c, result, err)
		in.log.Error("the upstream sent a malformed answer", "tool", tool, "request", req.Correlation, "err", c.Note)
	}
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
