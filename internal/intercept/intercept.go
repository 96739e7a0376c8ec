// Package intercept turns a tools/call into at most one execution:
//
//	policy -> fingerprint -> reserve -> dispatch -> complete -> reply
//
// The first caller of an action wins the reservation and its call is
// dispatched; every identical call that follows attaches to that execution
// and gets its answer, replayed. The package depends only on the interfaces
// it defines (Upstream, Replier, Allowances, Journal) and on record.Store.
package intercept

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

// An Upstream is the server a session's calls go to.
type Upstream interface {
	// Send writes a request upstream and arranges for done to be called
	// exactly once with the outcome: the result member on success; a
	// *jsonrpc.Error when the upstream answered with one; a
	// retry.NotSentError when the request never left; anything else when
	// the request may have been received but no answer was observed. done
	// may be called before Send returns, or later on the goroutine that
	// reads the upstream, so it must not block for long. If ctx ends
	// before the answer comes, the request is cancelled upstream
	// (notifications/cancelled) and done gets ctx's error at once. An
	// execution is never cancelled by its caller: its sends go with a
	// context that does not end.
	Send(ctx context.Context, method string, params json.RawMessage, done func(result json.RawMessage, err error))
}

// An Answer is what one caller receives: a result or a JSON-RPC error
// object, exactly one of them set.
type Answer struct {
	Result json.RawMessage
	Error  json.RawMessage
}

// A Replier writes the answer to one caller's request.
type Replier interface {
	// Reply writes a on the caller's transport. A nil error means the
	// transport took it. Reply is called at most once per request.
	Reply(a Answer) error
}

// A DeliveryReplier is a Replier whose transport learns only later than
// the write whether the caller got the answer: an HTTP stream holds it as
// an event until the client reads it, and a client that dropped its
// request never does. ReplyThen writes a as Reply does, and calls written
// once the answer has reached the caller, if it ever does; only then is
// the execution recorded as delivered. It is used instead of Reply when
// DeliversLater reports true.
type DeliveryReplier interface {
	Replier
	DeliversLater() bool
	ReplyThen(a Answer, written func()) error
}

// A Request is one caller's tools/call.
type Request struct {
	Call   *mcp.ToolCall
	Policy *policy.Policy // read-only; shared with other calls
	// SchemaDefaults are the tool's inputSchema property defaults, which
	// Policy.Defaults materialises before fingerprinting.
	SchemaDefaults map[string]json.RawMessage
	// Actor, Scope and UpstreamID go into the fingerprint.
	Actor      string
	Scope      string
	UpstreamID string
	Upstream   Upstream
	Reply      Replier
	// Correlation names the caller's request in logs: its session and
	// JSON-RPC id. It is evidence, never part of matching.
	Correlation string

	// deadline is when the proxy stops beginning waits for this call
	// (RetryRule.Deadline, shortened by the client's Call.Deadline); set
	// by Handle on the call's arrival.
	deadline time.Time
	// bg is the caller's context without its cancellation, for the work
	// that outlives the caller (recording the outcome); set by Handle.
	bg context.Context
	// unrecorded marks a call sent by Unrecorded: no execution id goes
	// upstream with it.
	unrecorded bool
}

// An Observer is told of every decision, attempt and transition, for
// metrics. Its methods are called on the request path and must not block.
type Observer interface {
	// Decision: what became of one call. decision is one of new,
	// attached, replayed, passed_through, key_refused, store_unavailable,
	// unknown (answered outcome unknown), in_progress, redispatched,
	// recovered.
	Decision(tool string, class policy.Class, decision string)
	// Attempt: a call is sent again after wait, for why (transient, not
	// sent).
	Attempt(tool string, n int, why string, wait time.Duration)
	// Transition: an execution moved to state.
	Transition(tool string, state record.State)
	// Upstream: the upstream answered one send after d.
	Upstream(tool string, d time.Duration)
}

// Options configures an Interceptor.
type Options struct {
	// Observer is told of decisions and transitions; nil means none.
	Observer Observer
	Store    record.Store        // required
	Hasher   *fingerprint.Hasher // required
	// Logger receives one line per call answered from the record: an
	// attach, a replay, an unknown outcome (info); and one per new execution
	// and per state transition (debug). Nil discards.
	Logger *slog.Logger
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// Owner names this process in the records it runs; empty means a
	// fresh random name.
	Owner string
	// Accounts are the upstream accounts retry rules name, by name.
	Accounts map[string]policy.Account
	// Allowances, if set, hold the accounts' allowances in a store that
	// other proxy processes share, so that they all take from one
	// allowance per account; nil keeps each allowance in this process.
	Allowances Allowances
	// Lease is how long a record stays claimed by this process without a
	// renewal (KeepLeases renews it); zero means 30 seconds. When a process
	// dies, its executions are taken over once their lease lapses.
	Lease time.Duration
	// Journal, if set, gets one entry per transition of the executions
	// this process runs; nil keeps no journal.
	Journal Journal
	// StoreWaits says that the store waits on I/O (a file, a server), so
	// that an operation may take as long as its timeout: Handle then does
	// a call's work on a goroutine of its own, and a slow store holds up
	// only the calls that need it, never the caller's other traffic. A
	// store in memory answers at once, and the work stays on the
	// caller's goroutine, which spares the hand-off.
	StoreWaits bool
}

// An Interceptor executes tool calls at most once per action. It is safe
// for concurrent use by every session of a process.
type Interceptor struct {
	store  record.Store
	hasher *fingerprint.Hasher
	log    *slog.Logger
	// debug and info are whether log takes debug and info records, read
	// once: the per-call lines are built only then.
	debug, info bool
	now         func() time.Time
	owner       string
	lease       time.Duration
	obs         Observer
	timed       bool // an Observer was given: upstream calls are timed for it
	// journal is nil when no journal is kept.
	journal    Journal
	settling   journalGates // executions whose settling line is not yet journaled
	storeWaits bool

	accounts map[string]*account // read-only after New

	// work counts dispatches and status checks under way; they outlive
	// the callers that started them.
	work sync.WaitGroup
}

// New returns an Interceptor.
func New(opts Options) *Interceptor {
	in := &Interceptor{store: opts.Store, hasher: opts.Hasher, log: opts.Logger, now: opts.Now, owner: opts.Owner, lease: opts.Lease}
	if in.owner == "" {
		in.owner = "proxy-" + strings.TrimPrefix(record.NewID(time.Now()), "exe_")
	}
	if in.lease == 0 {
		in.lease = 30 * time.Second
	}
	if in.log == nil {
		in.log = slog.New(slog.DiscardHandler)
	}
	in.debug = in.log.Enabled(context.Background(), slog.LevelDebug)
	in.info = in.log.Enabled(context.Background(), slog.LevelInfo)
	if in.now == nil {
		in.now = time.Now
	}
	in.journal = opts.Journal
	in.storeWaits = opts.StoreWaits
	in.obs = opts.Observer
	in.timed = in.obs != nil
	if in.obs == nil {
		in.obs = nopObserver{}
	}
	in.accounts = newAccounts(opts.Accounts, opts.Allowances, in.now())
	return in
}

type nopObserver struct{}

func (nopObserver) Decision(string, policy.Class, string)      {}
func (nopObserver) Attempt(string, int, string, time.Duration) {}
func (nopObserver) Transition(string, record.State)            {}
func (nopObserver) Upstream(string, time.Duration)             {}

// PassedThrough tells the observer that a call went upstream as it came,
// unrecorded (a read-only tool, or a key-scoped one called without a key).
func (in *Interceptor) PassedThrough(tool string, class policy.Class) {
	in.obs.Decision(tool, class, "passed_through")
}

// KeepLeases renews this process's claim on the executions it runs, three
// times per lease, until ctx is done.
func (in *Interceptor) KeepLeases(ctx context.Context) {
	t := time.NewTicker(in.lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := in.store.Renew(ctx, in.owner, in.now().Add(in.lease)); err != nil && ctx.Err() == nil {
				in.log.Warn("renewing leases", "owner", in.owner, "err", err)
			}
		}
	}
}

