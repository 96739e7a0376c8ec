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
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/telemetry"
	"github.com/mcp-idempotent/mcp-idempotent/internal/workcount"
	"github.com/mcp-idempotent/mcp-idempotent/internal/workers"
)

// An Upstream is the server a session's calls go to.
type Upstream interface {
	// Send writes a request upstream and arranges for done to be called
	// exactly once with the outcome: the result member on success; a
	// *jsonrpc.Error when the upstream answered with one; a
	// retry.NotSentError when the request never left; anything else when
	// the request may have been received but no answer was observed. done
	// may be called before Send returns, or later on a goroutine of the
	// transport's (most often the one that reads the upstream; the one
	// that wrote a held request, when its write fails), so it must not
	// block for long. If ctx ends
	// before the answer comes, the request is cancelled upstream
	// (notifications/cancelled) and done gets ctx's error at once. An
	// execution is never cancelled by its caller: its sends go with a
	// context that does not end.
	Send(ctx context.Context, method string, params json.RawMessage, done Answered)
}

// A CopyingUpstream is an Upstream that keeps nothing of a request's
// params once Send has returned (it copies them into a frame of its own
// first), and says so with CopiesParams: the interceptor may then build
// them in a buffer it uses again.
type CopyingUpstream interface {
	Upstream
	CopiesParams() bool
}

// An Answered is told the outcome of one send (Upstream.Send). An
// execution is one itself, so that a send costs no closure of it.
type Answered interface {
	Answered(result json.RawMessage, err error)
}

// AnsweredFunc is a function as an Answered.
type AnsweredFunc func(result json.RawMessage, err error)

// Answered calls f.
func (f AnsweredFunc) Answered(result json.RawMessage, err error) { f(result, err) }

// An Answer is what one caller receives: a result or a JSON-RPC error
// object, exactly one of them set.
type Answer struct {
	Result json.RawMessage
	Error  json.RawMessage
}

// A Replier writes the answer to one caller's request.
type Replier interface {
	// Reply writes a on the caller's transport. A nil error means the
	// transport took it; ErrCallerLeft, that the caller cancelled first
	// and nothing was written. Reply is called at most once per request.
	Reply(a Answer) error
}

// A CopyingReplier is a Replier that keeps nothing of an Answer's bytes
// once Reply or ReplyThen has returned (it copies what it writes into a
// frame of its own), and says so with CopiesAnswer: the interceptor may
// then build an answer in a buffer it uses again.
type CopyingReplier interface {
	Replier
	CopiesAnswer() bool
}

// A DeliveryReplier is a Replier whose transport learns only later than
// the write whether the caller got the answer: an HTTP stream holds it as
// an event until the client reads it, and a client that dropped its
// request never does; a stdio session holds the answers of a burst to
// write them together. ReplyThen writes a as Reply does, and calls
// written once: with nil once the answer has reached the caller, and
// only then is the execution recorded as delivered; with why not once it
// never can; or not at all when that cannot be told. It is used instead
// of Reply when DeliversLater reports true.
type DeliveryReplier interface {
	Replier
	DeliversLater() bool
	ReplyThen(a Answer, written func(err error)) error
}

// An OrderedReplier is a DeliveryReplier whose transport writes answers
// in the order they are given (stdio): its caller may read one and act on
// it before written is told.
type OrderedReplier interface {
	DeliveryReplier
	WritesInOrder() bool
}

// An Asker is a Replier that can put a question to its caller's user,
// as the proxy's own request on the caller's transport (an approval
// asked through MCP elicitation), and tell the caller how its call is
// going. The interceptor looks for it on Request.Reply.
type Asker interface {
	Replier
	// CanAsk reports whether Ask can reach the user: the client declared
	// the elicitation capability (form mode) in its handshake, and its
	// transport can carry a request of the proxy's now. When it reports
	// false, Ask is not called.
	CanAsk() bool
	// Ask sends elicitation/create with params to the client, under an
	// id of the proxy's, related to the caller's request, and calls done
	// once: with the client's result; a *jsonrpc.Error when the client
	// answered with one; a *MalformedAnswerError when its answer was no
	// JSON-RPC response; or another error when no answer can come (ctx
	// ended, the session ended, the transport refused the request).
	// done may be called before Ask returns.
	Ask(ctx context.Context, params json.RawMessage, done func(result json.RawMessage, err error))
	// Progress sends notifications/progress with message to the client
	// if the caller's request carried a progress token; else it does
	// nothing. The values it sends increase from 0.
	Progress(message string)
}

