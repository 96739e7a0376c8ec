package intercept

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// handle is Handle's work, on the goroutine that is to do it: the call
// is fingerprinted and reserved, and then run, attached or answered from
// the record (resolve).
func (in *Interceptor) handle(ctx context.Context, req *Request) {
	in.handleFrom(ctx, req, nil)
}

// handleFrom is handle for a call that replayHere began, and learned pre
// of; nil if none did.
func (in *Interceptor) handleFrom(ctx context.Context, req *Request, pre *prelude) {
	call, pol := req.Call, req.Policy
	if pre == nil {
		p, ok := in.begin(ctx, req)
		if !ok {
			return
		}
		pre = &p
	}
	arrived, a := pre.arrived, pre.a
	fresh := &record.Record{
		ID:          record.NewID(arrived),
		Key:         a.key,
		Fingerprint: a.fp,
		Actor:       req.Origin.Actor,
		Scope:       a.scope,
		Upstream:    in.upstreamShown(req),
		Tool:        call.Name,
		Retention:   pol.Retention,
		Owner:       in.owner,
		LeaseUntil:  arrived.Add(in.lease),
	}
	opts := reserveOptions(pol)
	// The lease starts when the store writes the reservation, in place of
	// LeaseUntil: one that waited its turn under load does not land
	// already lapsed, to be taken for a dead process's.
	opts.Lease = in.lease
	// Without an account to wait for, a won reservation is sent at once:
	// a store that can records its dispatch in the same step.
	opts.Dispatch = in.accountOf(req) == nil
	opts.Unheld = pre.unheld
	in.prepareApproval(req, fresh, &opts)
	// Marked before the context is read: see reserving.go.
	in.startReserving(req)
	if err := ctx.Err(); err != nil {
		if in.keepsCall(req) {
			in.leftBeforeReserving(req, err)
		} else {
			in.late.done() // answered at the end, and nothing reserved
		}
		return
	}
	rec, won, err := in.reserveAction(req, fresh, opts, a)
	if !in.keepsCall(req) {
		in.reservedAfterEnd(req, fresh.ID, rec, won, err)
		in.late.done()
		return
	}
	if err != nil {
		if own := in.ownExecution(fresh, opts.Replace); own != nil {
			in.attachOwn(ctx, req, own, err)
			in.mayHaveReserved(req, fresh.ID, err)
			return
		}
		in.storeRefused(req, fresh.ID, err)
		return
	}
	if !won && in.shadowReplay(rec) && rec.Fingerprint == fresh.Fingerprint {
		in.goReserveRecorded(ctx, req, rec, fresh, opts, a)
		return
	}
	in.resolve(ctx, req, rec, won, a.fp, a.args)
}

// A prelude is what the start of a call's handling learned: when it
// arrived, its action, and, from a store's read, whether its key was
// unheld (replayHere).
type prelude struct {
	arrived time.Time
	a       action
	unheld  bool
}

// begin starts the handling of req: its deadline, its caller's context,
// and its action. An approval's continuation is seen through here, and
// a call whose action cannot be read is answered: ok is then false.
func (in *Interceptor) begin(ctx context.Context, req *Request) (pre prelude, ok bool) {
	arrived := in.now()
	in.startDeadline(req, arrived)
	req.caller.Context = ctx
	id, carried, own, err := in.ownContinuation(req)
	if own && errors.Is(err, errBadState) && !asksInRound(req.Policy) {
		own = false // an upstream proxy's question (asksInRound)
	}
	if own {
		if err != nil {
			in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "tools/call %s: %v", req.Call.Name, err))
			return prelude{}, false
		}
		in.continueApproval(ctx, req, id, carried)
		return prelude{}, false
	}
	a, ok := in.identify(req)
	return prelude{arrived: arrived, a: a}, ok
}

// reserveAction reserves fresh, the execution of req's action a. A
// client key whose record has the fingerprint the call had before the
// tasks extension counted (sameBeforeTasksExtension) is reserved again
// under that fingerprint: the store replaces a record of the same action
// only, and would otherwise keep that record's failure, or an answer
// replay: undelivered has delivered, as the answer to every retry.
func (in *Interceptor) reserveAction(req *Request, fresh *record.Record, opts record.ReserveOptions, a action) (*record.Record, bool, error) {
	rec, won, err := in.reserve(req, fresh, opts)
	// TasksExtension first: it is a bool, where the fingerprints are 64
	// bytes to compare on every replay.
	if err != nil || won || !req.Call.TasksExtension || rec.Fingerprint == a.fp || !in.sameBeforeTasksExtension(rec, req, a.args) {
		return rec, won, err
	}
	fresh.Fingerprint = rec.Fingerprint
	opts.Unheld = false // held, by rec
	return in.reserve(req, fresh, opts)
}

