package proxy

import (
	"context"
	"encoding/json"

	"go.opentelemetry.io/otel/trace"

	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/telemetry"
)

// A traceHeaderConn is a client Conn that carries W3C trace context
// beside the frames, from each HTTP request's headers
// (streamhttp.ServerSession).
type traceHeaderConn interface {
	TraceHeaders(key string) (traceparent, tracestate string)
}

// A sessionConn is a client Conn that names its session
// (streamhttp.ServerSession); a stateless one has none.
type sessionConn interface {
	ID() string
	Stateless() bool
}

// startSpan starts the span of the client's call c, parented to the
// trace context that came with it: in its _meta, else in the headers of
// the HTTP request that carried it. The call's context holds the span
// from here on, and finish ends it, unless a request passing the call
// upstream as it came took it (callSpan).
func (s *Session) startSpan(c *clientCall) {
	c.ctx.Context, _ = s.startCallSpan(c.ctx.Context, c.call.Meta, c.call.Name, c.req.ID, c.key())
}

// startCallSpan starts the span of the client's call of tool, whose id is
// id as the client sent it and key as the client Conn passed it
// (clientID), and whose _meta is meta, in ctx: parented as startSpan
// says.
func (s *Session) startCallSpan(ctx context.Context, meta json.RawMessage, tool string, id json.RawMessage, key string) (context.Context, trace.Span) {
	parent, session := s.callParent(meta, key)
	return telemetry.StartCall(ctx, s.opts.Tracer, parent, tool, id, session)
}

// callParent returns the trace context the client's call passed under
// key, whose _meta is meta, came with, and the id of its session: what
// its span is started with (startCallSpan). It asks the client's
// transport, so s.mu must not be held.
func (s *Session) callParent(meta json.RawMessage, key string) (parent telemetry.Carrier, session string) {
	parent = telemetry.FromMeta(meta)
	if hc, ok := s.client.(traceHeaderConn); ok && parent.Parent == "" {
		parent.Parent, parent.State = hc.TraceHeaders(key)
	}
	if sc, ok := s.client.(sessionConn); ok && !sc.Stateless() {
		session = sc.ID()
	}
	return parent, session
}

// A batchCall is a tools/call of a client's batch in shadow mode, passed
// upstream as it came.
type batchCall struct {
	call mcp.ToolCall
	id   json.RawMessage
	// parent and session are what its span is started with (callParent),
	// read before s.mu is held; the span starts once the batch is taken.
	parent  telemetry.Carrier
	session string
}

// startBatchSpansLocked starts the span of each of calls, the tools/calls
// of a batch now taken, and returns them by request key, nil if untraced:
// each ends with its request's answer (forgetLocked), as a call's passed
// alone does. Started under s.mu, once no refusal can come, which would
// trace the calls itself (refuseBatch). s.mu must be held.
func (s *Session) startBatchSpansLocked(calls []batchCall) map[string]trace.Span {
	if s.opts.Tracer == nil || len(calls) == 0 {
		return nil
	}
	spans := make(map[string]trace.Span, len(calls))
	for _, c := range calls {
		_, span := telemetry.StartCall(context.Background(), s.opts.Tracer, c.parent, c.call.Name, c.id, c.session)
		// As shadowTrace marks a call alone: passedRefused counts it
		// once the lock is let go, when its answer may have ended it.
		span.SetAttributes(telemetry.Decision.String("passed_through"))
		spans[string(jsonrpc.IDKey(c.id))] = span
	}
	return spans
}

// endSpan ends the span of c, if it is traced and no request passing it
// upstream took the span (callSpan).
func (c *clientCall) endSpan() {
	// Small enough to be inlined: an untraced call pays one test.
	if c.s.opts.Tracer != nil {
		c.endTracedSpan()
	}
}

// endTracedSpan is endSpan with a tracer.
func (c *clientCall) endTracedSpan() {
	if !c.spanForwarded.Load() {
		trace.SpanFromContext(c.ctx.Context).End()
	}
}

// endRefused ends the span of c, a call refused with e before it was
// taken in (finish never runs for it), marked with e: a span left open is
// never exported.
func (c *clientCall) endRefused(e *jsonrpc.Error) {
	c.traceAnswer(intercept.Answer{Error: e.Object()})
	c.endSpan()
}

// traceAnswer marks c's span with a, the answer it gets, if it is an
// error.
func (c *clientCall) traceAnswer(a intercept.Answer) {
	// Small enough to be inlined: an untraced call pays one test.
	if c.s.opts.Tracer != nil && a.Error != nil {
		c.traceAnswerError(a.Error)
	}
}

// traceAnswerError is traceAnswer for an error answer with a tracer.
func (c *clientCall) traceAnswerError(e json.RawMessage) {
	telemetry.AnswerError(trace.SpanFromContext(c.ctx.Context), e)
}

// upstreamFrame returns the frame that passes c upstream as it came: the
// client's own, or, when traced, the client's with the call's span in
// place of the client's as the parent in _meta, so that the server's
// spans are the proxy's children. A call whose _meta is no object goes
// as it came: there is nothing to add to, and replacing it would change
// what the client sent.
func (s *Session) upstreamFrame(c *clientCall) []byte {
	if s.opts.Tracer == nil || c.call.Malformed && c.call.Meta != nil && c.call.Meta[0] != '{' {
		return c.raw
	}
	carrier := telemetry.Inject(c.ctx.Context)
	members := carrier.MetaMembers()
	if members == nil {
		return c.raw
	}
	params, meta := carrier.WithoutStaleState(c.call.Params, c.call.MetaAsSent())
	params = jsonrpc.InsertMeta(params, meta, false, members)
	return jsonrpc.Replace(c.raw, c.call.Params, params)
}

// callSpan returns the span of c for a request that passes it upstream
// as it came to end (forward), nil if untraced: c's own ending (finish)
// leaves it open from here on.
func (c *clientCall) callSpan() trace.Span {
	if c.s.opts.Tracer == nil {
		return nil
	}
	c.spanForwarded.Store(true)
	return trace.SpanFromContext(c.ctx.Context)
}

// endSpanWith ends span, if not nil, marked with e, an error answer.
func endSpanWith(span trace.Span, e json.RawMessage) {
	if span != nil {
		telemetry.AnswerError(span, e)
		span.End()
	}
}

// traceError marks f's span, if any, with e, the error answer the client
// gets for it, if not nil.
func (f *forwardedRequest) traceError(e json.RawMessage) {
	if f.span != nil && e != nil {
		telemetry.AnswerError(f.span, e)
	}
}

// endSpan ends f's span, if any: f is forgotten.
func (f *forwardedRequest) endSpan() {
	if f.span != nil {
		f.span.End()
	}
}

// endUnreadSpan ends the span of the client's request under key, if it
// has one, whose answer from the upstream is not JSON: the frame passes
// on as it came and the request stays remembered (unreadableAnswer), but
// no outcome will be read of it, and its span would stay open until the
// session ends. It takes the parse error the frame is to a reader.
func (s *Session) endUnreadSpan(key string) {
	s.mu.Lock()
	f, ok := s.forwarded[key]
	span := f.span
	if ok && span != nil {
		f.span = nil
		s.forwarded[key] = f
	}
	s.mu.Unlock()
	endSpanWith(span, unreadError)
}

// unreadError is the error object of an answer that is not JSON.
var unreadError = jsonrpc.Errorf(jsonrpc.CodeParseError, "").Object()

// internalError is the error object a request is answered with when the
// proxy answers it itself for the upstream (-32603): what traceError
// reads of it is its code.
var internalError = jsonrpc.Errorf(jsonrpc.CodeInternalError, "").Object()
