package intercept

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/telemetry"
)

// An approval stands between a won reservation and its send, for a tool
// whose policy asks for one (DESIGN section 6). It decides whether the
// execution may start; it never decides whether a call is one that
// exists, which the reservation did. So a call that maps to an execution
// awaiting its decision attaches to it, one that maps to a refusal gets
// the refusal, and no execution is ever asked about twice: the decision
// is stored (authorized, refused) before anything is sent.

// approvalProgress is how often a caller waiting for an operator's
// decision, or attached to an execution under way, is told it still
// waits, if it asked for progress: a client that resets its timeout on
// progress then waits as long as the approval or the execution.
const approvalProgress = 30 * time.Second

// prepareApproval marks fresh, the record a call is about to reserve, as
// awaiting its approval when its tool needs one and no grant of the
// session covers it, and keeps the store from dispatching it at once.
func (in *Interceptor) prepareApproval(req *Request, fresh *record.Record, opts *record.ReserveOptions) {
	pol := req.Policy
	if !pol.NeedsApproval() || in.shadow {
		return
	}
	opts.Dispatch = false
	if _, ok := in.grants.get(req, pol); !ok {
		fresh.Awaiting = string(pol.Approver)
	}
}

// approve gets the decision on rec, a won reservation of req's call, and
// runs it once authorized or answers the refusal.
func (in *Interceptor) approve(ctx context.Context, req *Request, rec *record.Record) {
	pol := req.Policy
	if rec.Awaiting == "" {
		if g, ok := in.grants.get(req, pol); ok {
			in.decide(ctx, req, rec, record.Change{To: record.Authorized, From: record.Accepted, By: g.by, Via: record.ViaSessionGrant,
				Note: fmt.Sprintf("approved for this session with execution %s (%s, %s)", g.execution, g.via, g.at.UTC().Format(time.RFC3339))})
			return
		}
		// The grant ended with its session since the reservation: asked.
	}
	inRound := pol.Approver != policy.ApproverOperator && req.Call.Elicits // not bounded by it
	if d := in.clientDeadline(req); !d.IsZero() && !inRound && !in.now().Before(d) {
		// The client's deadline passed before anyone could be asked (a
		// slow reservation): no decision, so not a refusal, which the
		// same call would meet for the record's retention.
		in.decide(ctx, req, rec, record.Change{To: record.Failed, From: record.Accepted,
			Note: "the call's deadline passed before its approval could be asked; nothing was sent"})
		return
	}
	switch pol.Approver {
	case policy.ApproverOperator:
		// Kept before the wait begins, so that a session ending now
		// ends it too.
		wctx, cancel := context.WithCancel(req.bg())
		w := in.waits.add(req.Origin.Session, cancel)
		go in.awaitOperator(ctx, wctx, w, req, rec)
	default:
		in.askClient(ctx, req, rec)
	}
}

// approvalDeadline returns when the wait for rec's decision ends: the
// tool's approval timeout, or the client's own deadline if it is sooner.
// The retry rule's deadline does not bound it: it bounds the proxy's
// own waits between attempts, and a person's decision is not one.
func (in *Interceptor) approvalDeadline(req *Request, now time.Time) time.Time {
	d := now.Add(req.Policy.ApprovalTimeout)
	if c := in.clientDeadline(req); !c.IsZero() && c.Before(d) {
		d = c
	}
	return d
}

// allowed is the time a person had to decide, from asked to deadline, to
// the millisecond: a client's deadline counts from the call's arrival, so
// it is seldom a round number, and its nanoseconds say nothing.
func allowed(asked, deadline time.Time) time.Duration {
	return deadline.Sub(asked).Round(time.Millisecond)
}