// A MalformedAnswerError is a client's answer to a request of the
// proxy's (Asker.Ask) that is no JSON-RPC response: it gives both a
// result and an error, or neither. The client answered: it is read as an
// answer that could not be read, never as no answer at all.
type MalformedAnswerError struct {
	What string // what was wrong
}

func (e *MalformedAnswerError) Error() string {
	return "malformed answer from the client: " + e.What
}

// Schema is what a tool's inputSchema tells the fingerprint.
type Schema struct {
	// Defaults are the top-level property defaults, which
	// Policy.Defaults materialises before fingerprinting.
	Defaults map[string]json.RawMessage
	// Twins are the properties declared beside one differing only in
	// case, which a server reads apart (shapeArguments).
	Twins *mcp.CaseTwins
}

// An Origin is what the calls of one session share: who asks, in which
// scope, of which upstream.
type Origin struct {
	// Actor, Scope and UpstreamID go into the fingerprint.
	Actor      string
	Scope      string
	UpstreamID string
	// UpstreamName is what records, logs and answers show of the
	// upstream: the identity less what may hold a credential (a
	// command's arguments, an HTTP upstream's headers), which shows only
	// as a keyed hash of UpstreamID beside it. Empty shows UpstreamID,
	// for an identity that holds no secret.
	UpstreamName string
	// Session names the caller's session in the journal, with the
	// request's ID: the session's scope (session:...).
	Session string
}

// A Request is one caller's tools/call. It is handed to Handle or
// Unrecorded once, and not copied after: it holds the state of the
// execution it starts.
type Request struct {
	// Call is read from params that are valid JSON, as jsonrpc leaves a
	// request's (mcp.ParseToolCall): its arguments are fingerprinted
	// without their grammar being checked again.
	Call   *mcp.ToolCall
	Policy *policy.Policy // read-only; shared with other calls
	// Schema is what the tool's inputSchema tells the fingerprint; nil
	// when it tells nothing. One pointer for all of it keeps a Request,
	// made for every call, small.
	Schema *Schema
	// Origin is who asks, in which scope, of which upstream: read-only,
	// and shared by every call of a session, which keeps a Request,
	// made for every call, small. It must be set. Named, not embedded:
	// a write through it, which changes every call of the session,
	// shows as one.
	Origin   *Origin
	Upstream Upstream
	Reply    Replier
	// Correlation names the caller's request in logs: its session and
	// JSON-RPC id. It is evidence, never part of matching.
	Correlation string
	// ID names the caller's request apart in the journal, with
	// Origin.Session: the JSON-RPC id as its client sent it, not as a
	// transport that renamed it passed it on.
	ID json.RawMessage

	// deadline is when the proxy stops beginning waits for this call
	// (RetryRule.Deadline, shortened by the client's Call.Deadline); set
	// by Handle on the call's arrival. It is kept as a time since the
	// Interceptor's epoch, 0 for none (deadlineOf, setDeadline): a
	// Duration rather than a Time keeps a proxy's call, which holds the
	// Request, within its allocation size class.
	deadline time.Duration
	// caller is the caller's context, set by Handle: its end stops the
	// waits of the execution the call runs (execution.ctx); bg is it
	// without its cancellation.
	caller detached
	// Listed says that the upstream listed the tool (Tool.Listed). It
	// sits beside unrecorded, joinedHow, got and stage, in room they leave.
	Listed bool
	// unrecorded marks a call sent by Unrecorded: no execution id goes
	// upstream with it.
	unrecorded bool
	// joinedHow is how the call joined the execution joined names
	// (journal.Attach.How); got is what its caller is answered
	// (journal.Attach.Got), set just before the answer is written.
	joinedHow joinHow
	got       gotWhat
	// stage says, while a store that waits reserves the call, whether
	// the call's goroutine or its session's end answers it (reserving.go).
	// Beside unrecorded, it takes no room of its own.
	stage atomic.Int32
	// joined is the execution the call joined rather than started, if it
	// did (set by Handle), with joinedHow.
	joined string
	// exec is the execution the call runs, if it runs one (a call starts
	// one at most): kept here so that it shares the request's
	// allocation, which the caller may share with its own.
	exec execution
	// answerCame is set in shadow mode once the upstream's answer to the
	// call came, which the client gets as it came (ShadowAnswerCame).
	answerCame atomic.Bool
}

// bg returns the caller's context without its cancellation, for the
// work that outlives the caller (recording the outcome). It points into
// r: context.WithoutCancel would cost every call an allocation.
func (r *Request) bg() context.Context { return &r.caller }

// detached is a context without its parent's cancellation, as
// context.WithoutCancel's, but one a Request holds. Its Value is the
// parent's, less the key under which the context package finds a
// context's cancellation: a context made on top of it that ends by
// itself has its own cause, not the caller's.
type detached struct{ context.Context }

