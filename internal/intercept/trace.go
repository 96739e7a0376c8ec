package intercept

import (
	"context"
	"encoding/json"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/telemetry"
)

// The span of a call is its caller's: the caller starts it, in the
// context Handle is given, and ends it once the call is answered. The
// interceptor adds what it decided and, with Options.Tracer, a span for
// each send upstream. Without a tracer none of this costs more than a
// nil check.

// decided tells the observer, and the call's span, what became of req's
// call to tool.
func (in *Interceptor) decided(req *Request, tool string, decision string) {
	in.obs.Decision(Tool{Name: tool, Listed: req.Listed}, req.Policy.Class, decision)
	if in.tracer != nil {
		trace.SpanFromContext(req.bg()).SetAttributes(telemetry.Decision.String(decision))
	}
}

// traceRecord marks req's span with the execution rec, in the state the
// call found or left it, and its sends so far: a call answered from the
// record sends nothing itself, and its span says what the execution took.
func (in *Interceptor) traceRecord(req *Request, rec *record.Record) {
	// Small enough to be inlined, as journalize: a proxy without a
	// tracer pays one test on every transition, and no call.
	if in.tracer != nil {
		markRecord(req, rec)
	}
}

// markRecord is traceRecord with a tracer.
func markRecord(req *Request, rec *record.Record) {
	trace.SpanFromContext(req.bg()).SetAttributes(telemetry.Execution.String(rec.ID),
		telemetry.State.String(string(rec.State)), telemetry.Attempts.Int(rec.Attempts))
}

// traceAsk starts the span of the question to req's caller's user, under
// the call's span, and returns the context to ask in and the function
// that ends the span with the decision the answer made.
func (in *Interceptor) traceAsk(req *Request) (context.Context, func(record.Change)) {
	if in.tracer == nil {
		return req.bg(), func(record.Change) {}
	}
	ctx, span := telemetry.StartElicitation(req.bg(), in.tracer, req.Call.Name)
	return ctx, func(c record.Change) {
		span.SetAttributes(telemetry.Approval.String(approvalOutcome(c)))
		span.End()
	}
}

// approvalOutcome names what a decision on an approval came to.
func approvalOutcome(c record.Change) string {
	switch {
	case c.To == record.Authorized:
		return "approved"
	case c.Via == record.ViaTimeout:
		return "timeout"
	case c.To == record.Refused:
		return "refused"
	}
	return "none"
}

// traceEvent adds an event to req's span: a wait the proxy made.
func (in *Interceptor) traceEvent(req *Request, name string, wait time.Duration, attrs ...attribute.KeyValue) {
	if in.tracer != nil {
		attrs = append(attrs, attribute.Int64("mcp_idempotent.wait_ms", wait.Milliseconds()))
		trace.SpanFromContext(req.bg()).AddEvent(name, trace.WithAttributes(attrs...))
	}
}

// traceSend starts the span of the execution's next send, under its
// call's, and returns the context to send in, the trace context that
// carries the span upstream in the call's _meta, and done wrapped to end
// the span.
func (e *execution) traceSend(ctx context.Context, done Answered) (context.Context, telemetry.Carrier, Answered) {
	ctx, span := telemetry.StartSend(ctx, e.in.tracer, e.tool(), e.n+1)
	trace.SpanFromContext(e.req.bg()).SetAttributes(telemetry.Attempts.Int(e.n + 1))
	return ctx, telemetry.Inject(ctx), AnsweredFunc(func(result json.RawMessage, err error) {
		telemetry.EndSend(span, err)
		done.Answered(result, err)
	})
}