// Wait blocks until every dispatch and status check under way has
// settled and its callers are answered, or ctx is done.
func (in *Interceptor) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		in.work.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Handle starts req and returns without waiting for the upstream; the
// answer is written with req.Reply when it is known. ctx is the caller's:
// cancelling it detaches the caller, who then gets no answer, but never
// stops the execution. Read-only tools are not the interceptor's: the
// caller passes them through.
//
// The first caller of an action is dispatched on the calling goroutine and
// answered on the one that delivers the upstream's response, so the common
// case costs no goroutine hand-off; only callers that attach to an
// execution already under way get a goroutine of their own to wait in.
// With a store that waits on I/O (Options.StoreWaits), the calling
// goroutine only starts the one that does the work.
func (in *Interceptor) Handle(ctx context.Context, req *Request) {
	if in.storeWaits {
		in.work.Add(1)
		go func() {
			defer in.work.Done()
			in.handle(ctx, req)
		}()
		return
	}
	in.handle(ctx, req)
}

// handle is Handle's work, on the goroutine that is to do it.
func (in *Interceptor) handle(ctx context.Context, req *Request) {
	call, pol := req.Call, req.Policy
	arrived := in.now()
	req.deadline = deadline(arrived, pol.Retry, call.Deadline)
	req.bg = context.WithoutCancel(ctx)
	args, err := shapeArguments(call.Arguments, pol, req.SchemaDefaults)
	if err != nil {
		in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "tools/call %s: %v", call.Name, err))
		return
	}
	actor, scope := matchScope(req)
	fp, err := in.hasher.Sum(fingerprint.Action{
		Actor:     actor,
		Scope:     scope,
		Upstream:  req.UpstreamID,
		Tool:      call.Name,
		Arguments: args,
		Extra:     extra(call),
	})
	if errors.Is(err, fingerprint.ErrNoSecret) {
		// The durable store that keeps the secret could not be reached
		// yet: fail closed, as without a reservation.
		in.log.Error("the fingerprint secret is not known yet; not executing", "tool", call.Name, "request", req.Correlation)
		in.obs.Decision(call.Name, pol.Class, "store_unavailable")
		in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInternalError,
			"mcp-idempotent: the record store is unavailable, so %s was not executed: the fingerprint secret it keeps could not be read yet", call.Name))
		return
	}
	if err != nil {
		in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "tools/call %s: %v", call.Name, err))
		return
	}
	key := fp
	if call.Key != "" {
		// The client's key names the execution (DESIGN section 3): it is
		// matched on the key, within the actor and the upstream, and the
		// fingerprint checks that the key is not reused for another action.
		// The caller's own actor even for a global tool: two actors never
		// share a key, nor learn of each other's executions through one.
		kb, _ := json.Marshal(call.Key)
		// A continuation of a multi-round request (2026-07-28) resends the
		// request's arguments, under its key, with the client's answers:
		// each round's answers make a key of their own, so a continuation
		// is matched to the same continuation retried, two different
		// answers are two executions (as without a key), and the round
		// that asked for input is not taken for another action.
		kx := map[string]json.RawMessage{"key": kb}
		if call.InputResponses != nil || call.RequestState != nil {
			kx["inputResponses"], kx["requestState"] = call.InputResponses, call.RequestState
		}
		kfp, err := in.hasher.Sum(fingerprint.Action{Actor: req.Actor, Scope: "client-key", Upstream: req.UpstreamID, Extra: kx})
		if err != nil {
			in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "tools/call %s: %v", call.Name, err))
			return
		}
		key = "key:" + kfp
	}
	fresh := &record.Record{
		ID:          record.NewID(arrived),
		Key:         key,
		Fingerprint: fp,
		Actor:       req.Actor,
		Scope:       scope,
		Upstream:    req.UpstreamID,
		Tool:        call.Name,
		Retention:   pol.Retention,
		Owner:       in.owner,
		LeaseUntil:  arrived.Add(in.lease),
	}
	opts := reserveOptions(pol)
	// Without an account to wait for, a won reservation is sent at once:
	// a store that can records its dispatch in the same step.
	opts.Dispatch = in.accountOf(req) == nil
	switch err := ctx.Err(); {
	case errors.Is(err, ErrSessionEnded):
		// The caller did not leave: it is owed an answer, and nothing ran.
		in.obs.Decision(call.Name, pol.Class, "session_ended")
		in.replyError(req, NotRunAtSessionEnd(call.Name))
		return
	case err != nil:
		return // the caller left before anything was reserved
	}
	// Not under the caller's context: a reservation the store made but
	// whose answer a cancellation cut off would stay reserved, never sent,
	// and every retry would attach to it. Once asked for, it is seen
	// through (the store bounds its own operations).
	rec, won, err := in.store.Reserve(req.bg, fresh, opts)
	switch {
	case err != nil:
		// Fail closed: without a reservation nothing may run.
		in.log.Error("store refused the reservation", "tool", call.Name, "request", req.Correlation, "err", err)
		in.obs.Decision(call.Name, pol.Class, "store_unavailable")
		in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInternalError,
			"mcp-idempotent: the record store is unavailable, so %s was not executed: %v", call.Name, err))
	case won:
		// A new execution is the ordinary path, logged at debug; info is
		// kept for the calls the proxy answers from the record, so that
		// logging at the default level costs nothing per ordinary call.
		if in.debug {
			in.log.Debug("new execution", "execution", rec.ID, "tool", call.Name, "class", pol.Class,
				"fingerprint", fp[:12], "request", req.Correlation)
		}
		in.obs.Decision(call.Name, pol.Class, "new")
		if rec.State == record.Dispatched {
			// Reserved and dispatched in one step (opts.Dispatch).
			in.journalizeAccepted(req, rec)
			in.sendClaimed(ctx, rec, req, rec, record.Change{To: record.Dispatched}, nil)
			return
		}
		in.journalize(req, rec, record.Change{To: record.Accepted})
		in.dispatch(ctx, rec, req, "")
	case rec.Fingerprint != fp && !in.sameBeforeTasksExtension(rec, req, args):
		// Only a client key can match a record of another action: the
		// IETF Idempotency-Key draft's 422. Never executed.
		in.log.Info("client key reused for another action; refused", "execution", rec.ID, "tool", call.Name, "request", req.Correlation)
		in.obs.Decision(call.Name, pol.Class, "key_refused")
		in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInvalidParams,
			"mcp-idempotent: idempotency key %q was already used for a different call (execution %s of %s); %s, so this call was not executed: use a new key for a new action",
			call.Key, rec.ID, rec.Tool, keyDifference(rec.Tool, call.Name)))
	default:
		// One line for each decision; an unknown outcome's is unknown's.
		switch {
		case rec.State == record.Unknown:
			in.unknown(ctx, rec, req)
		case rec.State.Settled():
			if in.info {
				in.log.Info("replayed an execution's answer", "execution", rec.ID, "state", rec.State,
					"tool", call.Name, "fingerprint", fp[:12], "request", req.Correlation)
			}
			in.obs.Decision(call.Name, pol.Class, "replayed")
			in.answer(ctx, req, rec, replayed)
		default:
			if in.info {
				in.log.Info("attached to an execution under way", "execution", rec.ID, "state", rec.State,
					"attached", rec.Attached, "tool", call.Name, "fingerprint", fp[:12], "request", req.Correlation)
			}
			in.obs.Decision(call.Name, pol.Class, "attached")
			go in.attach(ctx, rec, req)
		}
	}
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
	fp, err := in.hasher.Sum(fingerprint.Action{Actor: actor, Scope: scope, Upstream: req.UpstreamID,
		Tool: call.Name, Arguments: args, Extra: extra(&c)})
	return err == nil && fp == rec.Fingerprint
}

// keyDifference says how a call reusing a client key differs from the
// key's first.
func keyDifference(first, tool string) string {
	if first != tool {
		return "it names another tool"
	}
	return "the arguments differ"
}

// deadline returns when a call arriving at now stops beginning waits: the
// retry rule's deadline (policy.DefaultDeadline when it sets none), or
// the client's, if that is sooner. Without a retry rule the proxy makes
// no waits of its own, and the client's deadline, checked by
// mcp.ParseToolCall, has nothing to bound.
func deadline(now time.Time, rule *policy.RetryRule, client time.Duration) time.Time {
	d := policy.DefaultDeadline
	if rule != nil && rule.Deadline > 0 {
		d = rule.Deadline
	}
	if client > 0 {
		d = min(d, client)
	}
	return now.Add(d)
}