func (*detached) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*detached) Done() <-chan struct{}       { return nil }
func (*detached) Err() error                  { return nil }

func (d *detached) Value(key any) any {
	if key == cancelKey {
		return nil
	}
	return d.Context.Value(key)
}

// cancelKey is the key context.Cause asks an ended context's Value for,
// to find its cancellation; the context package does not export it, so
// a context that has ended and tells whatever it is asked finds it out.
// Were Cause to ask for none, cancelKey would be nil, which no key is.
var cancelKey = func() (key any) {
	context.Cause(keyProbe{&key})
	return key
}()

type keyProbe struct{ key *any }

func (keyProbe) Deadline() (time.Time, bool) { return time.Time{}, false }
func (keyProbe) Done() <-chan struct{}       { return nil }
func (keyProbe) Err() error                  { return context.Canceled }
func (p keyProbe) Value(key any) any {
	if *p.key == nil {
		*p.key = key
	}
	return nil
}

// ShadowAnswerCame tells, in shadow mode, that the upstream's answer to
// r's call came and goes on to the client, before the interceptor has
// recorded it: a call that matches r's execution from now on is a replay
// (shadowReplay).
func (r *Request) ShadowAnswerCame() { r.answerCame.Store(true) }

// A Tool names the tool a call called, as an Observer is told of it.
type Tool struct {
	Name string
	// Listed says that the upstream listed the tool when the call came;
	// a name it did not list is the client's alone, and a metrics label
	// of its own would let any client grow the series.
	Listed bool
}

// An Observer is told of every decision, attempt and transition, for
// metrics. Its methods are called on the request path and must not block.
type Observer interface {
	// Decision: what became of one call. decision is one of new,
	// attached, replayed, passed_through, key_refused, invalid (arguments
	// that cannot be fingerprinted), store_unavailable,
	// unknown (answered outcome unknown), in_progress, redispatched,
	// recovered.
	Decision(tool Tool, class policy.Class, decision string)
	// Attempt: a call is sent again, as its attempt n, after a backoff
	// of wait, for why (transient, not sent). A retry that the session's
	// end, the account or the store stops before it goes is not told.
	Attempt(tool Tool, n int, why string, wait time.Duration)
	// Transition: an execution moved to state.
	Transition(tool Tool, state record.State)
	// Upstream: the upstream answered one send after d, or d passed
	// before the proxy learned no answer would come. A send that never
	// left is not told.
	Upstream(tool Tool, d time.Duration)
}

// A ShadowObserver is an Observer that counts apart what the interceptor
// would have done in shadow mode (Options.Shadow): there, Decision is
// told passed_through for every call, and ShadowDecision what the call
// would have become.
type ShadowObserver interface {
	Observer
	ShadowDecision(tool Tool, class policy.Class, decision string)
}

// Options configures an Interceptor.
type Options struct {
	// Observer is told of decisions and transitions; nil means none.
	Observer Observer
	// Shadow is shadow mode: the caller passes every call upstream as it
	// came and hands it to Handle too, with an Upstream that gives the
	// answer the call got. The interceptor records and decides as ever,
	// but its answers go nowhere: they are counted (ShadowObserver),
	// logged and journaled as what it would have done.
	Shadow bool
	Store  record.Store        // required
	Hasher *fingerprint.Hasher // required
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
	// this process runs, and of those whose owner died that it settles;
	// nil keeps no journal.
	Journal Journal
	// Tracer, if set, starts a span for each send upstream, under the
	// span of the call that the context given to Handle holds, and
	// passes it upstream in the call's _meta (traceparent, tracestate);
	// the decision, the execution and its state are set on the call's
	// span. Nil traces nothing.
	Tracer trace.Tracer
	// StoreWaits says that the store waits on I/O (a file, a server), so
	// that an operation may take as long as its timeout: Handle then does
	// a call's work on a goroutine of its own, and so does the goroutine
	// that brings an upstream's answer with the outcome's write. A slow
	// store holds up only the calls that need it, never the caller's
	// other traffic nor the upstream's other answers. A store in memory
	// answers at once, and the work stays on the goroutines that bring
	// it, which spares the hand-offs.
	StoreWaits bool
	// Workers, if set, runs the goroutines StoreWaits asks for, and
	// those of calls with large params (Handle), on goroutines kept
	// from one call to the next: a store's client runs deep, and a new
	// goroutine grows its stack anew at each call. Nil starts a
	// goroutine for each.
	Workers *workers.Pool
	// Replayer, if set, is the store's record.Replayer, taken from the
	// store itself rather than through Store's wrappers: with
	// StoreWaits, Handle answers a replay it finds with it on the
	// calling goroutine, and hands on only the calls that need more.
	Replayer record.Replayer
}