// asksInRound reports whether a call under pol may have been asked, in
// its answer, for its approval by this proxy. A requestState in the form
// of the proxy's that does not check, on a tool it asks nobody about, is
// not its own: another mcp-idempotent behind it minted it, and the
// continuation goes upstream to it as any other does.
func asksInRound(pol *policy.Policy) bool {
	return pol.NeedsApproval() && pol.Approver != policy.ApproverOperator
}

// An action is what identify makes of a call.
type action struct {
	args  json.RawMessage // the arguments as fingerprinted (shapeArguments)
	scope string          // the scope the call is matched in
	fp    string          // the intent fingerprint
	key   string          // what the call is matched on: fp, or the client's key
}

// identify makes req's action. When it cannot, it answers the call
// itself and reports false.
func (in *Interceptor) identify(req *Request) (action, bool) {
	call := req.Call
	args, err := shapeArguments(call.Arguments, req.Policy, req.Schema)
	if err != nil {
		in.refuseUnreadable(req, err)
		return action{}, false
	}
	actor, scope := matchScope(req)
	// The arguments are valid JSON: jsonrpc checked the frame they came
	// in (Request.Call), and shapeArguments writes valid JSON.
	fp, err := in.hasher.SumValid(fingerprint.Action{
		Actor:     actor,
		Scope:     scope,
		Upstream:  req.Origin.UpstreamID,
		Tool:      call.Name,
		Arguments: args,
		Extra:     extra(call),
	})
	if err != nil && errors.Is(err, fingerprint.ErrNoSecret) {
		// The durable store that keeps the secret could not be reached
		// yet: fail closed, as without a reservation.
		in.log.Error("the fingerprint secret is not known yet; not executing", "tool", call.Name, "request", req.Correlation)
		in.decided(req, call.Name, "store_unavailable")
		in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInternalError,
			"mcp-idempotent: the record store is unavailable, so %s was not executed: the fingerprint secret it keeps could not be read yet", call.Name))
		return action{}, false
	}
	key := fp
	if err == nil && call.Key != "" {
		key, err = in.clientKey(req)
	}
	if err != nil {
		in.refuseUnreadable(req, err)
		return action{}, false
	}
	return action{args: args, scope: scope, fp: fp, key: key}, true
}

// refuseUnreadable answers req, whose arguments or client key cannot be
// read as one action (err), with invalid params. It is counted as
// "invalid": in shadow mode the call goes upstream all the same, and the
// count is all that says the proxy would have refused it.
func (in *Interceptor) refuseUnreadable(req *Request, err error) {
	in.decided(req, req.Call.Name, "invalid")
	var me *fingerprint.MemberError
	if errors.As(err, &me) {
		// The action record's members bear the names of the params
		// they come from (extra): the message says which to fix.
		in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "tools/call %s: params.%s cannot be fingerprinted: %v", req.Call.Name, me.Member, me.Err))
		return
	}
	in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "tools/call %s: %v", req.Call.Name, err))
}

// storeRefused answers a call whose reservation, of execution id, the
// store refused or did not answer. It fails closed: without a reservation
// nothing may run. The store may have made it all the same: it is
// remembered, to be failed once the store answers (abandoned).
func (in *Interceptor) storeRefused(req *Request, id string, err error) {
	tool := req.Call.Name
	in.log.Error("store refused the reservation", "tool", tool, "request", req.Correlation, "err", err)
	in.decided(req, tool, "store_unavailable")
	why := "is unavailable"
	if errors.Is(err, record.ErrUnreadable) {
		// The store answered: calling again reads the same record.
		why = "holds a record of this call that it cannot read"
	}
	in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInternalError,
		"mcp-idempotent: the record store %s, so %s was not executed: %v", why, tool, err))
	in.mayHaveReserved(req, id, err)
}

// retake settles rec, abandoned by a, for a call that found it, and
// reports whether it did; if the store refused, a is kept for later.
func (in *Interceptor) retake(ctx context.Context, rec *record.Record, a abandonment) bool {
	settled, keep := in.settleAbandoned(ctx, a, rec)
	if keep {
		in.abandoned.add(rec.ID, a)
	}
	return settled
}