// askClient asks the caller's user, through MCP elicitation, whether rec
// may run.
func (in *Interceptor) askClient(ctx context.Context, req *Request, rec *record.Record) {
	if req.Call.Elicits {
		// The 2026-07-28 protocol asks within the call's answer.
		in.askInRound(ctx, req, rec)
		return
	}
	asker, ok := req.Reply.(Asker)
	if !ok || !asker.CanAsk() {
		in.decide(ctx, req, rec, record.Change{To: record.Refused, From: record.Accepted, By: "mcp-idempotent", Via: record.ViaProxy,
			Note: "approval by the client's user is required, and the client that sent the call could not be asked: it declared no elicitation capability (form mode), or its HTTP session is stateless. " +
				"Call from a client that supports elicitation, or have an operator approve the tool (approver: operator)"})
		return
	}
	params, err := in.elicitation(req, rec)
	if err != nil {
		in.decide(ctx, req, rec, record.Change{To: record.Refused, From: record.Accepted, By: "mcp-idempotent", Via: record.ViaProxy,
			Note: "the approval request could not be made: " + err.Error()})
		return
	}
	in.log.Info("asking the client's user to approve an execution", "execution", rec.ID, "tool", rec.Tool, "request", req.Correlation)
	asker.Progress(fmt.Sprintf("awaiting approval from the client's user (execution %s)", rec.ID))
	asked := in.now()
	deadline := in.approvalDeadline(req, asked)
	sctx, endSpan := in.traceAsk(req)
	actx, cancel := context.WithDeadline(sctx, deadline)
	// One prompt per execution: a call of the 2026-07-28 protocol sent
	// again meanwhile waits for this answer (decide forgets it).
	in.questions.asked(rec.ID)
	asker.Ask(actx, params, func(result json.RawMessage, err error) {
		cancel()
		in.traceEvent(req, "approval wait", in.now().Sub(asked), telemetry.Approver.String(record.ApproverClient))
		// A timeout says how long the user had: the approval's, or
		// the client's own deadline.
		c := in.clientDecision(req, result, err, allowed(asked, deadline))
		endSpan(c)
		in.decide(ctx, req, rec, c)
	})
}

// clientDecision reads the client's answer to the elicitation: accepted
// is an approval; declined or dismissed, a refusal. No answer within
// allowed, the time the user had, is a refusal too; the session's end
// before one is no decision at all: nothing was sent, and a call again
// asks again.
func (in *Interceptor) clientDecision(req *Request, result json.RawMessage, err error, allowed time.Duration) record.Change {
	by := req.Origin.Actor
	if by == "" {
		by = "the client's user"
	}
	var rpcErr *jsonrpc.Error
	var malformed *MalformedAnswerError
	switch {
	case errors.As(err, &malformed):
		return record.Change{To: record.Refused, From: record.Accepted, By: "mcp-idempotent", Via: record.ViaProxy,
			Note: "the client's answer to the approval request could not be read: it was " + malformed.What}
	case errors.Is(err, context.DeadlineExceeded):
		return record.Change{To: record.Refused, From: record.Accepted, Via: record.ViaTimeout,
			Note: fmt.Sprintf("no decision from the client's user within %s", allowed)}
	case errors.As(err, &rpcErr):
		return record.Change{To: record.Refused, From: record.Accepted, By: "mcp-idempotent", Via: record.ViaProxy,
			Note: "the client could not ask its user: " + rpcErr.Message}
	case err != nil:
		return record.Change{To: record.Failed, From: record.Accepted, Note: "no decision: " + err.Error() + "; nothing was sent"}
	}
	action, note, rerr := readApproval(result)
	switch {
	case errors.Is(rerr, jsonrpc.ErrAmbiguous):
		// Readers would take it for different answers: not an approval.
		return record.Change{To: record.Refused, From: record.Accepted, By: "mcp-idempotent", Via: record.ViaProxy,
			Note: "the client's answer to the approval request was ambiguous, so it was not taken for an approval: " + rerr.Error()}
	case rerr != nil:
		return record.Change{To: record.Refused, From: record.Accepted, By: "mcp-idempotent", Via: record.ViaProxy,
			Note: "the client's answer to the approval request could not be read"}
	}
	c := record.Change{From: record.Accepted, By: by, Via: record.ApproverClient, Note: record.CutNote(note)}
	switch action {
	case "accept":
		c.To = record.Authorized
	case "decline":
		c.To = record.Refused
		if c.Note == "" {
			c.Note = "declined by the client's user"
		}
	default:
		c.To = record.Refused
		c.Note = fmt.Sprintf("the client's user dismissed the approval request (%s)", action)
	}
	return c
}