// matchScope returns the actor and the scope that go into the
// fingerprint: a client key is matched within its actor across sessions,
// and a global tool across actors.
func matchScope(req *Request) (actor, scope string) {
	actor = req.Actor
	switch {
	case req.Call.Key != "":
		scope = string(policy.ScopeKey)
	case req.Policy.Scope == policy.ScopeActor:
		scope = string(policy.ScopeActor)
	case req.Policy.Scope == policy.ScopeGlobal:
		scope = string(policy.ScopeGlobal)
	default:
		scope = req.Scope
	}
	if req.Policy.Scope == policy.ScopeGlobal {
		actor = ""
	}
	return actor, scope
}

// unknown answers a call that matched an execution whose outcome is
// unknown, as the tool's on_unknown says.
func (in *Interceptor) unknown(ctx context.Context, rec *record.Record, req *Request) {
	switch {
	case req.Policy.OnUnknown == policy.Retry && !redispatched(rec):
		in.log.Info("outcome unknown; re-dispatching under the same execution id", "execution", rec.ID, "request", req.Correlation)
		in.obs.Decision(rec.Tool, req.Policy.Class, "redispatched")
		in.dispatch(ctx, rec, req, "re-dispatch: on_unknown retry")
	case req.Policy.OnUnknown == policy.Recover && req.Policy.Recover != nil:
		// Asked whatever the attempts: a status that says done settles
		// even an execution already sent again (recover re-sends at most
		// once).
		in.obs.Decision(rec.Tool, req.Policy.Class, "recovered")
		in.work.Add(1)
		go func() {
			defer in.work.Done()
			in.recover(ctx, rec, req)
		}()
	default:
		in.log.Info("answered outcome unknown", "execution", rec.ID, "request", req.Correlation)
		in.obs.Decision(rec.Tool, req.Policy.Class, "unknown")
		in.reply(ctx, req, Answer{Result: unknownResult(rec)}, nil)
	}
}

// redispatched reports whether rec was sent again after an unknown
// outcome already: on_unknown re-sends an execution once. Its retry
// rule's re-sends of transient answers are not that, and do not count.
func redispatched(rec *record.Record) bool {
	for i := 1; i < len(rec.History); i++ {
		if rec.History[i].State == record.Dispatched && rec.History[i-1].State == record.Unknown {
			return true
		}
	}
	return false
}

// recover asks the upstream's status tool whether an execution whose
// outcome is unknown took effect. Done: the execution completes with the
// status result. Not done: it is re-dispatched, if it has not been
// already. No clear answer: it stays unknown, and so does the caller's
// answer.
func (in *Interceptor) recover(ctx context.Context, rec *record.Record, req *Request) {
	rule := req.Policy.Recover
	status, err := in.status(rec, req)
	bg := req.bg
	switch {
	case err != nil:
		in.log.Warn("status check gave no answer; the outcome stays unknown", "execution", rec.ID, "status_tool", rule.Tool, "err", err)
		in.reply(ctx, req, Answer{Result: unknownResult(rec)}, nil)
	case statusDone(status, rule):
		in.log.Info("status check says done; completing the execution with its answer", "execution", rec.ID, "status_tool", rule.Tool)
		done := record.Change{To: record.Completed, From: record.Unknown, Result: status, Note: "recovered: " + rule.Tool + " says the action is done"}
		settled, err := in.change(bg, req, rec.ID, done)
		if err != nil {
			// Another caller settled it first: answer from the record.
			in.attach(ctx, rec, req)
			return
		}
		in.answer(ctx, req, settled, resumed)
	case statusNotDone(status, rule) && !redispatched(rec):
		in.log.Info("status check says not done; re-dispatching under the same execution id", "execution", rec.ID, "status_tool", rule.Tool)
		in.dispatch(ctx, rec, req, "re-dispatch: "+rule.Tool+" says the action is not done")
	case statusNotDone(status, rule):
		in.log.Info("status check says not done, but the execution was sent again once already; the outcome stays unknown", "execution", rec.ID, "status_tool", rule.Tool)
		in.reply(ctx, req, Answer{Result: unknownResult(rec)}, nil)
	default:
		// Neither: the action may be under way (a job still running) or
		// the result does not say. Sending it again could do it twice.
		in.log.Info("status check says neither done nor not done; the outcome stays unknown", "execution", rec.ID, "status_tool", rule.Tool)
		in.reply(ctx, req, Answer{Result: unknownResult(rec)}, nil)
	}
}

// status calls the recover rule's status tool and waits for its result.
func (in *Interceptor) status(rec *record.Record, req *Request) (json.RawMessage, error) {
	rule := req.Policy.Recover
	args := bytes.ReplaceAll(rule.Arguments, []byte("{{execution_id}}"), []byte(rec.ID))
	if len(args) == 0 {
		args = []byte("{}")
	}
	name, _ := json.Marshal(rule.Tool)
	params := []byte(`{"name":` + string(name) + `,"arguments":` + string(args) + `}`)
	type outcome struct {
		result json.RawMessage
		err    error
	}
	ch := make(chan outcome, 1)
	req.Upstream.Send(req.bg, "tools/call", params, func(result json.RawMessage, err error) { ch <- outcome{result, err} })
	// Bounded by the call's deadline and by the attach window, whichever
	// ends first: a status tool that never answers leaves the outcome
	// unknown, not the caller waiting longer than on the execution itself.
	wait := req.Policy.AttachWindow
	if !req.deadline.IsZero() {
		wait = min(wait, req.deadline.Sub(in.now()))
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var o outcome
	select {
	case o = <-ch:
	case <-timer.C:
		return nil, fmt.Errorf("%s did not answer within %v", rule.Tool, wait.Round(time.Millisecond))
	}
	if o.err != nil {
		return nil, o.err
	}
	var r struct {
		IsError bool `json:"isError"`
	}
	if json.Unmarshal(o.result, &r) != nil || r.IsError {
		return nil, fmt.Errorf("%s answered with an error result", rule.Tool)
	}
	return o.result, nil
}

// Default status-check reading: structuredContent.status in the first
// values means done, in the second that the action never happened.
var (
	defaultDonePath      = "status"
	defaultDoneValues    = []string{"done", "completed", "succeeded", "success"}
	defaultNotDoneValues = []string{"not_found", "not_started", "failed"}
)

// statusDone reports whether a status tool's result says the action is
// done.
func statusDone(result json.RawMessage, rule *policy.RecoverRule) bool {
	values := rule.DoneValues
	if len(values) == 0 {
		values = defaultDoneValues
	}
	return structuredIn(result, cmp.Or(rule.DonePath, defaultDonePath), values)
}

// statusNotDone reports whether a status tool's result says the action
// never happened.
func statusNotDone(result json.RawMessage, rule *policy.RecoverRule) bool {
	values := rule.NotDoneValues
	if len(values) == 0 {
		values = defaultNotDoneValues
	}
	return structuredIn(result, cmp.Or(rule.NotDonePath, rule.DonePath, defaultDonePath), values)
}

// dispatch sends an execution upstream: a won reservation, or a
// re-dispatch of an unknown one under the same id (note says why). The
// execution runs on its own from here, detached from the caller that
// started it: a dispatched side effect is never dropped because its caller
// left.
func (in *Interceptor) dispatch(ctx context.Context, rec *record.Record, req *Request, note string) {
	a := in.accountOf(req)
	if a == nil {
		in.dispatchNow(ctx, rec, req, note, nil)
		return
	}
	// A first attempt waits for room in the account's allowance, up to
	// the call's deadline, rather than hammering the account.
	// The wait counts as work under way, so that Wait does not return
	// while an execution waits for its account.
	in.work.Add(1)
	in.admit(ctx, a, req.deadline, sessionEnded(ctx), func() {
		defer in.work.Done()
		in.dispatchNow(ctx, rec, req, note, a)
	}, func(r refusal) {
		defer in.work.Done()
		bg := req.bg
		msg := r.message(a.name)
		if r.Err != nil {
			in.log.Error("the account's allowance could not be read; not sending", "execution", rec.ID, "account", a.name, "err", r.Err)
		}
		if rec.State == record.Unknown {
			// A re-dispatch not sent: the first send may still have run.
			result, _ := withNote(unknownResult(rec), nil, "not sent again: "+msg)
			in.reply(ctx, req, Answer{Result: result}, nil)
			return
		}
		in.settle(bg, req, rec.ID, record.Change{To: record.Failed, Note: msg})
		in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInternalError,
			"mcp-idempotent: %s: %s was not sent (nothing ran; calling again later runs it)", msg, rec.Tool))
	})
}

