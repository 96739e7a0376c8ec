package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"

	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
)

// clientCall is one tools/call of the client's while it is handled.
type clientCall struct {
	s    *Session
	ctx  callContext // ended when the caller is answered or detaches; never stops an execution
	once sync.Once   // guards finish
	// detached is set once its caller cancelled it (progresstoken.go).
	// It sits here, in room once leaves, to keep the call within 512
	// bytes, an allocation size class below the next (576).
	detached atomic.Bool

	// raw, call and req are the request as it came, the call as parsed
	// and as handed to the interceptor, kept here so that a call is one
	// allocation. The request's id and its key (jsonrpc.IDKey) are kept
	// in req alone, set from the start (req.ID, req.Correlation), but
	// for a renamed request (lane): a copy here took more room.
	raw  []byte
	call mcp.ToolCall
	req  intercept.Request
	// lane is the id the request came under when the client's Conn gave
	// it one of its own (renamingConn), which the answer and matching
	// use; req then holds the client's, for the evidence. "" if it came
	// under the client's.
	lane string

	// mu guards passThrough. It is held while the request is forwarded,
	// so that a cancellation of it finds it forwarded (see cancelled).
	mu          sync.Mutex
	passThrough bool // the request went upstream as it came
	// unlisted is set when releasePassedLocked took the call's entry out
	// of s.calls, whose key another call may hold since. s.mu guards it.
	unlisted bool

	// spanForwarded is set once the request passing the call upstream as
	// it came took its span, to end with its answer (callSpan).
	spanForwarded atomic.Bool

	// progress counts the notifications/progress sent (Progress), or is
	// progressEnded once the call is answered or detached. s.mu guards it.
	progress int64
}

// progressEnded is a call's progress count once it has ended: its token
// is the client's again, and the proxy tells no more on it.
const progressEnded = -1

// id returns the request's id as it came, which its answer carries.
func (c *clientCall) id() json.RawMessage {
	if c.lane != "" {
		return json.RawMessage(c.lane) // a lane's id is its own key
	}
	return c.req.ID
}

// key returns the request's id as a key (jsonrpc.IDKey), as s.calls
// holds it.
func (c *clientCall) key() string {
	if c.lane != "" {
		return c.lane
	}
	return c.req.Correlation
}

// finish forgets the call: it was answered, passed through or detached.
func (c *clientCall) finish() {
	c.once.Do(func() {
		c.release()
		c.endSpan()
		c.ctx.end()
		c.s.inflight.Done()
	})
}

// release frees the call's id, before its answer is written: a client that
// has its answer may send another request under the same id at once. Its
// progress token is freed with it: the client may use it again as soon.
// It reports whether this release freed them; false once the call was
// answered or detached.
func (c *clientCall) release() bool {
	k := c.key()
	c.s.mu.Lock()
	if c.progress == progressEnded {
		// Released before its answer was written (Reply), or detached:
		// there is nothing left to free.
		c.s.mu.Unlock()
		return false
	}
	if !c.unlisted {
		// Its entry is its own until released: no other call takes the
		// key meanwhile (inUseLocked), and none but this and
		// releasePassedLocked, which marks it, takes it out.
		delete(c.s.calls, k)
	}
	if c.progress > 0 {
		delete(c.s.ownProgress, string(jsonrpc.IDKey(progressToken(c.call.Meta))))
	}
	c.progress = progressEnded
	c.s.mu.Unlock()
	return true
}

// replyable releases the call for its answer, and reports whether the
// answer may be written: not if its caller detached first. The
// interceptor looked before it replied, but a cancellation read since
// (cancelled) must win: the caller takes no answer after it, so one
// written would be counted delivered and never reach it.
func (c *clientCall) replyable() bool {
	return c.release() || !c.detached.Load()
}

// Reply implements intercept.Replier.
func (c *clientCall) Reply(a intercept.Answer) error {
	if !c.replyable() {
		return intercept.ErrCallerLeft
	}
	defer c.finish()
	c.traceAnswer(a)
	if a.Error != nil {
		return c.s.client.WriteFrame(jsonrpc.NewRawErrorResponse(c.id(), a.Error))
	}
	if b := c.s.clientFrames; b != nil {
		return b.WriteResponse(c.id(), a.Result)
	}
	return c.s.client.WriteFrame(jsonrpc.NewResponse(c.id(), a.Result))
}

