package intercept

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// In the 2026-07-28 protocol a server asks the user within the call it
// answers (multi round-trip requests): the proxy answers the call with an
// input_required result that asks for the approval, and the client sends
// the call again with the user's answer and the requestState the proxy
// minted. That state names the execution and carries a keyed hash of it,
// so any proxy that shares the fingerprint secret can check it, and no
// client can make one up. It is the proxy's own: a continuation that
// carries it goes upstream without it, as the call it continues.

const (
	// approvalInput names the approval among an input_required result's
	// input requests, and the user's answer among the continuation's
	// input responses.
	approvalInput = "mcp-idempotent/approval"
	// stateTag starts every requestState the proxy mints.
	stateTag = "mcp-idempotent/approval:"
)

// askInRound answers req's caller with an input_required result that
// asks the user to approve rec, and refuses rec if no answer comes by the
// approval's deadline.
func (in *Interceptor) askInRound(ctx context.Context, req *Request, rec *record.Record) {
	result, err := in.inputRequired(req, rec)
	if err != nil {
		in.decide(ctx, req, rec, record.Change{To: record.Refused, From: record.Accepted, By: "mcp-idempotent", Via: record.ViaProxy,
			Note: "the approval request could not be made: " + err.Error()})
		return
	}
	in.log.Info("asking the client's user to approve an execution, in the call's answer", "execution", rec.ID, "tool", rec.Tool, "request", req.Correlation)
	deadline := in.approvalDeadline(req)
	timeout := req.Policy.ApprovalTimeout
	time.AfterFunc(deadline.Sub(in.now()), func() {
		// No continuation came in time: refused, unless decided first.
		c := record.Change{To: record.Refused, From: record.Accepted, Via: record.ViaTimeout,
			Note: fmt.Sprintf("no decision from the client's user within %s", timeout)}
		defer in.questions.forget(rec.ID)
		if _, err := in.change(req.bg, req, rec.ID, c); err != nil && !errors.Is(err, record.ErrConflict) {
			in.log.Error("refusing an approval that timed out", "execution", rec.ID, "err", err)
		}
	})
	in.putQuestion(ctx, req, rec.ID, result)
}

// putQuestion answers req's caller with result, the question of the
// approval of execution id, and notes once its transport has taken it:
// a call sent again after that is a duplicate of one whose user is being
// asked, and waits for that answer rather than ask again.
func (in *Interceptor) putQuestion(ctx context.Context, req *Request, id string, result json.RawMessage) {
	if err := ctx.Err(); err != nil && !errors.Is(err, ErrSessionEnded) {
		return // the caller left: it never sees the question
	}
	a := Answer{Result: result}
	if dr, ok := req.Reply.(DeliveryReplier); ok && dr.DeliversLater() {
		if err := dr.ReplyThen(a, func() { in.questions.taken(id) }); err != nil {
			in.log.Warn("writing the approval's question failed", "execution", id, "request", req.Correlation, "err", err)
		}
		return
	}
	if err := req.Reply.Reply(a); err != nil {
		in.log.Warn("writing the approval's question failed", "execution", id, "request", req.Correlation, "err", err)
		return
	}
	in.questions.taken(id)
}

// questions are the executions whose approval's question a caller's
// transport took, in this process, until they are decided.
type questions struct {
	mu sync.Mutex
	m  map[string]struct{}
}

func (q *questions) taken(id string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.m == nil {
		q.m = make(map[string]struct{})
	}
	q.m[id] = struct{}{}
}

// out reports whether the question of execution id was taken.
func (q *questions) out(id string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, ok := q.m[id]
	return ok
}

// forget drops execution id, decided.
func (q *questions) forget(id string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.m, id)
}

// inputRequired returns the input_required result that asks for the
// approval of rec.
func (in *Interceptor) inputRequired(req *Request, rec *record.Record) (json.RawMessage, error) {
	params, err := in.elicitation(req, rec)
	if err != nil {
		return nil, err
	}
	state, err := in.approvalState(req, rec.ID)
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]any{
		"resultType": "input_required",
		"inputRequests": map[string]any{
			approvalInput: map[string]any{"method": "elicitation/create", "params": json.RawMessage(params)},
		},
		"requestState": state,
		"_meta":        map[string]any{mcp.MetaExecution: describe(rec)},
	})
}

