package intercept

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
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
	// Not the client's deadline: that bounds this round, and the answer
	// comes in another call.
	timeout := req.Policy.ApprovalTimeout
	in.questions.arm(rec.ID, time.AfterFunc(timeout, func() {
		// No continuation came in time: refused, unless decided first.
		defer in.questions.forget(rec.ID)
		c := record.Change{To: record.Refused, From: record.Accepted, Via: record.ViaTimeout,
			Note: fmt.Sprintf("no decision from the client's user within %s", timeout)}
		if _, err := in.change(req.bg(), req, rec.ID, c); err != nil && !errors.Is(err, record.ErrConflict) {
			in.log.Error("refusing an approval that timed out", "execution", rec.ID, "err", err)
		}
	}))
	in.putQuestion(ctx, req, rec.ID, result)
}

// putQuestion answers req's caller with result, the question of the
// approval of execution id, and notes once its transport has taken it:
// a call sent again after that is a duplicate of one whose user is being
// asked, and waits for that answer rather than ask again.
func (in *Interceptor) putQuestion(ctx context.Context, req *Request, id string, result json.RawMessage) {
	req.got = gotQuestion
	if err := ctx.Err(); err != nil && !errors.Is(err, ErrSessionEnded) {
		// The caller left: it never sees the question, and a caller that
		// joined has its line, as one that left while it waited has.
		in.journalizeAttach(req, ErrCallerLeft)
		return
	}
	a := Answer{Result: result}
	if dr, ok := req.Reply.(DeliveryReplier); ok && dr.DeliversLater() {
		// Over a transport that writes in order (stdio, whose held frames
		// are written before it tells), the client may read the question
		// and send the call again before written is told: noted before,
		// as for Reply below, and taken back if it was not written.
		early := false
		if o, ok := dr.(OrderedReplier); ok && o.WritesInOrder() {
			early = true
			in.questions.taken(id)
		}
		if err := dr.ReplyThen(a, func(err error) {
			switch {
			case err == nil:
				in.questions.taken(id)
			case early:
				in.questions.untaken(id)
			}
			if req.joined != "" {
				in.journalizeAttach(req, err)
			}
		}); err != nil {
			if early {
				in.questions.untaken(id)
			}
			in.replyFailed(req, err)
		}
		return
	}
	// Noted before the write, which a transport that delivers at once
	// (stdio) has done when it returns: the client may have read the
	// question and sent the call again before this goroutine goes on.
	in.questions.taken(id)
	err := req.Reply.Reply(a)
	if err != nil {
		in.questions.untaken(id)
		in.replyFailed(req, err)
		return
	}
	in.journalizeAttach(req, nil) // a caller asked again has its line
}

// questions are the executions of this process whose approval is asked
// in a round: whether a caller's transport took the question, and the
// timer that refuses it, until it is decided.
type questions struct {
	mu sync.Mutex
	m  map[string]*question
}

type question struct {
	taken bool
	timer *time.Timer
}

// at returns the question of execution id, made if need be. q.mu must
// be held.
func (q *questions) at(id string) *question {
	if q.m == nil {
		q.m = make(map[string]*question)
	}
	if q.m[id] == nil {
		q.m[id] = &question{}
	}
	return q.m[id]
}

// arm keeps t, the timer that refuses execution id.
func (q *questions) arm(id string, t *time.Timer) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.at(id).timer = t
}

// taken notes that a caller's transport took the question of execution
// id, if it is still asked here: one forgotten meanwhile is not kept
// again, with nothing left to forget it.
func (q *questions) taken(id string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if qq := q.m[id]; qq != nil {
		qq.taken = true
	}
}

// expire keeps execution id, asked about here again, until after d, when
// its approval's time is out, unless a timer that refuses it is armed
// here: a decision made in another process is not told to this one.
func (q *questions) expire(id string, d time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if qq := q.at(id); qq.timer == nil {
		qq.timer = time.AfterFunc(max(d, 0), func() { q.forget(id) })
	}
}