// clientKey returns the key a call's execution is reserved under when
// the client names it: the client's key names the execution (DESIGN
// section 3), matched within the actor and the upstream, and the
// fingerprint checks that the key is not reused for another action. The
// caller's own actor even for a global tool: two actors never share a
// key, nor learn of each other's executions through one.
func (in *Interceptor) clientKey(req *Request) (string, error) {
	call := req.Call
	kb, _ := json.Marshal(call.Key)
	// A continuation of a multi-round request (2026-07-28) resends the
	// request's arguments, under its key, with the client's answers:
	// each round's answers make a key of their own, so a continuation
	// is matched to the same continuation retried, two different
	// answers are two executions (as without a key), and the round
	// that asked for input is not taken for another action.
	kx := map[string]json.RawMessage{"key": kb}
	if call.InputResponses() != nil || call.RequestState() != nil {
		kx["inputResponses"], kx["requestState"] = call.InputResponses(), call.RequestState()
	}
	// Valid JSON all: the key as json.Marshal wrote it, the answers as
	// the client's frame held them.
	kfp, err := in.hasher.SumValid(fingerprint.Action{Actor: req.Origin.Actor, Scope: "client-key", Upstream: req.Origin.UpstreamID, Extra: kx})
	if err != nil {
		return "", err
	}
	return "key:" + kfp, nil
}

// leftBeforeReserving answers a call whose context ended, with err,
// before it was reserved.
func (in *Interceptor) leftBeforeReserving(req *Request, err error) {
	if errors.Is(err, ErrSessionEnded) {
		// The caller did not leave: it is owed an answer, and nothing ran.
		in.decided(req, req.Call.Name, "session_ended")
		in.replyError(req, NotRunAtSessionEnd(req.Call.Name))
	}
	// Otherwise the caller left before anything was reserved.
}

// resolve does what the reservation calls for: a won one runs, a client
// key reused for another action is refused, and a call that matched an
// execution gets its answer, at once or when it comes.
func (in *Interceptor) resolve(ctx context.Context, req *Request, rec *record.Record, won bool, fp string, args json.RawMessage) {
	call, pol := req.Call, req.Policy
	in.traceRecord(req, rec)
	switch {
	case won:
		// A new execution is the ordinary path, logged at debug, so that
		// logging at the default level costs nothing per ordinary call.
		if in.debug {
			in.log.Debug("new execution", "execution", rec.ID, "tool", call.Name, "class", pol.Class,
				"fingerprint", fp[:12], "request", req.Correlation)
		}
		in.decided(req, call.Name, "new")
		if rec.State == record.Accepted && pol.NeedsApproval() && !in.shadow {
			in.journalize(req, rec, &record.Change{To: record.Accepted})
			in.approve(ctx, req, rec)
			return
		}
		note := in.shadowApproval(req, rec)
		if rec.State == record.Dispatched {
			// Reserved and dispatched in one step (opts.Dispatch).
			in.journalizeAccepted(req, rec, note)
			in.executeDispatched(rec, req)
			return
		}
		in.journalize(req, rec, &record.Change{To: record.Accepted, Note: note})
		in.execute(rec, req, "")
	case rec.Fingerprint != fp && !in.sameBeforeTasksExtension(rec, req, args):
		// Only a client key can match a record of another action: the
		// IETF Idempotency-Key draft's 422. Never executed.
		in.log.Info("client key reused for another action; refused", "execution", rec.ID, "tool", call.Name, "request", req.Correlation)
		in.decided(req, call.Name, "key_refused")
		req.joined, req.joinedHow, req.got = rec.ID, joinedKey, gotKeyRefused
		in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInvalidParams,
			"mcp-idempotent: idempotency key %q was already used for a different call (execution %s of %s); %s, so this call was not executed: use a new key for a new action",
			call.Key, rec.ID, rec.Tool, in.keyDifference(rec, req, args)))
	case rec.State == record.Unknown:
		// One line for each decision; an unknown outcome's is unknown's.
		in.unknown(ctx, rec, req)
	case rec.State.Settled():
		// A replay and an attach are logged at debug, as a new execution
		// is: a line per call cost more than the replay itself, and
		// calls_total{decision} counts them, the journal each attach.
		if in.debug {
			in.log.Debug("replayed an execution's answer", "execution", rec.ID, "state", rec.State,
				"tool", call.Name, "fingerprint", fp[:12], "request", req.Correlation)
		}
		in.decided(req, call.Name, "replayed")
		req.joined, req.joinedHow = rec.ID, joinedReplay
		in.answer(ctx, req, rec, replayed)
	case rec.State == record.Accepted && rec.Awaiting == record.ApproverClient && call.Elicits && !in.questions.out(rec.ID):
		in.decided(req, call.Name, "attached")
		in.askAgainInRound(ctx, req, rec)
	case in.shadowReplay(rec):
		// Not recorded within the attach window (goReserveRecorded):
		// it waits on for the recording, which the client did not, and
		// is answered from it, as the replay normal mode would make.
		if in.debug {
			in.log.Debug("replayed an execution's answer", "execution", rec.ID, "state", rec.State,
				"tool", call.Name, "fingerprint", fp[:12], "request", req.Correlation)
		}
		in.decided(req, call.Name, "replayed")
		req.joined, req.joinedHow = rec.ID, joinedReplay
		in.goAttach(ctx, rec, req)
	default:
		if in.debug {
			in.log.Debug("attached to an execution under way", "execution", rec.ID, "state", rec.State,
				"attached", rec.Attached, "tool", call.Name, "fingerprint", fp[:12], "request", req.Correlation)
		}
		in.decided(req, call.Name, "attached")
		req.joined, req.joinedHow = rec.ID, joinedWaited
		in.goAttach(ctx, rec, req)
	}
}