// CopiesAnswer implements intercept.CopyingReplier: every answer is
// copied into a frame (Reply, ReplyThen) before the write.
func (c *clientCall) CopiesAnswer() bool { return true }

// refuse answers the call with e: it was not sent, nor recorded.
func (c *clientCall) refuse(e *jsonrpc.Error) {
	if err := c.Reply(intercept.Answer{Error: e.Object()}); err != nil {
		c.s.log.Warn("writing the answer failed", "request", c.req.Correlation, "err", err)
	}
}

// An answerWriter is a Conn that may learn when an answer reached the
// client later than the write: streamhttp.ServerSession, whose streams
// hold it until the client reads it, and stdio.Conn, which holds frames
// through a burst (hold.go). WriteAnswer calls written then, with true,
// or with false once the answer never can reach it.
type answerWriter interface {
	WriteAnswer(frame []byte, written func(error)) error
}

// DeliversLater implements intercept.DeliveryReplier: over a Conn that
// writes a frame at once when it takes it (a test's), the write is the
// delivery.
func (c *clientCall) DeliversLater() bool {
	return c.s.clientAnswers != nil
}

// WritesInOrder implements intercept.OrderedReplier: a client Conn that
// holds frames (stdio.Conn) writes them in the order it takes them.
func (c *clientCall) WritesInOrder() bool {
	_, ok := c.s.client.(holder)
	return ok
}

// ReplyThen implements intercept.DeliveryReplier.
func (c *clientCall) ReplyThen(a intercept.Answer, written func(error)) error {
	w := c.s.clientAnswers
	if w == nil {
		if err := c.Reply(a); err != nil {
			return err
		}
		written(nil)
		return nil
	}
	if !c.replyable() {
		return intercept.ErrCallerLeft
	}
	defer c.finish()
	c.traceAnswer(a)
	if b := c.s.clientResponses; b != nil && a.Error == nil {
		return b.WriteResponseThen(c.id(), a.Result, written)
	}
	frame := jsonrpc.NewResponse(c.id(), a.Result)
	if a.Error != nil {
		frame = jsonrpc.NewRawErrorResponse(c.id(), a.Error)
	}
	return w.WriteAnswer(frame, written)
}

// startToolCall validates a tools/call, whose params' members params
// holds, and starts it. When the tool's policy is known, which is the
// common case, everything up to the dispatch happens here on the reading
// goroutine; a tool the proxy must first list, and what comes after it,
// waits in a queue run on a goroutine of its own (order.go).
func (s *Session) startToolCall(ctx context.Context, in *jsonrpc.Message, params *mcp.ParamsReader) {
	// in is on the caller's stack: what the call keeps of it is copied.
	c := &clientCall{s: s, raw: in.Raw, ctx: callContext{Context: ctx}}
	c.req.ID = in.ID
	call := &c.call
	if perr := call.ParseRead(in.Params, params); perr != nil && !call.Malformed {
		s.refusedCall(call, in.ID, perr.Code) // its _meta could not be read
		s.writeClient(jsonrpc.NewErrorResponse(s.answerID(in.ID), perr))
		return
	}
	// A malformed call goes on as any: it is counted under its tool,
	// which may wait for a listing (malformedCall).
	c.req.Correlation = string(jsonrpc.IDKey(in.ID))
	if id, renamed := s.clientID(in.ID, c.req.Correlation); renamed {
		c.lane = c.req.Correlation
		c.req.ID, c.req.Correlation = id, string(jsonrpc.IDKey(id))
	}
	if s.opts.Tracer != nil {
		s.startSpan(c)
	}
	s.mu.Lock()
	if s.callsEnded || s.clientStoppedReading() {
		// Run waits for the calls under way and returns (endCallIntake):
		// nothing is reserved for this one, nor counted in inflight. A
		// client that stopped reading could not be answered (clientDeaf).
		s.mu.Unlock()
		e := intercept.NotRunAtSessionEnd(call.Name)
		info := s.knownTool(call.Name) // no listing now
		s.opts.Interceptor.Unsent(&c.ctx, intercept.Tool{Name: call.Name, Listed: info.listed}, info.policy.Class, "session_ended")
		c.endRefused(e)
		s.writeClient(jsonrpc.NewErrorResponse(in.ID, e))
		return
	}
	if s.inUseLocked(c.key(), false) {
		s.mu.Unlock()
		s.countInvalid(&c.ctx, call.Name)
		c.endRefused(inUseError(in.ID))
		s.refuseInUse(in.ID)
		return
	}
	s.inflight.Start()
	s.calls[c.key()] = c
	s.mu.Unlock()

	if s.queueing.Load() && s.enqueue(queued{call: c}) {
		return // after the calls that wait for a listing (order.go)
	}
	if info, ok := s.tools.cached(call.Name); ok {
		s.handleToolCall(c, call, info)
		return
	}
	s.startQueue(c)
}