// dispatchNow is dispatch once the account (a, or nil) has let it go.
func (in *Interceptor) dispatchNow(ctx context.Context, rec *record.Record, req *Request, note string, a *account) {
	bg := req.bg
	// Persist before send: once bytes may have left, the record says so.
	claim := record.Change{To: record.Dispatched, Note: note}
	if rec.State == record.Unknown {
		// A claim: of two callers re-dispatching it, one wins.
		claim.From = record.Unknown
		claim.Owner, claim.LeaseUntil = in.owner, in.now().Add(in.lease)
	}
	claimed, err := in.store.Update(bg, rec.ID, claim)
	if err != nil {
		a.release()
		if errors.Is(err, record.ErrConflict) {
			// Another caller re-dispatched it first, or another process
			// settled it meanwhile (this one's lease lapsed while it
			// waited for its account, and the record was taken over as
			// never sent): the caller gets what the record comes to.
			go in.attach(ctx, rec, req)
			return
		}
		in.log.Error("recording dispatch; not sending", "execution", rec.ID, "err", err)
		settled := in.settle(bg, req, rec.ID, record.Change{To: record.Failed, Note: "store refused the dispatch: " + err.Error()})
		if settled == nil {
			settled = rec
		}
		in.answer(ctx, req, settled, live)
		return
	}
	in.sendClaimed(ctx, rec, req, claimed, claim, a)
}

// sendClaimed sends an execution whose dispatch the store has recorded
// (claimed, by the change claim) and marks it so: rec is the record as
// the call found it.
func (in *Interceptor) sendClaimed(ctx context.Context, rec *record.Record, req *Request, claimed *record.Record, claim record.Change, a *account) {
	if in.debug {
		// Guarded like settle's: the arguments cost allocations even
		// when debug is off.
		in.log.Debug("transition", "execution", rec.ID, "state", record.Dispatched, "note", claim.Note)
	}
	in.obs.Transition(rec.Tool, record.Dispatched)
	in.journalize(req, claimed, claim)
	m := live
	if rec.State == record.Unknown {
		m = resumed
	}
	in.work.Add(1)
	in.send(ctx, rec, req, m, 1, a)
}

// send sends attempt n of a dispatched execution and settles it from the
// answer, or, where the tool's retry rule says the answer is transient and
// sending again is safe, sends it again after a backoff. The caller of send
// holds one count of in.work, which the settling answer releases.
func (in *Interceptor) send(ctx context.Context, rec *record.Record, req *Request, m marking, n int, a *account) {
	bg := req.bg
	params, meta := req.Call.Params, req.Call.MetaAsSent
	if n > 1 {
		params, meta = withoutProgressToken(params, meta)
	}
	if req.Policy.ForwardKey {
		// The execution id goes upstream, so a server that honours
		// idempotency keys can dedupe a re-dispatch itself.
		var buf [96]byte
		member := append(append(append(buf[:0], `"`+mcp.MetaExecutionID+`":"`...), rec.ID...), '"')
		// mcp.ParseToolCall found the params' _meta (and their name: they are
		// not empty), so they need not be read again.
		params = insertMeta(params, meta, false, member)
	}
	var sent time.Time
	if in.timed {
		sent = in.now()
	}
	req.Upstream.Send(bg, "tools/call", params, func(result json.RawMessage, err error) {
		a.release()
		if in.timed {
			in.obs.Upstream(rec.Tool, in.now().Sub(sent))
		}
		r := in.again(req, n, result, err)
		if r.ok && a != nil && !a.budget.AllowRetry() {
			in.log.Warn("retry budget exhausted; answering with the last result", "execution", rec.ID, "account", a.name)
			r = resend{stop: fmt.Sprintf("the retry budget of account %s is exhausted, so this result was not retried", a.name)}
		}
		if !r.ok {
			if r.stop != "" {
				result, err = withNote(result, err, r.stop)
			}
			in.finish(ctx, rec, req, m, n, result, err)
			return
		}
		in.log.Info("sending again", "execution", rec.ID, "tool", rec.Tool, "attempt", n+1, "after", r.wait, "why", r.why)
		in.obs.Attempt(rec.Tool, n+1, r.why, r.wait)
		// Not sent again: the caller gets the last answer, with why.
		notAgain := func(why string) {
			in.log.Info("not sending again", "execution", rec.ID, "tool", rec.Tool, "attempt", n+1, "why", why)
			result, err := withNote(result, err, "not retried: "+why)
			in.finish(ctx, rec, req, m, n, result, err)
		}
		stop := sessionEnded(ctx)
		in.wake(ctx, r.wait, stop, func() {
			in.admit(ctx, a, req.deadline, stop, func() {
				// The same execution, sent again: recorded as another
				// attempt before the bytes go.
				again := record.Change{To: record.Dispatched, From: record.Dispatched, Note: fmt.Sprintf("attempt %d: %s", n+1, r.why)}
				cur, uerr := in.store.Update(bg, rec.ID, again)
				if uerr != nil {
					a.release()
					in.log.Error("recording another attempt; not sending", "execution", rec.ID, "err", uerr)
					in.finish(ctx, rec, req, m, n, result, err)
					return
				}
				in.obs.Transition(rec.Tool, record.Dispatched)
				in.journalize(req, cur, again)
				in.send(ctx, rec, req, m, n+1, a)
			}, func(ref refusal) { notAgain(ref.message(a.name)) })
		}, func(error) { notAgain("the session ended during the backoff") })
	})
}

// finish settles an execution from its last answer and answers its
// caller, releasing the work count that send's caller took.
func (in *Interceptor) finish(ctx context.Context, rec *record.Record, req *Request, m marking, n int, result json.RawMessage, err error) {
	defer in.work.Done()
	c := outcome(result, err)
	if f, _ := failure(err); c.To == record.Failed && retry.StatusMayHaveRun(f.HTTPStatus) {
		// The status may have come after the tool ran (a gateway gave up
		// waiting, the server failed mid-call): nobody saw the outcome.
		c = record.Change{To: record.Unknown, Note: fmt.Sprintf("no answer from the upstream: HTTP %d", f.HTTPStatus)}
	}
	if malformed(result, err) {
		// A bug upstream, not a passing failure: said loudly.
		in.log.Error("the upstream sent a malformed answer", "execution", rec.ID, "tool", rec.Tool, "err", c.Note)
	}
	if resent := n > 1 || m == resumed; resent && err == nil && c.To == record.Completed {
		if _, ok := firstMatch(result, req.Policy.AlreadyDone); ok {
			// A re-send found the effect in place (a delete of something
			// gone): the first send did it, so the execution is done.
			in.log.Info("a re-send found the effect already done; completing as a success", "execution", rec.ID, "tool", rec.Tool)
			c.Result = alreadyDoneResult(rec, result)
			c.Note = "already done: the re-send found the effect in place"
		}
	}
	if err == nil && req.Policy.Retry != nil && c.To == record.Completed && c.Note == "" {
		if match, ok := transient(result, req.Policy.Retry); ok && safeToResend(req.Policy, match) {
			// Still transient after the last attempt: the effect did not
			// happen, so it is not replayed (Stripe does not cache a 429
			// either); the caller sees this last result.
			c = record.Change{To: record.Failed, Result: result, Note: "still transient after the last attempt"}
		}
	}
	settled, err := in.change(req.bg, req, rec.ID, c)
	if errors.Is(err, record.ErrConflict) {
		// Settled otherwise while this send ran: this process's lease
		// lapsed and another took the execution over. The caller gets
		// what the record says, as any caller now would.
		in.log.Warn("the store holds another outcome for this execution; answering from it", "execution", rec.ID, "state", c.To, "err", err)
		in.answerFromRecord(ctx, req, rec.ID)
		return
	}
	if err != nil {
		in.log.Error("recording a transition", "execution", rec.ID, "state", c.To, "err", err)
		in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInternalError,
			"mcp-idempotent: execution %s of %s ran, but its outcome could not be recorded yet; calling again attaches to it and gets the outcome once it is",
			rec.ID, rec.Tool))
		// The outcome is known, and the execution must not stay in flight
		// (its lease renewed by this process) while callers wait on it.
		in.work.Add(1)
		go in.recordLater(req, rec.ID, c)
		return
	}
	in.answer(ctx, req, settled, m)
}