// asked notes that the question of execution id went to its caller
// another way, as an elicitation/create of the proxy's: a call sent
// again waits for that answer rather than ask in a round.
func (q *questions) asked(id string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.at(id).taken = true
}

// untaken notes that the question of execution id did not reach its
// caller after all.
func (q *questions) untaken(id string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if qq := q.m[id]; qq != nil {
		qq.taken = false
	}
}

// out reports whether the question of execution id was taken.
func (q *questions) out(id string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	qq := q.m[id]
	return qq != nil && qq.taken
}

// forget drops execution id, decided, and stops its timer.
func (q *questions) forget(id string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if qq := q.m[id]; qq != nil && qq.timer != nil {
		qq.timer.Stop()
	}
	delete(q.m, id)
}

// inputRequired returns the input_required result that asks for the
// approval of rec.
func (in *Interceptor) inputRequired(req *Request, rec *record.Record) (json.RawMessage, error) {
	params, err := in.elicitation(req, rec)
	if err != nil {
		return nil, err
	}
	state, err := in.approvalState(req, rec.ID, roundMembers(req.Call))
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

// approvalState mints the requestState of the approval of execution id
// for req's call: the id; carried, the members of the upstream's own
// round that the call carries on (roundMembers), which the continuation
// replaces with the proxy's; and a keyed hash over them, the actor, the
// upstream, the tool and the arguments asked about.
func (in *Interceptor) approvalState(req *Request, id string, carried json.RawMessage) (string, error) {
	mac, err := in.stateMAC(req, id, carried)
	if err != nil {
		return "", err
	}
	state := stateTag + id + "." + mac
	if carried != nil {
		state += "." + base64.RawURLEncoding.EncodeToString(carried)
	}
	return state, nil
}

func (in *Interceptor) stateMAC(req *Request, id string, carried json.RawMessage) (string, error) {
	args := req.Call.Arguments
	if args == nil {
		args = json.RawMessage("{}")
	}
	extra := map[string]json.RawMessage{"execution": json.RawMessage(`"` + id + `"`)}
	if carried != nil {
		extra["carried"] = carried
	}
	return in.hasher.Sum(fingerprint.Action{Actor: req.Origin.Actor, Upstream: req.Origin.UpstreamID, Scope: "approval-state",
		Tool: req.Call.Name, Arguments: args, Extra: extra})
}

// roundMembers returns the inputResponses and requestState that call
// carries, as an object, or nil: they continue the upstream's own
// multi-round request, and the call that the approval lets go upstream
// must carry them still.
func roundMembers(call *mcp.ToolCall) json.RawMessage {
	if call.InputResponses() == nil && call.RequestState() == nil {
		return nil
	}
	m := map[string]json.RawMessage{}
	if call.InputResponses() != nil {
		m["inputResponses"] = call.InputResponses()
	}
	if call.RequestState() != nil {
		m["requestState"] = call.RequestState()
	}
	b, _ := json.Marshal(m) // raw JSON values the parser took: they marshal
	return b
}

// ownContinuation returns the execution whose approval req's call
// continues, and the upstream's round members it carries on, if its
// requestState is one the proxy minted; ok is false for any other call.
// A state that claims to be the proxy's but does not check (another
// caller's, another call's, altered) is an error.
func (in *Interceptor) ownContinuation(req *Request) (id string, carried json.RawMessage, ok bool, err error) {
	raw := req.Call.RequestState()
	if raw == nil {
		return "", nil, false, nil
	}
	s, isString := jsonrpc.StringValue(raw)
	if !isString || !strings.HasPrefix(s, stateTag) {
		return "", nil, false, nil
	}
	parts := strings.SplitN(strings.TrimPrefix(s, stateTag), ".", 3)
	id = parts[0]
	if len(parts) == 3 {
		if carried, err = base64.RawURLEncoding.DecodeString(parts[2]); err != nil || !json.Valid(carried) {
			return "", nil, true, errBadState
		}
	}
	want, err := in.approvalState(req, id, carried)
	if err != nil {
		return "", nil, true, err
	}
	if subtle.ConstantTimeCompare([]byte(want), []byte(s)) != 1 {
		return "", nil, true, errBadState
	}
	return id, carried, true, nil
}

// errBadState refuses a continuation whose requestState does not check.
var errBadState = errors.New("its requestState claims to be mcp-idempotent's approval, and was not minted for this caller and these arguments by a proxy that shares this store's secret: " +
	"send the call that was asked about, with the requestState it was given")

// continueApproval takes the user's answer to the approval of execution
// id from req's call, the continuation, and goes on as the decision
// says: the call is the execution's caller from here, and what goes
// upstream is the call it continues, without the proxy's round.
func (in *Interceptor) continueApproval(ctx context.Context, req *Request, id string, carried json.RawMessage) {
	call := req.Call
	answer, aerr := jsonrpc.MemberOnce(call.InputResponses(), approvalInput)
	where := "inputResponses"
	if aerr == nil && answer != nil {
		_, _, aerr = readApproval(answer)
		where = fmt.Sprintf("inputResponses[%q]", approvalInput)
	}
	switch {
	case errors.Is(aerr, jsonrpc.ErrAmbiguous):
		// Not guessed at, and not decided: the question stays open for
		// an answer that reads one way.
		in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInvalidParams,
			"tools/call %s: the answer to the approval of execution %s is ambiguous, so it was not taken and nothing was sent: %s: %v", call.Name, id, where, aerr))
		return
	case aerr != nil:
		// A client's mistake, not its user's decision: the question
		// stays open for an answer that can be read.
		in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInvalidParams,
			"tools/call %s: the answer to the approval of execution %s could not be read, so it was not taken and nothing was sent: %s must be an elicitation result, such as {\"action\":\"accept\"}", call.Name, id, where))
		return
	case answer == nil && call.InputResponses() != nil && !isJSONObject(call.InputResponses()):
		in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInvalidParams,
			"tools/call %s: the call continues the approval of execution %s, and its inputResponses is no object: send {%q: {\"action\":\"accept\"}}, say; nothing was sent", call.Name, id, approvalInput))
		return
	case answer == nil:
		in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInvalidParams,
			"tools/call %s: the call continues the approval of execution %s and has no inputResponses[%q]", call.Name, id, approvalInput))
		return
	}
	plain, perr := mcp.ParseToolCall(withMembers(jsonrpc.WithoutMembers(call.Params, "inputResponses", "requestState"), carried))
	if perr != nil {
		in.replyError(req, perr)
		return
	}
	req.Call = plain
	rec, err := in.store.Get(req.bg(), id)
	if err != nil {
		in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInternalError,
			"mcp-idempotent: the approval of execution %s could not be read: %v; nothing was sent", id, err))
		return
	}
	fp, err := in.actionOf(req)
	if _, scope := matchScope(req); err == nil && fp != rec.Fingerprint && scope != rec.Scope {
		in.replyError(req, otherScope(plain.Name, id, scope, rec.Scope))
		return
	}
	if err != nil || fp != rec.Fingerprint {
		in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInvalidParams,
			"tools/call %s: the call continues the approval of execution %s of %s, but it is another call: send the arguments that were asked about", plain.Name, id, rec.Tool))
		return
	}
	if !in.sameKey(req, rec) {
		// The fingerprint leaves the key out: decided under another key,
		// the execution would stay the first key's, and a call under
		// this one would start another, asked about anew.
		in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInvalidParams,
			"tools/call %s: the call continues the approval of execution %s, which was asked about for a call under another client key (_meta %q), so it cannot be decided here and nothing was sent: send the continuation with that key",
			plain.Name, id, mcp.MetaKey))
		return
	}
	switch {
	case rec.State == record.Accepted && rec.Awaiting == record.ApproverClient:
		c := in.clientDecision(req, answer, nil, 0)
		// This process runs it from here, whichever asked.
		c.Owner, c.Lease = in.owner, in.lease
		in.decide(ctx, req, rec, c)
	case rec.State.Settled():
		// Decided before (the same continuation sent again): its outcome.
		req.joined, req.joinedHow = rec.ID, joinedReplay
		in.answer(ctx, req, rec, replayed)
	default:
		req.joined, req.joinedHow = rec.ID, joinedWaited
		in.goAttach(ctx, rec, req)
	}
}