// goReserveRecorded reserves req's call again, on a goroutine counted in
// in.work, once rec, the execution of this process it matched, has
// recorded the answer the client already has (shadowReplay). Normal mode
// records an answer before the client gets it, so the call is judged on
// the record as it settled: replayed, or run anew where the tool's
// policy replaces it (a failure, an idempotent tool's result). If it is
// not recorded within the tool's attach window, the call attaches to it.
func (in *Interceptor) goReserveRecorded(ctx context.Context, req *Request, rec, fresh *record.Record, opts record.ReserveOptions, a action) {
	in.work.Start()
	go func() {
		defer in.work.Done()
		wctx, cancel := context.WithTimeout(req.bg(), req.Policy.AttachWindow)
		settled, err := in.wait(wctx, rec.ID)
		cancel()
		won := false
		switch {
		case err != nil:
		case settled.State == record.Failed || slices.Contains(opts.Replace, settled.State):
			// The store replaces it: reserved again, the call wins.
			if rec, won, err = in.reserveAction(req, fresh, opts, a); err != nil {
				in.storeRefused(req, fresh.ID, err)
				return
			}
		default:
			// The first reservation counted the call as attached.
			rec = settled
		}
		in.resolve(ctx, req, rec, won, a.fp, a.args)
	}()
}

// shadowReplay reports whether, in shadow mode, rec is an execution of
// this process whose answer came, and went on to the client as it came,
// but was not yet recorded when the call that matches it read rec: that
// call may have been made after the client had the answer.
func (in *Interceptor) shadowReplay(rec *record.Record) bool {
	if !in.shadow || rec.State.Settled() || rec.Owner != in.owner {
		return false
	}
	r, ok := in.shadowRuns.Load(rec.ID)
	// Gone: its execution ended since, having recorded the answer.
	return !ok || r.(*Request).answerCame.Load()
}

// sameBeforeTasksExtension reports whether rec, the record under a call's
// client key, has the fingerprint the call had before the 2026 tasks
// extension declared in _meta became part of it: a record of the same
// call made by an earlier version, which is no other action.
func (in *Interceptor) sameBeforeTasksExtension(rec *record.Record, req *Request, args json.RawMessage) bool {
	call := req.Call
	if !call.TasksExtension {
		return false
	}
	actor, scope := matchScope(req)
	c := *call
	c.TasksExtension = false
	fp, err := in.hasher.Sum(fingerprint.Action{Actor: actor, Scope: scope, Upstream: req.Origin.UpstreamID,
		Tool: call.Name, Arguments: args, Extra: extra(&c)})
	return err == nil && fp == rec.Fingerprint
}

// startDeadline sets when req, a call arriving at now, stops beginning
// waits: the retry rule's deadline (policy.DefaultDeadline when it sets
// none), or the client's, if that is sooner. Without a retry rule the
// proxy makes no waits of its own, and the client's deadline, checked by
// mcp.ParseToolCall, has nothing to bound. It is counted from the epoch
// as setDeadline counts it, without a Time for it in between.
func (in *Interceptor) startDeadline(req *Request, now time.Time) {
	d := ruleDeadline(req.Policy.Retry)
	if client := req.Call.Deadline; client > 0 {
		d = min(d, client)
	}
	in.setDeadlineAfter(req, now.Sub(in.epoch)+d)
}

// ruleDeadline is the deadline rule gives a call from its arrival.
func ruleDeadline(rule *policy.RetryRule) time.Duration {
	if rule != nil && rule.Deadline > 0 {
		return rule.Deadline
	}
	return policy.DefaultDeadline
}