// lookupTool returns what is known of c's tool, listing the upstream's
// tools if it must.
func (s *Session) lookupTool(c *clientCall) toolInfo {
	return s.tools.lookup(&c.ctx, c.call.Name, func(ctx context.Context, cursor string) (mcp.ListPage, error) {
		return s.listTools(ctx, cursor, c.call.Meta)
	})
}

// resumeToolCall goes on with c, a call that waited for those before it
// or for its tool's listing, now that info is known: unless it was ended
// meanwhile.
func (s *Session) resumeToolCall(c *clientCall, info toolInfo) {
	switch err := c.ctx.Err(); {
	case errors.Is(err, intercept.ErrSessionEnded):
		// Not the caller leaving: it is told that nothing ran.
		s.opts.Interceptor.Unsent(&c.ctx, intercept.Tool{Name: c.call.Name, Listed: info.listed}, info.policy.Class, "session_ended")
		if err := c.Reply(intercept.Answer{Error: intercept.NotRunAtSessionEnd(c.call.Name).Object()}); err != nil {
			s.log.Warn("writing the answer failed", "request", c.req.Correlation, "err", err)
		}
		return
	case err != nil:
		c.finish() // cancelled before anything was decided: nothing ran
		return
	}
	s.handleToolCall(c, &c.call, info)
}

// passThrough sends c's call upstream as it came, unrecorded.
func (s *Session) passThrough(c *clientCall, call *mcp.ToolCall) {
	c.mu.Lock()
	if c.detached.Load() {
		// Cancelled since it was routed (cancelled holds c.mu): the
		// client is owed nothing, and its id is free again.
		c.mu.Unlock()
		return
	}
	c.passThrough = true
	s.forward(&jsonrpc.Message{Raw: s.upstreamFrame(c), ID: c.id(), Method: "tools/call", Params: call.Params}, nil, c.callSpan())
	c.mu.Unlock()
	c.finish()
}

func (s *Session) handleToolCall(c *clientCall, call *mcp.ToolCall, info toolInfo) {
	if !jsonrpc.PortableID(c.id()) && s.passesAsItCame(call, info) {
		// Refused before it is counted as passed: forward would refuse it.
		s.countInvalid(&c.ctx, call.Name)
		c.refuse(jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "%s", unportableID))
		return
	}
	if call.Malformed {
		s.malformedCall(c, call, info)
		return
	}
	pol := info.policy
	route, refusal := intercept.RouteCall(call, pol)
	if refusal != nil {
		s.opts.Interceptor.Refused(&c.ctx, intercept.Tool{Name: call.Name, Listed: info.listed}, pol.Class, route)
		if route.PassesInShadow() && s.opts.Interceptor.Shadow() {
			// Shadow mode asks nobody, so it keeps no approval either,
			// nor a deadline; a key it cannot read, it records nothing
			// under.
			s.passThrough(c, call)
			return
		}
		c.refuse(refusal)
		return
	}
	if route == intercept.RouteRecorded && s.opts.Interceptor.Shadow() {
		s.shadowToolCall(c, info)
		return
	}
	if route == intercept.RoutePassThrough || s.opts.Interceptor.Shadow() {
		if s.debug {
			s.log.Debug("passes through", "tool", call.Name, "class", pol.Class, "scope", pol.Scope, "request", c.req.Correlation)
		}
		s.opts.Interceptor.PassedThrough(&c.ctx, intercept.Tool{Name: call.Name, Listed: info.listed}, pol.Class)
		s.passThrough(c, call)
		return
	}
	// Member by member, its id and Correlation set already: the
	// session's end may look at the request at any moment (endCalls),
	// and the request must not be written whole meanwhile.
	r := &c.req
	r.Call, r.Policy, r.Schema = call, pol, info.schema
	r.Origin = &s.origin
	r.Upstream, r.Reply, r.Listed = c, c, info.listed
	if route == intercept.RouteUnrecorded {
		s.opts.Interceptor.PassedThrough(&c.ctx, intercept.Tool{Name: call.Name, Listed: info.listed}, pol.Class)
		s.opts.Interceptor.Unrecorded(&c.ctx, &c.req)
		return
	}
	s.opts.Interceptor.Handle(&c.ctx, &c.req)
}