// sameKey reports whether req's call, under a client key, is matched on
// rec's: one whose key names another execution is not rec's call. A call
// without a key has rec's fingerprint, and scope, already.
func (in *Interceptor) sameKey(req *Request, rec *record.Record) bool {
	if req.Call.Key == "" {
		return true
	}
	key, err := in.clientKey(req)
	return err == nil && key == rec.Key
}

// otherScope is the error of a continuation of the approval of execution
// id, of tool, that the state vouches for (the tool and the arguments
// are the ones asked about) but that is matched in scope, not asked, the
// execution's. The scopes are not named: an HTTP session's names its
// session id.
func otherScope(tool, id, scope, asked string) *jsonrpc.Error {
	key := string(policy.ScopeKey)
	if scope == key || asked == key {
		// A client key added or dropped: not another process.
		how, send := "without", "without one"
		if asked == key {
			how, send = "with", "with that key"
		}
		return jsonrpc.Errorf(jsonrpc.CodeInvalidParams,
			"tools/call %s: the call continues the approval of execution %s, which was asked about for a call %s a client key (_meta %q), so it cannot be decided here and nothing was sent: send the continuation %s",
			tool, id, how, mcp.MetaKey, send)
	}
	// Another stdio process, or serve since restarted.
	return jsonrpc.Errorf(jsonrpc.CodeInvalidParams,
		"tools/call %s: the call continues the approval of execution %s, which was asked about in another session scope (another proxy process, or one since restarted), so it cannot be decided here and nothing was sent: send the call again as it was first sent, and it is asked about anew",
		tool, id)
}