// answerFromRecord answers req's caller with what the store holds for
// execution id: its stored outcome once settled, after waiting for it
// while it is in flight.
func (in *Interceptor) answerFromRecord(ctx context.Context, req *Request, id string) {
	cur, err := in.store.Get(req.bg, id)
	switch {
	case err != nil:
		in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInternalError,
			"mcp-idempotent: execution %s ran, and its record could not be read: %v; calling again attaches to it", id, err))
	case cur.State.Settled():
		in.answer(ctx, req, cur, replayed)
	default:
		go in.attach(ctx, cur, req)
	}
}

// recordLater keeps trying to record c, the outcome of execution id that
// the store refused, waiting longer each time (up to recordRetryMax), until
// the store takes it or has another answer for the record (a conflict: it
// was settled otherwise). Callers attached to the execution are then woken
// with it, and calls after it replay it.
func (in *Interceptor) recordLater(req *Request, id string, c record.Change) {
	defer in.work.Done()
	wait := recordRetryMin
	for {
		time.Sleep(wait)
		_, err := in.change(req.bg, req, id, c)
		switch {
		case err == nil:
			in.log.Info("recorded an outcome the store had refused", "execution", id, "state", c.To)
			return
		case errors.Is(err, record.ErrConflict), errors.Is(err, record.ErrNotFound):
			in.log.Error("an outcome the store had refused was not recorded", "execution", id, "state", c.To, "err", err)
			return
		}
		wait = min(2*wait, recordRetryMax)
	}
}

// The waits of recordLater.
const (
	recordRetryMin = 100 * time.Millisecond
	recordRetryMax = 5 * time.Second
)

// A resend is again's decision on one attempt's answer.
type resend struct {
	ok   bool          // send again
	wait time.Duration // after this wait
	why  string        // why it is sent again, for the log and the record
	// stop, when not ok, is why an answer that could have been retried
	// was not, where the caller should be told (a deadline); "" when the
	// answer is simply final.
	stop string
}

// again decides whether attempt n's answer is sent again, and after how
// long: only under a retry rule, only for a failure the retry package
// classes as retry (never sent, an HTTP status of an overloaded or
// restarting upstream, or a result the rule marks transient), only where
// sending again is safe, within the rule's attempts, and only if the wait
// ends before the call's deadline.
func (in *Interceptor) again(req *Request, n int, result json.RawMessage, err error) resend {
	rule := req.Policy.Retry
	if rule == nil {
		return resend{}
	}
	acct := in.accountOf(req)
	var (
		why        string
		retryAfter time.Duration
	)
	switch f, retryAfterText := failure(err); {
	case err == nil:
		match, ok := transient(result, rule)
		if !ok {
			if acct != nil {
				acct.budget.OnSuccess()
			}
			return resend{}
		}
		if acct != nil {
			acct.budget.OnFailure()
		}
		if !safeToResend(req.Policy, match) {
			return resend{}
		}
		why = "transient result"
		if rule.RetryAfterPath != "" {
			if secs, ok := structuredNumber(result, rule.RetryAfterPath); ok && secs > 0 {
				retryAfter = retry.Seconds(secs)
			}
		}
	case retry.Classify(f) != retry.Retry:
		return resend{}
	case f.HTTPStatus != 0:
		// The account is throttling or unreachable: as gRPC counts only
		// retryable statuses against its budget, so does this.
		if acct != nil {
			acct.budget.OnFailure()
		}
		// The status got to the proxy, so the request may have reached
		// the tool: it is sent again only where that is safe, or where the
		// status proves nothing ran (429; see retry.StatusNotRun).
		if !retry.SafeToResend(retry.Safety{
			ToolClass: string(req.Policy.Class),
			Sent:      !retry.StatusNotRun(f.HTTPStatus),
			// The upstream dedupes on the execution id sent: there is one
			// only for a recorded call whose policy forwards it.
			OnUnknownRetry: req.Policy.OnUnknown == policy.Retry && req.Policy.ForwardKey && !req.unrecorded,
		}) {
			return resend{}
		}
		why = fmt.Sprintf("HTTP %d", f.HTTPStatus)
		if d, ok := retry.ParseRetryAfter(retryAfterText, in.now()); ok {
			retryAfter = d
		}
	default:
		why = "not sent: " + err.Error()
	}
	now := in.now()
	b := retry.Backoff{Base: rule.Base, Cap: rule.Cap, MaxAttempts: rule.MaxAttempts}
	wait, ok := b.Next(n-1, retryAfter, now, time.Time{})
	if !ok {
		return resend{}
	}
	// A wait that would pass the caller's deadline fails now instead
	// (DESIGN section 7): the caller gets the last real answer at once,
	// not a timeout later. A wait ending exactly at the deadline would
	// leave the attempt no time, so it is refused too.
	if !req.deadline.IsZero() && !now.Add(wait).Before(req.deadline) {
		return resend{stop: fmt.Sprintf(
			"not retried: waiting %v for attempt %d (%s) would pass the call's deadline, %v from now",
			wait.Round(time.Millisecond), n+1, why, req.deadline.Sub(now).Round(time.Millisecond))}
	}
	return resend{ok: true, wait: wait, why: why}
}

// failure reads an attempt's error as the retry classifier sees it, and
// returns the Retry-After value an HTTP upstream sent with it, if any.
//
// The status is the one the proxy's own transport got instead of an
// answer (a *jsonrpc.NoAnswer), or one an upstream reports in a JSON-RPC
// internal error (-32603) whose data holds "http_status" and
// "retry_after", as a proxy in front of an HTTP server answers (this one
// included): the upstream's word about its own vendor, which a retry rule
// may act on. A server's own error of another code is the server refusing
// the request, whatever its data says. Nothing in an upstream's error can
// say that the request was not sent.
func failure(err error) (retry.Failure, string) {
	f := retry.Failure{Err: err}
	if na, ok := errors.AsType[*jsonrpc.NoAnswer](err); ok && na.Refused() {
		f.HTTPStatus, f.RPCCode = na.Status, jsonrpc.CodeInternalError
		return f, na.RetryAfter
	}
	rpcErr, ok := errors.AsType[*jsonrpc.Error](err)
	if !ok {
		return f, ""
	}
	f.RPCCode = rpcErr.Code
	if rpcErr.Code != jsonrpc.CodeInternalError || len(rpcErr.Data) == 0 || rpcErr.Data[0] != '{' {
		return f, ""
	}
	var data struct {
		HTTPStatus int    `json:"http_status"`
		RetryAfter string `json:"retry_after"`
	}
	if json.Unmarshal(rpcErr.Data, &data) != nil {
		return f, ""
	}
	f.HTTPStatus = data.HTTPStatus
	return f, data.RetryAfter
}

// withNote adds the proxy's note to an attempt's answer, which is still
// the caller's answer: a text item added to a tool result, the note added
// to a JSON-RPC error's message or to another error's text.
func withNote(result json.RawMessage, err error, note string) (json.RawMessage, error) {
	note = "mcp-idempotent: " + note + "."
	if err == nil {
		return appendText(result, note), nil
	}
	if rpcErr, ok := rpcError(err); ok {
		e := *rpcErr
		e.Message += " (" + note + ")"
		e.Raw = nil // changed: no longer the object as it came
		return result, &e
	}
	return result, fmt.Errorf("%w (%s)", err, note)
}

// rpcError returns the JSON-RPC error an attempt's error stands for in the
// caller's answer: the upstream's own error, or the one that stands for an
// HTTP status the transport got instead of the answer. A request that was
// not sent, or got no answer at all, has none.
func rpcError(err error) (*jsonrpc.Error, bool) {
	if retry.IsNotSent(err) {
		return nil, false
	}
	if na, ok := errors.AsType[*jsonrpc.NoAnswer](err); ok {
		if na.Refused() {
			return na.Object(), true
		}
		return nil, false
	}
	return errors.AsType[*jsonrpc.Error](err)
}