// deadlineOf returns req's deadline, or the zero Time if it has none.
func (in *Interceptor) deadlineOf(req *Request) time.Time {
	if req.deadline == 0 {
		return time.Time{}
	}
	return in.epoch.Add(req.deadline)
}

// setDeadline sets req's deadline to d. One that falls on the epoch
// itself is kept a nanosecond later, 0 being none.
func (in *Interceptor) setDeadline(req *Request, d time.Time) {
	in.setDeadlineAfter(req, d.Sub(in.epoch))
}

// setDeadlineAfter sets req's deadline to d after the epoch.
func (in *Interceptor) setDeadlineAfter(req *Request, d time.Duration) {
	if d == 0 {
		d = 1
	}
	req.deadline = d
}

// clientDeadline returns the deadline req's client set (Call.Deadline
// from the call's arrival), which req.deadline may have shortened to the
// retry rule's, or the zero Time if it set none. It is worked out from
// req.deadline rather than kept, which would take the call to the next
// allocation size.
func (in *Interceptor) clientDeadline(req *Request) time.Time {
	client := req.Call.Deadline
	arrived := in.arrivalOf(req)
	if client <= 0 || arrived.IsZero() {
		return time.Time{}
	}
	return arrived.Add(client)
}

// arrivalOf returns when req arrived, worked out from its deadline as
// startDeadline set it, or the zero Time if it has none. It does not
// hold for req after restartDeadline.
func (in *Interceptor) arrivalOf(req *Request) time.Time {
	d := in.deadlineOf(req)
	if d.IsZero() {
		return d
	}
	after := ruleDeadline(req.Policy.Retry)
	if client := req.Call.Deadline; client > 0 {
		after = min(after, client)
	}
	return d.Add(-after)
}

// restartDeadline counts the retry rule's deadline of req, an approved
// call, from the decision at now: the time a person took to approve is
// not the proxy's to take from the call's attempts. The client's own
// deadline still counts from the call's arrival. clientDeadline does not
// hold for req after it.
func (in *Interceptor) restartDeadline(req *Request, now time.Time) {
	d := now.Add(ruleDeadline(req.Policy.Retry))
	if c := in.clientDeadline(req); !c.IsZero() && c.Before(d) {
		d = c
	}
	in.setDeadline(req, d)
}

// matchScope returns the actor and the scope that go into the
// fingerprint: a client key is matched within its actor across sessions,
// and a global tool across actors.
func matchScope(req *Request) (actor, scope string) {
	actor = req.Origin.Actor
	switch {
	case req.Call.Key != "":
		scope = string(policy.ScopeKey)
	case req.Policy.Scope == policy.ScopeActor:
		scope = string(policy.ScopeActor)
	case req.Policy.Scope == policy.ScopeGlobal:
		scope = string(policy.ScopeGlobal)
	default:
		scope = req.Origin.Scope
	}
	if req.Policy.Scope == policy.ScopeGlobal {
		actor = ""
	}
	return actor, scope
}

// reserveOptions maps a policy to the settled states a new call replaces.
func reserveOptions(p *policy.Policy) record.ReserveOptions {
	switch {
	case p.Class == policy.Idempotent:
		// Coalesce in-flight duplicates only: a later call runs again.
		return record.ReserveOptions{Replace: []record.State{record.Completed, record.Delivered}}
	case p.Replay == policy.ReplayUndelivered:
		return record.ReserveOptions{Replace: []record.State{record.Delivered}}
	}
	return record.ReserveOptions{}
}

// extra returns the members besides arguments that change what a call
// means: whether it asks for a task (not the task's ttl, which only says how
// long to keep it) or may be answered with one (the 2026 tasks extension),
// and a continuation's answers.
func extra(c *mcp.ToolCall) map[string]json.RawMessage {
	if !c.TasksExtension && !c.HasRare() {
		return nil // most calls: inlined, so they make no call here
	}
	return extraOf(c)
}

// extraOf is extra, for a call that may have any of those members.
func extraOf(c *mcp.ToolCall) map[string]json.RawMessage {
	continuation := c.InputResponses() != nil || c.RequestState() != nil
	if c.Task() == nil && !c.TasksExtension && !continuation {
		return nil
	}
	m := make(map[string]json.RawMessage, 3)
	switch {
	case c.Task() != nil:
		m["task"] = json.RawMessage("true")
	case c.TasksExtension:
		m["tasksExtension"] = json.RawMessage("true")
	}
	if continuation {
		m["inputResponses"] = c.InputResponses()
		m["requestState"] = c.RequestState()
	}
	return m
}