// An Interceptor executes tool calls at most once per action. It is safe
// for concurrent use by every session of a process.
type Interceptor struct {
	store  record.Store
	hasher *fingerprint.Hasher
	log    *slog.Logger
	// debug is whether log takes debug records, read once: the per-call
	// lines are built only then.
	debug bool
	now   func() time.Time
	epoch time.Time // in.now() at New: executions time their sends from it
	owner string
	lease time.Duration
	obs   Observer
	timed bool // an Observer was given: upstream calls are timed for it
	// journal is nil when no journal is kept.
	journal  Journal
	settling journalGates // executions whose settling line is not yet journaled
	// delivering holds, by key, the executions whose caller got the
	// answer while the store records the delivery (reserve).
	delivering journalGates
	// shown caches, by UpstreamID, what records show of an upstream
	// (upstreamShown): a keyed hash per new execution is not free.
	shown     sync.Map
	abandoned abandoned // executions reserved here, never to be sent, still to settle
	// own holds this process's outcomes still to record, and its own
	// executions its calls settled as gone (owntakeover.go).
	own        ownTakeovers
	sent       sentCalls     // executions sent and not yet ended, by key (lost.go)
	unsent     sentCalls     // executions waiting for their account, by key (ownretry.go)
	grants     grants        // the approvals that cover a session (approval: session)
	waits      operatorWaits // the waits for an operator's decision, by session
	asking     askingCalls   // calls that ask for approval, being reserved, by session
	questions  questions     // approvals asked in a round whose question was taken
	storeWaits bool
	replayer   record.Replayer // Options.Replayer
	workers    *workers.Pool   // Options.Workers
	shadow     bool            // Options.Shadow
	// shadowRuns holds, in shadow mode, the requests of the executions
	// under way in this process, by execution id (shadowReplay).
	shadowRuns sync.Map
	tracer     trace.Tracer // Options.Tracer; nil when off

	accounts map[string]*account // read-only after New

	// work counts dispatches and status checks under way; they outlive
	// the callers that started them.
	work workcount.Count
	// late counts the calls EndReserving answered whose goroutines are
	// not yet done with the store (WaitLate).
	late lateCalls
	// renewed is when the leases the store last renewed lapse, in Unix
	// nanoseconds (KeepLeases): 0 until it has.
	renewed atomic.Int64
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
	if in.now == nil {
		in.now = time.Now
	}
	in.epoch = in.now()
	in.journal = opts.Journal
	in.storeWaits = opts.StoreWaits
	in.replayer = opts.Replayer
	in.workers = opts.Workers
	in.tracer = opts.Tracer
	in.obs = opts.Observer
	in.timed = in.obs != nil
	if in.obs == nil {
		in.obs = nopObserver{}
	}
	if opts.Shadow {
		in.shadow = true
		in.obs = shadowObserver{in.obs}
		in.log = in.log.With("shadow", true)
		if opts.Owner == "" {
			// Its records say so (activity list).
			in.owner = shadowPrefix + in.owner
		}
	}
	in.accounts = newAccounts(opts.Accounts, opts.Allowances, in.now())
	return in
}

// shadowObserver counts, in shadow mode, every call as passed through,
// and what it would have become as a shadow decision.
type shadowObserver struct{ Observer }

func (o shadowObserver) Decision(tool Tool, class policy.Class, decision string) {
	if decision != "in_progress" {
		// in_progress is counted in addition to the call's attached:
		// the call passed through once.
		o.Observer.Decision(tool, class, "passed_through")
	}
	if so, ok := o.Observer.(ShadowObserver); ok && decision != "passed_through" {
		so.ShadowDecision(tool, class, decision)
	}
}

// Shadow reports whether the interceptor is in shadow mode
// (Options.Shadow).
func (in *Interceptor) Shadow() bool { return in.shadow }

// StoreWaits reports Options.StoreWaits: whether the store waits on I/O.
func (in *Interceptor) StoreWaits() bool { return in.storeWaits }

// ShadowOwner reports whether owner, a record's, names a process in
// shadow mode: the record is what that process would have done.
func ShadowOwner(owner string) bool { return strings.HasPrefix(owner, shadowPrefix) }

const shadowPrefix = "shadow-"

type nopObserver struct{}

func (nopObserver) Decision(Tool, policy.Class, string)      {}
func (nopObserver) Attempt(Tool, int, string, time.Duration) {}
func (nopObserver) Transition(Tool, record.State)            {}
func (nopObserver) Upstream(Tool, time.Duration)             {}

