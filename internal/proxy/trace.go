package proxy

import (
	"go.opentelemetry.io/otel/trace"

	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
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
// from here on, and finish ends it.
func (s *Session) startSpan(c *clientCall) {
	parent := telemetry.FromMeta(c.call.Meta)
	if hc, ok := s.client.(traceHeaderConn); ok && parent.Parent == "" {
		parent.Parent, parent.State = hc.TraceHeaders(c.key())
	}
	var session string
	if sc, ok := s.client.(sessionConn); ok && !sc.Stateless() {
		session = sc.ID()
	}
	c.ctx.Context, _ = telemetry.StartCall(c.ctx.Context, s.opts.Tracer, parent, c.call.Name, c.id(), session)
}

// endSpan ends the span of c, if it is traced.
func (c *clientCall) endSpan() {
	if c.s.opts.Tracer != nil {
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
	if c.s.opts.Tracer != nil && a.Error != nil {
		telemetry.AnswerError(trace.SpanFromContext(c.ctx.Context), a.Error)
	}
}

// upstreamFrame returns the frame that passes c upstream as it came: the
// client's own, or, when traced, the client's with the call's span in
// place of the client's as the parent in _meta, so that the server's
// spans are the proxy's children. A malformed call goes as it came: its
// _meta may be no object to add to.
func (s *Session) upstreamFrame(c *clientCall) []byte {
	if s.opts.Tracer == nil || c.call.Malformed {
		return c.raw
	}
	carrier := telemetry.Inject(c.ctx.Context)
	members := carrier.MetaMembers()
	if members == nil {
		return c.raw
	}
	params, meta := carrier.WithoutStaleState(c.call.Params, c.call.MetaAsSent)
	params = jsonrpc.InsertMeta(params, meta, false, members)
	return jsonrpc.Replace(c.raw, c.call.Params, params)
}