// appendText returns a copy of a tool result with one more text content
// item; a result that cannot be read comes back as it was.
func appendText(result json.RawMessage, text string) json.RawMessage {
	var obj map[string]json.RawMessage
	if json.Unmarshal(result, &obj) != nil || obj == nil {
		return result
	}
	var content []json.RawMessage
	_ = json.Unmarshal(obj["content"], &content)
	item, _ := json.Marshal(map[string]string{"type": "text", "text": text})
	obj["content"], _ = json.Marshal(append(content, item))
	out, err := json.Marshal(obj)
	if err != nil {
		return result
	}
	return out
}

// safeToResend reports whether a transient result of this tool may be
// sent again: a read-only or idempotent tool, or a result the policy
// declares means the upstream did nothing.
func safeToResend(p *policy.Policy, m policy.ResultMatch) bool {
	return retry.SafeToResend(retry.Safety{ToolClass: string(p.Class), Sent: true, TransientSafe: m.SafeToResend})
}

// transient returns the rule's first transient match for a tool result.
func transient(result json.RawMessage, rule *policy.RetryRule) (policy.ResultMatch, bool) {
	return firstMatch(result, rule.Transient)
}

// firstMatch returns the first of matches that a tool result meets.
func firstMatch(result json.RawMessage, matches []policy.ResultMatch) (policy.ResultMatch, bool) {
	if len(matches) == 0 {
		return policy.ResultMatch{}, false
	}
	text := ""
	if texts := textContents(result); len(texts) > 0 {
		text = strings.Join(texts, "\n") + "\n"
	}
	for _, m := range matches {
		if m.Text != nil && m.Text.MatchString(text) {
			return m, true
		}
		if m.Path != "" && structuredIn(result, m.Path, m.In) {
			return m, true
		}
	}
	return policy.ResultMatch{}, false
}

// structuredValue returns structuredContent at a dot path, names matched
// exactly. result is a valid JSON object.
func structuredValue(result json.RawMessage, path string) (json.RawMessage, bool) {
	v := jsonrpc.Member(result, "structuredContent")
	for name := range strings.SplitSeq(path, ".") {
		if v = jsonrpc.Member(v, name); v == nil {
			return nil, false
		}
	}
	return v, v != nil
}

// structuredIn reports whether structuredContent at path is one of values
// (JSON text; a string also matches its unquoted form).
func structuredIn(result json.RawMessage, path string, values []string) bool {
	v, ok := structuredValue(result, path)
	if !ok {
		return false
	}
	text := string(bytes.TrimSpace(v))
	str, isString := jsonrpc.StringValue(v)
	for _, want := range values {
		if text == want || isString && str == want {
			return true
		}
	}
	return false
}

func structuredNumber(result json.RawMessage, path string) (float64, bool) {
	v, ok := structuredValue(result, path)
	if !ok {
		return 0, false
	}
	var f float64
	return f, json.Unmarshal(v, &f) == nil
}

// outcome maps an upstream's answer to the change that settles the record.
func outcome(result json.RawMessage, err error) record.Change {
	if err == nil && len(result) > 0 && result[0] == '{' {
		// The common case, decided before the error cases below, whose
		// targets cost an allocation each.
		if inputRequired(result) {
			return record.Change{To: record.Failed, Result: result, Note: "input_required: not a completion"}
		}
		if o := upstreamOutcome(result); o == "unknown" || o == "in_progress" {
			// The upstream is another mcp-idempotent that does not know
			// the outcome yet: neither does this one. Its answer is kept,
			// for the caller it came for.
			return record.Change{To: record.Unknown, Result: result, Note: "the upstream, another mcp-idempotent, answered " + o}
		}
		return record.Change{To: record.Completed, Result: result}
	}
	var malformed *retry.MalformedError
	if err == nil {
		err = retry.Malformed("a tools/call result that is not an object", result)
	}
	switch {
	case errors.As(err, &malformed):
		// An answer came, so the call was received and may have run, but
		// it does not say how it went: the outcome is not known, and
		// calling again must not run it again. The note, which the
		// store and the journal keep, leaves out the answer's bytes, as
		// it leaves out an upstream error's message: what a tool answers
		// is kept only where the policy allows.
		return record.Change{To: record.Unknown, Note: fmt.Sprintf("malformed answer from the upstream: %s (%d bytes)", malformed.What, malformed.Size)}
	case retry.IsNotSent(err):
		return record.Change{To: record.Failed, Note: err.Error()}
	}
	if rpcErr, ok := rpcError(err); ok {
		b := rpcErr.Object() // the upstream's error, as it came
		return record.Change{To: record.Failed, Error: b, Note: fmt.Sprintf("upstream error %d", rpcErr.Code)}
	}
	return record.Change{To: record.Unknown, Note: err.Error()}
}

// malformed reports whether an attempt's answer is one outcome reads as
// malformed: a bug upstream.
func malformed(result json.RawMessage, err error) bool {
	if err == nil {
		return len(result) == 0 || result[0] != '{'
	}
	return errors.As(err, new(*retry.MalformedError))
}

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
	if c.To != record.Delivered {
		defer in.holdJournal(id)()
	}
	rec, err := in.store.Update(ctx, id, c)
	if err != nil {
		return nil, err
	}
	in.obs.Transition(rec.Tool, c.To)
	in.journalize(req, rec, c)
	if in.debug {
		in.log.Debug("transition", "execution", id, "state", c.To, "note", c.Note)
	}
	return rec, nil
}

// attach waits, on its own goroutine, for an execution under way that
// req's caller joined, then answers the caller.
func (in *Interceptor) attach(ctx context.Context, rec *record.Record, req *Request) {
	wctx, cancel := context.WithTimeout(ctx, req.Policy.AttachWindow)
	settled, err := in.wait(wctx, rec.ID)
	cancel()
	switch {
	case errors.Is(ctx.Err(), ErrSessionEnded):
		// The caller did not leave: its session ended while the
		// execution went on elsewhere. It is told so, if its transport
		// still takes an answer; or, if the execution settled meanwhile
		// (the session's end may be what settled it), told how.
		cur, gerr := in.store.Get(req.bg, rec.ID)
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
		in.obs.Decision(rec.Tool, req.Policy.Class, "in_progress")
		in.log.Info("the session ended; told the caller the execution is still in progress", "execution", rec.ID, "request", req.Correlation)
		if err := req.Reply.Reply(Answer{Result: inProgressResult(cur, in.now().Sub(cur.At(record.Accepted)).Round(time.Millisecond))}); err != nil {
			in.log.Warn("writing the answer failed", "request", req.Correlation, "err", err)
		}
	case ctx.Err() != nil:
		in.log.Info("caller cancelled; detached, the execution goes on", "execution", rec.ID, "request", req.Correlation)
	case errors.Is(err, context.DeadlineExceeded):
		cur, gerr := in.store.Get(ctx, rec.ID)
		if gerr != nil {
			cur = rec
		}
		in.obs.Decision(rec.Tool, req.Policy.Class, "in_progress")
		in.log.Info("attach window passed; told the caller it is still in progress",
			"execution", rec.ID, "window", req.Policy.AttachWindow, "request", req.Correlation)
		in.reply(ctx, req, Answer{Result: inProgressResult(cur, req.Policy.AttachWindow)}, nil)
	case err != nil:
		in.log.Error("waiting for the execution", "execution", rec.ID, "err", err)
		in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInternalError,
			"mcp-idempotent: lost track of execution %s of %s: %v", rec.ID, rec.Tool, err))
	default:
		in.answer(ctx, req, settled, replayed)
	}
}