// PassedThrough tells the observer, and the call's span that ctx holds,
// that a call went upstream as it came, unrecorded (a read-only tool, or
// a key-scoped one called without a key).
func (in *Interceptor) PassedThrough(ctx context.Context, tool Tool, class policy.Class) {
	in.obs.Decision(tool, class, "passed_through")
	if in.tracer != nil {
		trace.SpanFromContext(ctx).SetAttributes(telemetry.Decision.String("passed_through"))
	}
}

// Refused tells the observer, and the call's span that ctx holds, that
// RouteCall refused a call, which route says: it counts as invalid. In
// shadow mode one that passes through there (Route.PassesInShadow)
// counts invalid as what it would have become, and its span says
// passed_through, as calls_total counts it; any other is refused there
// too, and counted so.
func (in *Interceptor) Refused(ctx context.Context, tool Tool, class policy.Class, route Route) {
	obs, decision := in.obs, "invalid"
	if so, ok := obs.(shadowObserver); ok {
		if route.PassesInShadow() {
			decision = "passed_through"
		} else {
			obs = so.Observer
		}
	}
	obs.Decision(tool, class, "invalid")
	if in.tracer != nil {
		trace.SpanFromContext(ctx).SetAttributes(telemetry.Decision.String(decision))
	}
}

// Unsent tells the observer, and the call's span that ctx holds, that
// the proxy answered a call itself, with decision, before any policy
// routed it: invalid for one refused as it came (in a batch), or
// session_ended for one that came as its session ended. Nothing went
// upstream, in shadow mode either, so it counts there as it does in
// normal mode, not as a shadow decision.
func (in *Interceptor) Unsent(ctx context.Context, tool Tool, class policy.Class, decision string) {
	obs := in.obs
	if so, ok := obs.(shadowObserver); ok {
		obs = so.Observer
	}
	obs.Decision(tool, class, decision)
	if in.tracer != nil {
		trace.SpanFromContext(ctx).SetAttributes(telemetry.Decision.String(decision))
	}
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
			until := in.now().Add(in.lease)
			switch err := in.store.Renew(ctx, in.owner, until); {
			case err == nil:
				in.renewed.Store(until.UnixNano())
			case ctx.Err() == nil:
				in.log.Warn("renewing leases", "owner", in.owner, "err", err)
			}
			// After the renewal, which a slow store must not hold up:
			// the renewal keeps them too, until they are settled.
			sweep, cancel := context.WithTimeout(ctx, in.lease/3)
			in.settleAbandonedAll(sweep)
			in.purge(sweep)
			cancel()
		}
	}
}

// A Purger is a store that drops expired records only when asked: its
// reservations ask now and then, so an idle one is asked at each lease
// renewal, and keeps no result past its retention while no call comes.
type Purger interface {
	// Purge drops up to limit settled records whose retention ran out.
	Purge(ctx context.Context, limit int) (int, error)
}

// idlePurge bounds the expired records one renewal's purge drops.
const idlePurge = 1000

// purge asks a Purger store to drop the records whose retention ran out.
func (in *Interceptor) purge(ctx context.Context) {
	p, ok := in.store.(Purger)
	if !ok {
		return
	}
	if _, err := p.Purge(ctx, idlePurge); err != nil && ctx.Err() == nil {
		in.log.Warn("purging expired records", "err", err)
	}
}

// Wait blocks until every dispatch and status check under way has
// settled and its callers are answered, each attached caller's answer
// and journal line included, or ctx is done.
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

// inlineParams bounds the params of a call whose work Handle does on the
// calling goroutine: canonicalising arguments takes time that grows with
// them (a megabyte takes milliseconds), which a session's other messages
// must not wait for.
const inlineParams = 64 << 10

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
// With a store that waits on I/O (Options.StoreWaits), or params large
// enough that reading and fingerprinting them takes time (past
// inlineParams), the calling goroutine only starts the one that does the
// work: the caller's session goes on reading its other messages. It
// answers a replay itself first where the store can find it without
// waiting (replayHere).
func (in *Interceptor) Handle(ctx context.Context, req *Request) {
	in.work.Start()
	if in.storeWaits || len(req.Call.Params) > inlineParams {
		pre, done := in.replayHere(ctx, req)
		if done {
			in.work.Done()
			return
		}
		in.workers.Go(func() {
			defer in.work.Done()
			in.handleFrom(ctx, req, pre)
		})
		return
	}
	// Counted inline too: an answer's journal line is written after the
	// answer, which a session that ends at once must not outlive (Wait).
	defer in.work.Done()
	in.handle(ctx, req)
}