// errUnreadableAnswer is readApproval's error for an answer that is not
// an elicitation result.
var errUnreadableAnswer = errors.New("not an elicitation result")

// readApproval reads the action and the note of an elicitation result,
// the answer to an approval request. A member it reads (action, content,
// content.note) given twice or in another case is an error, ErrAmbiguous:
// readers would take {"action":"decline","action":"accept"} either way,
// and Go's encoding/json takes "Action" for "action" (DESIGN section 10).
func readApproval(result json.RawMessage) (action, note string, err error) {
	var content json.RawMessage
	var actionOK bool
	read := jsonrpc.Reading{Names: []string{"action", "content"}}
	if !json.Valid(result) || jsonrpc.EachMember(result, func(name, value []byte) bool {
		switch read.Note(name) {
		case 0:
			action, actionOK = jsonrpc.StringValue(value)
		case 1:
			content = value
		}
		return true
	}) != nil {
		return "", "", errUnreadableAnswer
	}
	if err := read.Err(); err != nil {
		return "", "", err
	}
	if !actionOK {
		return "", "", errUnreadableAnswer
	}
	if content == nil || string(content) == "null" {
		return action, "", nil
	}
	if content[0] != '{' {
		return "", "", errUnreadableAnswer
	}
	raw, err := jsonrpc.MemberOnce(content, "note")
	if err != nil {
		return "", "", fmt.Errorf("in content: %w", err)
	}
	if raw == nil || string(raw) == "null" {
		return action, "", nil
	}
	if note, ok := jsonrpc.StringValue(raw); ok {
		return action, note, nil
	}
	return "", "", errUnreadableAnswer
}

// awaitOperator waits, on its own goroutine, for an operator to approve
// or deny rec (activity approve, deny) from any process that reaches the
// store, until the approval's deadline, which refuses it.
func (in *Interceptor) awaitOperator(ctx, wctx context.Context, w *operatorWait, req *Request, rec *record.Record) {
	defer in.waits.done(req.Origin.Session, w)
	d, ok := in.store.(record.Decider)
	if !ok {
		in.decide(ctx, req, rec, record.Change{To: record.Refused, From: record.Accepted, By: "mcp-idempotent", Via: record.ViaProxy,
			Note: "approval by an operator is required, and this proxy's store is not shared with an operator: use a durable store (--store sqlite:, postgres:, redis:)"})
		return
	}
	in.log.Info("awaiting an operator's approval", "execution", rec.ID, "tool", rec.Tool, "request", req.Correlation,
		"approve", "mcp-idempotent activity approve "+rec.ID)
	asker, _ := req.Reply.(Asker)
	waiting := fmt.Sprintf("awaiting approval from an operator: mcp-idempotent activity approve %s", rec.ID)
	if asker != nil {
		asker.Progress(waiting)
	}
	asked := in.now()
	deadline := in.approvalDeadline(req, asked)
	wctx, cancel := context.WithDeadline(wctx, deadline)
	defer cancel()
	// The session's end ends the wait: nothing would be sent after it.
	stopWatch := context.AfterFunc(ctx, func() {
		if errors.Is(ctx.Err(), ErrSessionEnded) {
			cancel()
		}
	})
	defer stopWatch()
	stopProgress := func() {}
	if asker != nil {
		stopProgress = in.tellProgress(wctx, asker, waiting)
	}
	// A failure of the store is not the decision: waited out, as wait does.
	cur, err := in.waitOn(wctx, rec.ID, "waiting for an approval: the store failed; trying again", d.WaitDecided)
	// Before the call is sent: the upstream's progress on the token
	// comes after the proxy's last.
	stopProgress()
	in.traceEvent(req, "approval wait", in.now().Sub(asked), telemetry.Approver.String(record.ApproverOperator))
	switch {
	case err == nil && cur.State != record.Accepted:
		in.journalizeTakeover(req, cur)
		in.operatorDecided(req, cur)
		in.afterDecision(ctx, req, cur)
	case errors.Is(err, context.DeadlineExceeded):
		in.decide(ctx, req, rec, record.Change{To: record.Refused, From: record.Accepted, Via: record.ViaTimeout,
			Note: fmt.Sprintf("no decision from an operator within %s", allowed(asked, deadline))})
	case errors.Is(ctx.Err(), ErrSessionEnded) || w.ended.Load():
		in.decide(ctx, req, rec, record.Change{To: record.Failed, From: record.Accepted,
			Note: "the session ended before an operator's decision; nothing was sent"})
	default:
		in.decide(ctx, req, rec, record.Change{To: record.Failed, From: record.Accepted,
			Note: fmt.Sprintf("the wait for an operator's decision failed: %v; nothing was sent", err)})
	}
}