// wait waits for execution id to settle, until ctx ends. A failure of the
// store (a connection dropped, a server restarting) is not the waiter's
// answer: it waits on, trying the store again after a backoff, so that
// the caller gets the execution's answer, or is told it is still in
// progress, rather than an error that says neither.
func (in *Interceptor) wait(ctx context.Context, id string) (*record.Record, error) {
	backoff := recordRetryMin
	for {
		settled, err := in.store.Wait(ctx, id)
		if err == nil || ctx.Err() != nil || errors.Is(err, record.ErrNotFound) {
			return settled, err
		}
		in.log.Warn("waiting for an execution: the store failed; trying again", "execution", id, "in", backoff, "err", err)
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

// ErrSessionEnded is the error a call's context ends with when the session
// the call came in ends before the call is answered. Unlike a caller's
// cancellation, it does not stop the answer: the client may still read.
// A call not yet reserved is told it did not run (NotRunAtSessionEnd), one
// waiting for an execution under way (in another process) that it is
// still in progress, and any other gets its answer when it comes.
var ErrSessionEnded = errors.New("the session ended")

// NotRunAtSessionEnd is the answer to a call to tool whose session ended
// before it was reserved: nothing ran.
func NotRunAtSessionEnd(tool string) *jsonrpc.Error {
	return jsonrpc.Errorf(jsonrpc.CodeInternalError, "mcp-idempotent: the session ended before %s was executed; it did not run", tool)
}

// How an answer is marked.
type marking int

const (
	// live: the first dispatch's answer, as the upstream gave it.
	live marking = iota
	// replayed: the stored answer of an execution the caller attached to.
	replayed
	// resumed: the answer of a re-dispatch or a status check of an
	// execution whose outcome was unknown: fresh, but of an execution that
	// began earlier, which _meta names.
	resumed
)

// answer writes a settled record's answer to one caller, marked as m says.
func (in *Interceptor) answer(ctx context.Context, req *Request, rec *record.Record, m marking) {
	switch rec.State {
	case record.Completed, record.Delivered:
		result := rec.Result
		switch m {
		case replayed:
			result = withMeta(result, replayMeta(rec))
		case resumed:
			result = withMeta(result, executionMember(rec))
		}
		in.reply(ctx, req, Answer{Result: result}, rec)
	case record.Failed:
		switch {
		case rec.Error != nil:
			in.reply(ctx, req, Answer{Error: rec.Error}, nil)
		case rec.Result != nil:
			// A result that is not a completion, such as input_required:
			// the caller needs it, and the next call runs anew.
			in.reply(ctx, req, Answer{Result: rec.Result}, nil)
		default:
			in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInternalError,
				"mcp-idempotent: execution %s of %s failed before it was sent (%s); nothing ran, and calling again runs it",
				rec.ID, rec.Tool, lastNote(rec)))
		}
	case record.Unknown:
		if m == live && rec.Result != nil {
			// The upstream's own word that it does not know (another
			// mcp-idempotent): for the caller it came for, as it came.
			in.reply(ctx, req, Answer{Result: rec.Result}, nil)
			return
		}
		in.log.Info("answered outcome unknown", "execution", rec.ID, "request", req.Correlation)
		in.reply(ctx, req, Answer{Result: unknownResult(rec)}, nil)
	default:
		in.log.Error("answer asked for an unsettled execution", "execution", rec.ID, "state", rec.State)
		in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInternalError, "mcp-idempotent: execution %s is %s", rec.ID, rec.State))
	}
}

// reply writes a to the caller unless it has cancelled, and marks rec
// delivered when the transport took a completed result.
func (in *Interceptor) reply(ctx context.Context, req *Request, a Answer, rec *record.Record) {
	if err := ctx.Err(); err != nil && !errors.Is(err, ErrSessionEnded) {
		return // cancelled first: the caller never sees this answer
	}
	if dr, ok := req.Reply.(DeliveryReplier); ok && rec != nil && dr.DeliversLater() {
		if err := dr.ReplyThen(a, func() { in.delivered(req, rec) }); err != nil {
			in.log.Warn("writing the answer failed", "request", req.Correlation, "err", err)
		}
		return
	}
	if err := req.Reply.Reply(a); err != nil {
		in.log.Warn("writing the answer failed", "request", req.Correlation, "err", err)
		return
	}
	if rec != nil {
		in.delivered(req, rec)
	}
}

// delivered records that the caller of req got rec's answer. Not the
// caller's context: the answer is out, so delivery must be recorded even
// if the caller cancels this instant.
func (in *Interceptor) delivered(req *Request, rec *record.Record) {
	// A caller attached to an execution this process settles may be woken
	// before the settling transition is journaled: its delivery is
	// journaled after that line, not before.
	if in.journal != nil {
		in.settling.wait(rec.ID)
	}
	switch rec.State {
	case record.Completed:
		// Conditional: of two callers handed the completed record at
		// once (its first caller and a replay), one records the delivery
		// and the other finds it done, so it is counted once; both have
		// their line in the journal.
		_, err := in.change(req.bg, req, rec.ID, record.Change{To: record.Delivered, From: record.Completed})
		switch {
		case errors.Is(err, record.ErrConflict):
			in.journalize(req, rec, record.Change{To: record.Delivered})
		case err != nil:
			in.log.Error("recording a transition", "execution", rec.ID, "state", record.Delivered, "err", err)
		}
	case record.Delivered:
		// Delivered to another caller before: nothing for the store to
		// record, but the journal has a line for each caller that took
		// the result.
		in.journalize(req, rec, record.Change{To: record.Delivered})
	}
}

func (in *Interceptor) replyError(req *Request, e *jsonrpc.Error) {
	b, _ := json.Marshal(e) // an *Error with no Data always marshals
	if err := req.Reply.Reply(Answer{Error: b}); err != nil {
		in.log.Warn("writing an error failed", "request", req.Correlation, "err", err)
	}
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
	continuation := c.InputResponses != nil || c.RequestState != nil
	if c.Task == nil && !c.TasksExtension && !continuation {
		return nil
	}
	m := make(map[string]json.RawMessage, 3)
	switch {
	case c.Task != nil:
		m["task"] = json.RawMessage("true")
	case c.TasksExtension:
		m["tasksExtension"] = json.RawMessage("true")
	}
	if continuation {
		m["inputResponses"] = c.InputResponses
		m["requestState"] = c.RequestState
	}
	return m
}