// askAgainInRound answers a call that maps to rec, which awaits its
// client's answer in a round whose question no caller's transport took
// here, with the same question: the caller that sent it again never saw
// the first (a lost answer, or another process asked), and the first
// answer that comes back decides.
func (in *Interceptor) askAgainInRound(ctx context.Context, req *Request, rec *record.Record) {
	req.joined, req.joinedHow = rec.ID, joinedWaited
	result, err := in.inputRequired(req, rec)
	if err != nil {
		in.goAttach(ctx, rec, req)
		return
	}
	// The process that asked first refuses it when its time is out, and
	// any process may decide it: this one may never hear of it.
	in.questions.expire(rec.ID, rec.At(record.Accepted).Add(req.Policy.ApprovalTimeout).Sub(in.now()))
	in.putQuestion(ctx, req, rec.ID, result)
}

// actionOf returns the intent fingerprint of req's call, as handle
// computes it.
func (in *Interceptor) actionOf(req *Request) (string, error) {
	args, err := shapeArguments(req.Call.Arguments, req.Policy, req.Schema)
	if err != nil {
		return "", err
	}
	actor, scope := matchScope(req)
	return in.hasher.Sum(fingerprint.Action{Actor: actor, Scope: scope, Upstream: req.Origin.UpstreamID, Tool: req.Call.Name,
		Arguments: args, Extra: extra(req.Call)})
}

// withMembers returns the object obj with the members of the object
// members added, or obj if members is nil. obj holds none of them.
func withMembers(obj, members json.RawMessage) json.RawMessage {
	if members == nil {
		return obj
	}
	inner := bytes.TrimSpace(members[1 : len(members)-1])
	body := bytes.TrimSpace(obj[:len(obj)-1])
	out := append([]byte(nil), body...)
	if len(inner) > 0 {
		if out[len(out)-1] != '{' {
			out = append(out, ',')
		}
		out = append(out, inner...)
	}
	return append(out, '}')
}

// isJSONObject reports whether v, valid JSON, is an object.
func isJSONObject(v json.RawMessage) bool {
	v = bytes.TrimLeft(v, " \t\r\n")
	return len(v) > 0 && v[0] == '{'
}