// approvalState mints the requestState of the approval of execution id:
// the id and a keyed hash that ties it to the caller's actor and
// upstream.
func (in *Interceptor) approvalState(req *Request, id string) (string, error) {
	mac, err := in.hasher.Sum(fingerprint.Action{Actor: req.Actor, Upstream: req.UpstreamID, Scope: "approval-state",
		Extra: map[string]json.RawMessage{"execution": json.RawMessage(`"` + id + `"`)}})
	if err != nil {
		return "", err
	}
	return stateTag + id + "." + mac, nil
}

// ownContinuation returns the execution whose approval req's call
// continues, if its requestState is one the proxy minted; ok is false
// for any other call. A state that claims to be the proxy's but does not
// check is an error.
func (in *Interceptor) ownContinuation(req *Request) (id string, ok bool, err error) {
	raw := req.Call.RequestState
	if raw == nil {
		return "", false, nil
	}
	s, isString := jsonrpc.StringValue(raw)
	if !isString || !strings.HasPrefix(s, stateTag) {
		return "", false, nil
	}
	id, _, _ = strings.Cut(strings.TrimPrefix(s, stateTag), ".")
	want, err := in.approvalState(req, id)
	if err != nil {
		return "", true, err
	}
	if subtle.ConstantTimeCompare([]byte(want), []byte(s)) != 1 {
		return "", true, errors.New("its requestState claims to be mcp-idempotent's approval, and was not minted for this caller by a proxy that shares this store's secret")
	}
	return id, true, nil
}

// continueApproval takes the user's answer to the approval of execution
// id from req's call, the continuation, and goes on as the decision
// says: the call is the execution's caller from here, and what goes
// upstream is the call it continues, without the proxy's round.
func (in *Interceptor) continueApproval(ctx context.Context, req *Request, id string) {
	call := req.Call
	answer := jsonrpc.Member(call.InputResponses, approvalInput)
	if answer == nil {
		in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInvalidParams,
			"tools/call %s: the call continues the approval of execution %s and has no inputResponses[%q]", call.Name, id, approvalInput))
		return
	}
	plain, perr := mcp.ParseToolCall(jsonrpc.WithoutMembers(call.Params, "inputResponses", "requestState"))
	if perr != nil {
		in.replyError(req, perr)
		return
	}
	req.Call = plain
	rec, err := in.store.Get(req.bg, id)
	if err != nil {
		in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInternalError,
			"mcp-idempotent: the approval of execution %s could not be read: %v; nothing was sent", id, err))
		return
	}
	if fp, err := in.actionOf(req); err != nil || fp != rec.Fingerprint {
		in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInvalidParams,
			"tools/call %s: the call continues the approval of execution %s of %s, but it is another call: send the arguments that were asked about", plain.Name, id, rec.Tool))
		return
	}
	switch {
	case rec.State == record.Accepted && rec.Awaiting == record.ApproverClient:
		c := in.clientDecision(req, answer, nil)
		// This process runs it from here, whichever asked.
		c.Owner, c.Lease = in.owner, in.lease
		in.decide(ctx, req, rec, c)
	case rec.State.Settled():
		// Decided before (the same continuation sent again): its outcome.
		req.joined, req.joinedHow = rec.ID, journal.JoinedReplay
		in.answer(ctx, req, rec, replayed)
	default:
		req.joined, req.joinedHow = rec.ID, journal.JoinedWaited
		go in.attach(ctx, rec, req)
	}
}

// askAgainInRound answers a call that maps to rec, which awaits its
// client's answer in a round whose question no caller's transport took
// here, with the same question: the caller that sent it again never saw
// the first (a lost answer, or another process asked), and the first
// answer that comes back decides.
func (in *Interceptor) askAgainInRound(ctx context.Context, req *Request, rec *record.Record) {
	result, err := in.inputRequired(req, rec)
	if err != nil {
		go in.attach(ctx, rec, req)
		return
	}
	in.putQuestion(ctx, req, rec.ID, result)
}

// actionOf returns the intent fingerprint of req's call, as handle
// computes it.
func (in *Interceptor) actionOf(req *Request) (string, error) {
	args, err := shapeArguments(req.Call.Arguments, req.Policy, req.SchemaDefaults)
	if err != nil {
		return "", err
	}
	actor, scope := matchScope(req)
	return in.hasher.Sum(fingerprint.Action{Actor: actor, Scope: scope, Upstream: req.UpstreamID, Tool: req.Call.Name,
		Arguments: args, Extra: extra(req.Call)})
}