// operatorDecided tells this process's journal, metrics, log and session
// grants of the decision an operator made on rec from another process:
// the proxy's journal shows what it acted on, whichever journal the
// operator's command wrote.
func (in *Interceptor) operatorDecided(req *Request, rec *record.Record) {
	last := rec.History[len(rec.History)-1]
	if last.State != record.Authorized && last.State != record.Refused {
		return // settled otherwise, an orphan's takeover: journaled as such
	}
	c := record.Change{To: last.State, By: last.By, Via: last.Via, Note: last.Note}
	in.obs.Transition(Tool{Name: rec.Tool, Listed: req.Listed}, c.To)
	in.traceRecord(req, rec)
	in.journalize(req, rec, &c)
	in.logDecision(req, rec, c)
	if c.To == record.Authorized {
		in.grants.put(req, rec, c)
	}
}

// operatorDecision reports whether rec's last transition is an
// operator's decision.
func operatorDecision(rec *record.Record) bool {
	n := len(rec.History)
	return n > 0 && rec.History[n-1].Via == record.ApproverOperator
}

// tellProgress sends the caller message as progress every
// approvalProgress until ctx ends or stop is called; stop returns once
// no more will be sent.
func (in *Interceptor) tellProgress(ctx context.Context, asker Asker, message string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(approvalProgress)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				asker.Progress(message)
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// decide stores c, the decision on rec (or the end of the wait for one),
// and acts on what the record comes to.
func (in *Interceptor) decide(ctx context.Context, req *Request, rec *record.Record, c record.Change) {
	defer in.questions.forget(rec.ID)
	cur, err := in.change(req.bg(), req, rec.ID, c)
	switch {
	case errors.Is(err, record.ErrConflict):
		// Decided elsewhere meanwhile (an operator as the timeout
		// came), or settled as an orphan: what the record holds stands.
		if cur, err = in.store.Get(req.bg(), rec.ID); err == nil {
			if operatorDecision(cur) {
				// Acted on here, so told here as awaitOperator tells it.
				in.operatorDecided(req, cur)
			}
			in.afterDecision(ctx, req, cur)
			return
		}
	case err == nil:
		if c.To == record.Authorized && c.Via != record.ViaSessionGrant {
			in.grants.put(req, cur, c)
		}
		in.logDecision(req, cur, c)
		in.afterDecision(ctx, req, cur)
		return
	}
	in.log.Error("recording an approval's decision; not sending", "execution", rec.ID, "decision", c.To, "err", err)
	in.abandonUndecided(req, rec.ID, "the store did not take the approval's decision: "+err.Error())
	in.replyError(req, jsonrpc.Errorf(jsonrpc.CodeInternalError,
		"mcp-idempotent: the record store did not take the decision on execution %s of %s, so it was not sent: %v", rec.ID, rec.Tool, err))
}

// afterDecision goes on from rec as its decision left it: an authorized
// execution runs; any other is answered from the record, or waited for.
func (in *Interceptor) afterDecision(ctx context.Context, req *Request, rec *record.Record) {
	switch {
	case rec.State == record.Authorized && rec.Owner == in.owner:
		in.restartDeadline(req, in.now())
		in.execute(rec, req, "")
	case rec.State.Settled():
		in.answer(ctx, req, rec, live)
	default:
		// Sent by another process (it took the execution over): the
		// caller gets what it comes to.
		in.goAttach(ctx, rec, req)
	}
}

func (in *Interceptor) logDecision(req *Request, rec *record.Record, c record.Change) {
	switch c.To {
	case record.Authorized:
		in.log.Info("execution approved", "execution", rec.ID, "tool", rec.Tool, "by", c.By, "via", c.Via, "request", req.Correlation)
	case record.Refused:
		in.log.Info("execution refused", "execution", rec.ID, "tool", rec.Tool, "by", c.By, "via", c.Via, "why", c.Note, "request", req.Correlation)
	}
}

// grants are the session approvals (approval: session) of this process:
// the first approval of a tool in a session covers the tool's later
// executions in it, until the session ends (EndSession).
type grants struct {
	mu sync.Mutex
	m  map[grantKey]grant
}

type grantKey struct{ session, tool string }

// A grant is an approval that covers a session: who gave it, how, when,
// for which execution.
type grant struct {
	by, via, execution string
	at                 time.Time
}

// sessionGrants reports whether an approval of req's call covers the
// later calls of its session: under approval: session, for a call that
// belongs to a session. A 2026-07-28 call belongs to none, and the calls
// of one actor's clients share its lane: each is asked, as under each.
func sessionGrants(req *Request) bool {
	return req.Policy.Approval == policy.ApprovalSession && !req.Call.Stateless
}

// get returns the grant that covers req's call, if its policy takes
// session grants and one was given.
func (g *grants) get(req *Request, pol *policy.Policy) (grant, bool) {
	if !sessionGrants(req) {
		return grant{}, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	gr, ok := g.m[grantKey{req.Origin.Session, req.Call.Name}]
	return gr, ok
}

// put keeps the approval c of rec as a grant for the session of req, if
// its policy asks for session approvals.
func (g *grants) put(req *Request, rec *record.Record, c record.Change) {
	if !sessionGrants(req) {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = make(map[grantKey]grant)
	}
	g.m[grantKey{req.Origin.Session, req.Call.Name}] = grant{by: c.By, via: c.Via, execution: rec.ID, at: rec.At(record.Authorized)}
}

// EndSession drops the approvals that covered session (Request.Session)
// once it has ended: a new session is asked again. It ends the
// reservations under way of its calls that ask for approval, whose
// callers may have detached (askingCalls; WaitLate waits for them). It
// ends the session's waits for an operator, whose callers may have
// detached, and returns once each has recorded its execution failed:
// nothing would send it now, and the store may be closed next.
func (in *Interceptor) EndSession(session string) {
	for _, req := range in.asking.take(session) {
		in.EndReserving(req) // one the session ended already is left as it is
	}
	in.waits.end(session)
	// After the waits: a decision that lands as one ends is kept as a
	// grant, which would outlive the session.
	in.grants.mu.Lock()
	for k := range in.grants.m {
		if k.session == session {
			delete(in.grants.m, k)
		}
	}
	in.grants.mu.Unlock()
}

// operatorWaits are the waits for an operator's decision under way, by
// session. A caller that detached no longer sees its session end through
// its context: EndSession ends its wait.
type operatorWaits struct {
	mu sync.Mutex
	m  map[string]map[*operatorWait]struct{}
}

// An operatorWait is one wait: cancel ends it, ended says that the
// session's end did, and done is closed once its outcome is recorded.
type operatorWait struct {
	ended  atomic.Bool
	cancel context.CancelFunc
	done   chan struct{}
}

// add keeps a wait of a call of session, which cancel ends. A call of no
// session (2026-07-28) is not kept: no session's end concerns it.
func (w *operatorWaits) add(session string, cancel context.CancelFunc) *operatorWait {
	ow := &operatorWait{cancel: cancel, done: make(chan struct{})}
	if session == "" {
		return ow
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = make(map[string]map[*operatorWait]struct{})
	}
	if w.m[session] == nil {
		w.m[session] = make(map[*operatorWait]struct{})
	}
	w.m[session][ow] = struct{}{}
	return ow
}

// done forgets ow, a wait of session whose outcome is recorded.
func (w *operatorWaits) done(session string, ow *operatorWait) {
	ow.cancel()
	w.mu.Lock()
	delete(w.m[session], ow)
	if len(w.m[session]) == 0 {
		delete(w.m, session)
	}
	w.mu.Unlock()
	close(ow.done)
}

// endWaitsFor bounds how long EndSession waits for the session's waits
// for an operator to record their outcomes: a store that does not answer
// must not hold up the session's end for ever. One not recorded by then
// is failed once its lease lapses, as a crashed proxy's is.
const endWaitsFor = 5 * time.Second

// end ends the waits of session and waits, up to endWaitsFor, for their
// outcomes to be recorded.
func (w *operatorWaits) end(session string) {
	w.mu.Lock()
	var ws []*operatorWait
	for ow := range w.m[session] {
		ws = append(ws, ow)
	}
	w.mu.Unlock()
	for _, ow := range ws {
		ow.ended.Store(true)
		ow.cancel()
	}
	if len(ws) == 0 {
		return
	}
	bound := time.NewTimer(endWaitsFor)
	defer bound.Stop()
	for _, ow := range ws {
		select {
		case <-ow.done:
		case <-bound.C:
			return
		}
	}
}

// elicitation returns the params of the elicitation/create that asks the
// caller's user to approve rec: what would run, where, for whom, with the
// arguments as the tool's journal rule lets them be shown (a hash or a
// redaction hides them here as it does there).
func (in *Interceptor) elicitation(req *Request, rec *record.Record) (json.RawMessage, error) {
	args := req.Call.Arguments
	if args == nil {
		args = json.RawMessage("{}")
	}
	shown := "hidden by the tool's journal policy"
	switch v := in.journalValue(req.Policy.Journal.Arguments, "arguments", args); {
	case v.Clear != nil:
		shown = shownArguments(v.Clear)
	case v.HMAC != "":
		shown = "hashed by the tool's journal policy: " + v.HMAC
	}
	// Quoted, as are the arguments: a tool name from the upstream's
	// tools/list, or a client's arguments, holding a line break would
	// otherwise write lines of their own into what the user approves.
	actor := strconv.Quote(rec.Actor)
	if rec.Actor == "" {
		actor = "(none)"
	}
	message := fmt.Sprintf("Approve this tool call before it is sent?\n\n"+
		"Tool: %s\nUpstream: %s\nActor: %s\nExecution: %s\nArguments: %s\n\n"+
		"Accept to send it once; decline to refuse it. The same call sent again is not asked about again: it gets this decision's outcome.",
		strconv.Quote(rec.Tool), strconv.Quote(rec.Upstream), actor, rec.ID, shown)
	return json.Marshal(map[string]any{
		"message": message,
		"requestedSchema": map[string]any{
			"type": "object",
			"properties": map[string]any{
				"note": map[string]any{
					"type":        "string",
					"maxLength":   record.MaxNote,
					"title":       "Note",
					"description": "Why you approve or decline; kept with the execution's record.",
				},
			},
		},
	})
}

// maxShownArguments bounds the arguments an approval request shows.
const maxShownArguments = 2000

// shownArguments returns args as an approval request shows them: on one
// line, with no white space between tokens, every character that is not
// printable (U+2028, a bidirectional override) escaped, and cut after
// maxShownArguments bytes.
func shownArguments(args json.RawMessage) string {
	var compact bytes.Buffer
	if json.Compact(&compact, args) != nil {
		return "(not JSON)" // the parser took them: not reached
	}
	var b strings.Builder
	for _, r := range compact.String() {
		if b.Len() >= maxShownArguments {
			b.WriteString(" ... (cut)")
			break
		}
		// Outside strings compact JSON holds only printable ASCII, and
		// inside one an escape reads as the character it stands for.
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
				fmt.Fprintf(&b, "\\u%04x\\u%04x", r1, r2)
			} else {
				fmt.Fprintf(&b, "\\u%04x", r)
			}
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