// passesAsItCame reports whether call, of the tool info says, goes
// upstream as it came, under the client's own id: every call in shadow
// mode, and one passed through unrecorded without a retry rule.
func (s *Session) passesAsItCame(call *mcp.ToolCall, info toolInfo) bool {
	if s.shadowing() {
		return true
	}
	if call.Malformed {
		return false
	}
	route, refusal := intercept.RouteCall(call, info.policy)
	return refusal == nil && route == intercept.RoutePassThrough
}

// malformedCall handles c, whose call has a member MCP does not allow as
// it is (mcp.ToolCall.Malformed), now that its tool is known: normal
// mode refuses it; shadow mode passes it upstream as it came, unrecorded.
// Either way it counts as invalid, in shadow mode as what it would have
// become.
func (s *Session) malformedCall(c *clientCall, call *mcp.ToolCall, info toolInfo) {
	s.opts.Interceptor.Refused(&c.ctx, intercept.Tool{Name: call.Name, Listed: info.listed}, info.policy.Class, intercept.RouteUnreadable)
	if s.shadowing() {
		s.passThrough(c, call)
		return
	}
	var again mcp.ToolCall // the parse's error, which only this call needs
	c.refuse(again.Parse(call.Params))
}

// shadowing reports whether the session's proxy is in shadow mode.
func (s *Session) shadowing() bool {
	return s.opts.Interceptor != nil && s.opts.Interceptor.Shadow()
}

// knownTool returns what is known of the tool name without a listing:
// a tool not seen yet is taken for one the upstream does not list.
func (s *Session) knownTool(name string) toolInfo {
	if info, ok := s.tools.cached(name); ok {
		return info
	}
	return s.tools.unlisted(name)
}

// countRefused counts m, a request refused as it came with an error of
// code (in a batch, or for its envelope, id or _meta), as invalid if it
// is a tools/call that names its tool, and traces it.
func (s *Session) countRefused(m *jsonrpc.Message, code int) {
	if m.Method != "tools/call" || m.ID == nil {
		return
	}
	var call mcp.ToolCall
	call.Parse(m.Params)
	s.refusedCall(&call, m.ID, code)
}

// refusedCall counts call, the tools/call under id refused as it came
// with an error of code, if it names its tool, and traces it: a span
// that ends at once, marked with code.
func (s *Session) refusedCall(call *mcp.ToolCall, id json.RawMessage, code int) {
	if s.opts.Interceptor == nil || call.Name == "" {
		return
	}
	ctx := context.Background()
	var span trace.Span
	if s.opts.Tracer != nil {
		key := string(jsonrpc.IDKey(id))
		cid, _ := s.clientID(id, key)
		ctx, span = s.startCallSpan(ctx, call.Meta, call.Name, cid, key)
	}
	s.countInvalid(ctx, call.Name)
	endSpanWith(span, jsonrpc.Errorf(code, "").Object())
}

// countInvalid counts a tools/call of the tool name refused before any
// policy routed it, as invalid: in shadow mode too, since it went
// nowhere. It is answered at once, so the tool is labelled by what is
// known of it then. ctx holds the call's span, if it has one.
func (s *Session) countInvalid(ctx context.Context, name string) {
	if s.opts.Interceptor == nil {
		return
	}
	info := s.knownTool(name)
	s.opts.Interceptor.Unsent(ctx, intercept.Tool{Name: name, Listed: info.listed}, info.policy.Class, "invalid")
}