// upstreamOutcome returns the outcome an mcp-idempotent upstream put in a
// result's _meta (mcp.MetaOutcome: "unknown", "in_progress", "already_done"),
// or "" for a result that has none, which is most.
func upstreamOutcome(result json.RawMessage) string {
	if !bytes.Contains(result, []byte(mcp.MetaOutcome)) && !bytes.Contains(result, []byte(`\`)) {
		return ""
	}
	o, _ := jsonrpc.StringValue(jsonrpc.Member(jsonrpc.Member(result, "_meta"), mcp.MetaOutcome))
	return o
}

// inputRequired reports whether result, a valid JSON object, asks the
// client for more input (MCP 2026-07-28 multi-round requests) rather than
// completing. The member's name is matched exactly: a completion must not
// be taken for a question, and run again, because of a "ResultType".
func inputRequired(result json.RawMessage) bool {
	if !bytes.Contains(result, []byte("input_required")) && !bytes.Contains(result, []byte(`\u`)) {
		return false // the common case; an escape may spell the words otherwise
	}
	resultType, _ := jsonrpc.StringValue(jsonrpc.Member(result, "resultType"))
	return resultType == "input_required"
}

func lastNote(r *record.Record) string {
	for i := len(r.History) - 1; i >= 0; i-- {
		if r.History[i].Note != "" {
			return r.History[i].Note
		}
	}
	return "no reason recorded"
}

// executionMeta is the execution as a client sees it in _meta.
type executionMeta struct {
	ID       string               `json:"id"`
	State    record.State         `json:"state"`
	Tool     string               `json:"tool"`
	Times    map[string]time.Time `json:"times"`
	Attempts int                  `json:"attempts"`
	Attached int                  `json:"attached"`
	Upstream string               `json:"upstream,omitempty"`
}

func describe(r *record.Record) executionMeta {
	m := executionMeta{ID: r.ID, State: r.State, Tool: r.Tool, Times: make(map[string]time.Time, len(r.History)), Attempts: r.Attempts, Attached: r.Attached}
	for _, t := range r.History {
		m.Times[string(t.State)] = t.At
	}
	return m
}

// replayMeta returns the _meta members that mark a replay, as JSON
// members without the braces.
func replayMeta(r *record.Record) []byte {
	return appendExecution(append(make([]byte, 0, 320), `"`+mcp.MetaReplayed+`":true,"`+mcp.MetaExecution+`":`...), r)
}

// executionMember returns the _meta member that names r's execution.
func executionMember(r *record.Record) []byte {
	return appendExecution(append(make([]byte, 0, 300), `"`+mcp.MetaExecution+`":`...), r)
}

// appendExecution appends the JSON of describe(r), byte for byte what
// json.Marshal makes of it (TestAppendExecution), without reflection: it is
// on the path of every replay.
func appendExecution(b []byte, r *record.Record) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, r.ID)
	b = append(b, `,"state":`...)
	b = appendJSONString(b, string(r.State))
	b = append(b, `,"tool":`...)
	b = appendJSONString(b, r.Tool)
	b = append(b, `,"times":{`...)
	// The last time of each state, in the order of the names, as
	// json.Marshal writes a map.
	names := make([]string, 0, 8)
	for _, t := range r.History {
		if !slices.Contains(names, string(t.State)) {
			names = append(names, string(t.State))
		}
	}
	slices.Sort(names)
	for i, name := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, name)
		b = append(b, ':')
		at := r.At(record.State(name))
		if y := at.Year(); y < 0 || y > 9999 {
			// Outside what RFC 3339 can write, where json.Marshal
			// fails: no time rather than no answer.
			b = append(b, "null"...)
			continue
		}
		b = append(b, '"')
		b = at.AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	b = append(b, `},"attempts":`...)
	b = strconv.AppendInt(b, int64(r.Attempts), 10)
	b = append(b, `,"attached":`...)
	b = strconv.AppendInt(b, int64(r.Attached), 10)
	return append(b, '}') // describe leaves Upstream out
}

// appendJSONString appends s as json.Marshal writes a string: a string of
// plain printable ASCII between quotes as it is, anything else through
// json.Marshal (which escapes <, > and & too).
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// withMeta returns a copy of result with members (JSON members without
// braces) added to its _meta object, creating it if absent. The stored
// result is never modified, and the rest of it is kept byte for byte. A
// result that is not an object comes back unchanged.
func withMeta(result json.RawMessage, members []byte) json.RawMessage {
	var meta []byte
	empty := true
	if jsonrpc.EachMember(result, func(name, value []byte) bool {
		empty = false
		if string(name) == "_meta" {
			meta = value // the last one wins, as in JSON.parse
		}
		return true
	}) != nil {
		return result
	}
	return insertMeta(result, meta, empty, members)
}

// insertMeta is withMeta for an object whose _meta member the caller has
// found already: meta is its value, a slice of obj, or nil if it has none;
// empty says obj has no members at all. The result never holds a name
// twice: members of meta that members also names are dropped (a result
// that came through another mcp-idempotent carries its _meta), and a
// _meta that is not an object (null) is replaced.
func insertMeta(obj, meta json.RawMessage, empty bool, members []byte) json.RawMessage {
	if meta == nil {
		// Add a _meta member last.
		end := bytes.LastIndexByte(obj, '}')
		out := make([]byte, 0, len(obj)+len(members)+16)
		out = append(out, obj[:end]...)
		if !empty {
			out = append(out, ',')
		}
		out = append(append(append(out, `"_meta":{`...), members...), '}')
		return append(out, obj[end:]...)
	}
	// meta is a slice of obj, so its capacity locates it.
	start := cap(obj) - cap(meta)
	end := start + len(meta)
	out := make([]byte, 0, len(obj)+len(members)+16)
	out = append(out, obj[:start]...)
	switch {
	case meta[0] != '{':
		out = append(append(append(out, '{'), members...), '}')
	case !bytes.Contains(meta, []byte("mcp-idempotent")) && bytes.IndexByte(meta, '\\') < 0:
		// The common case: none of ours in it. Insert before its
		// closing brace, leaving the rest as it came.
		out = append(out, meta[:len(meta)-1]...)
		if len(bytes.TrimSpace(meta[1:len(meta)-1])) > 0 {
			out = append(out, ',')
		}
		out = append(append(out, members...), '}')
	default:
		out = appendWithout(out, meta, members)
	}
	return append(out, obj[end:]...)
}

// appendWithout appends the object meta less the members whose names
// members (a list of members, as inside braces) also has, with members
// last. The members kept are copied as they came, name and spacing.
func appendWithout(out, meta, members []byte) []byte {
	own := map[string]bool{}
	wrapped := append(append([]byte{'{'}, members...), '}')
	jsonrpc.EachMember(wrapped, func(name, _ []byte) bool { // our own text: well formed
		own[string(name)] = true
		return true
	})
	return appendDropping(out, meta, own, members)
}

// appendDropping appends the object meta less the members named in drop,
// copied as they came, and then members (a list of members, as inside
// braces, or none).
func appendDropping(out, meta []byte, drop map[string]bool, members []byte) []byte {
	out = append(out, '{')
	first := true
	// from is where the member being read starts in meta: after its '{'
	// or the comma before it. meta was checked by the caller's reader.
	from := 1
	jsonrpc.EachMember(meta, func(name, value []byte) bool {
		end := cap(meta) - cap(value) + len(value) // value is a slice of meta
		if !drop[string(name)] {
			if !first {
				out = append(out, ',')
			}
			first = false
			out = append(out, bytes.TrimLeft(meta[from:end], " \t\r\n")...)
		}
		from = end + bytes.IndexByte(meta[end:], ',') + 1 // past the comma; at the end, unused
		return true
	})
	if len(members) > 0 {
		if !first {
			out = append(out, ',')
		}
		out = append(out, members...)
	}
	return append(out, '}')
}

// withoutProgressToken returns params, whose _meta is meta (a slice of
// them, or nil), less _meta's progressToken, and the new _meta. A call the
// proxy sends again goes without it: the client has had the first
// attempt's progress, and MCP asks progress to increase, which a second
// attempt's would not.
func withoutProgressToken(params, meta json.RawMessage) (json.RawMessage, json.RawMessage) {
	if meta == nil || meta[0] != '{' || !bytes.Contains(meta, []byte("progressToken")) && bytes.IndexByte(meta, '\\') < 0 {
		return params, meta
	}
	start := cap(params) - cap(meta) // meta is a slice of params
	end := start + len(meta)
	out := append([]byte(nil), params[:start]...)
	out = appendDropping(out, meta, map[string]bool{"progressToken": true}, nil)
	newEnd := len(out)
	out = append(out, params[end:]...)
	return out, out[start:newEnd] // its capacity locates it in out, as insertMeta needs
}

// toolResult builds an isError CallToolResult that speaks for the proxy.
func toolResult(text, outcome string, r *record.Record) json.RawMessage {
	b, _ := json.Marshal(map[string]any{
		"content": []map[string]string{{"type": "text", "text": text}},
		"isError": true,
		"_meta":   map[string]any{mcp.MetaOutcome: outcome, mcp.MetaExecution: describe(r)},
	})
	return b
}

// textContents returns the texts of a tool result's text content items.
func textContents(result json.RawMessage) []string {
	var r struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	_ = json.Unmarshal(result, &r) // not a result with content: no texts
	var texts []string
	for _, c := range r.Content {
		if c.Type == "text" {
			texts = append(texts, c.Text)
		}
	}
	return texts
}

// alreadyDoneResult is the success a caller gets when a re-send found the
// effect already in place: what the upstream said is kept in the text.
func alreadyDoneResult(r *record.Record, upstream json.RawMessage) json.RawMessage {
	said := textContents(upstream)
	b, _ := json.Marshal(map[string]any{
		"content": []map[string]string{{"type": "text", "text": fmt.Sprintf(
			"Done: execution %s of %s had already taken effect; sending it again, the upstream answered: %s",
			r.ID, r.Tool, strings.Join(said, " "))}},
		"isError": false,
		"_meta":   map[string]any{mcp.MetaOutcome: "already_done"},
	})
	return b
}

func unknownResult(r *record.Record) json.RawMessage {
	sent := r.At(record.Dispatched).UTC().Format(time.RFC3339Nano)
	return toolResult(fmt.Sprintf(
		"Outcome unknown: execution %s of %s was sent to the upstream (%s) at %s and no usable answer was observed (%s). "+
			"It may or may not have taken effect. Do not retry blindly: check whether it happened first.",
		r.ID, r.Tool, r.Upstream, sent, lastNote(r)), "unknown", r)
}

func inProgressResult(r *record.Record, window time.Duration) json.RawMessage {
	return toolResult(fmt.Sprintf(
		"Still in progress: execution %s of %s has not finished after %s (state %s). "+
			"Do not retry: the same call attaches to this execution and returns its answer once it is done.",
		r.ID, r.Tool, window, r.State), "in_progress", r)
}
