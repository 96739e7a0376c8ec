package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

// The attributes of the proxy's spans: OpenTelemetry's MCP semantic
// conventions where they name a thing, the proxy's own beside them.
const (
	MethodName    = attribute.Key("mcp.method.name")
	SessionID     = attribute.Key("mcp.session.id")
	ToolName      = attribute.Key("gen_ai.tool.name")
	OperationName = attribute.Key("gen_ai.operation.name")
	RequestID     = attribute.Key("jsonrpc.request.id")
	ErrorType     = attribute.Key("error.type")
	StatusCode    = attribute.Key("rpc.response.status_code")

	// Decision is what became of the call: new, attached, replayed,
	// passed_through, and the rest that the decisions metric counts.
	Decision = attribute.Key("mcp_idempotent.decision")
	// Execution is the execution the call ran or matched.
	Execution = attribute.Key("mcp_idempotent.execution.id")
	// State is the execution's state when the call was answered; on a
	// store span, the state a change moves it to.
	State = attribute.Key("mcp_idempotent.state")
	// Attempts counts the sends of the call's execution; Attempt numbers
	// one send.
	Attempts = attribute.Key("mcp_idempotent.attempts")
	Attempt  = attribute.Key("mcp_idempotent.attempt")
	// Approver names who was asked to approve an execution: client or
	// operator. Approval is what came of the ask: approved, refused,
	// timeout, or none (the ask ended without a decision).
	Approver = attribute.Key("mcp_idempotent.approver")
	Approval = attribute.Key("mcp_idempotent.approval")
)

// MaxToolName bounds the length, in bytes, of a tool's name in a span's
// name and its gen_ai.tool.name: the MCP specification has tool names of
// at most 128 characters. The name is the client's, who may send one of
// megabytes; each span would carry it twice, and the exporter's queue
// hold thousands of them, or a collector refuse the batch that holds one.
const MaxToolName = 128

// toolName is tool as a span shows it: cut.
func toolName(tool string) string { return cut(tool) }

// cut is s cut to MaxToolName bytes, on a character's boundary, and
// marked with "…" where it was cut.
func cut(s string) string {
	if len(s) <= MaxToolName {
		return s
	}
	n := MaxToolName
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// StartCall starts the span of a tools/call of tool that the proxy
// received as request id, in session (empty over stdio), parented to the
// trace context that came with it. The span ends when the call is
// answered or passed upstream.
func StartCall(ctx context.Context, t trace.Tracer, parent Carrier, tool string, id json.RawMessage, session string) (context.Context, trace.Span) {
	tool = toolName(tool)
	attrs := []attribute.KeyValue{
		MethodName.String("tools/call"),
		ToolName.String(tool),
		OperationName.String("execute_tool"),
		RequestID.String(requestID(id)),
	}
	if session != "" {
		attrs = append(attrs, SessionID.String(session))
	}
	return t.Start(parent.Extract(ctx), "tools/call "+tool, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
}

// StartSend starts the span of one send of a tools/call of tool
// upstream, the attempt-th of its execution, under ctx's span.
func StartSend(ctx context.Context, t trace.Tracer, tool string, attempt int) (context.Context, trace.Span) {
	tool = toolName(tool)
	return t.Start(ctx, "tools/call "+tool, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		MethodName.String("tools/call"),
		ToolName.String(tool),
		Attempt.Int(attempt),
	))
}

// StartElicitation starts the span of the elicitation/create request by
// which the proxy asks the client's user to approve an execution of tool,
// under ctx's span: the time the call waited for its user.
func StartElicitation(ctx context.Context, t trace.Tracer, tool string) (context.Context, trace.Span) {
	tool = toolName(tool)
	return t.Start(ctx, "elicitation/create", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		MethodName.String("elicitation/create"),
		ToolName.String(tool),
		Approver.String("client"),
	))
}

// EndSend ends a send's span with the outcome the upstream gave: err is
// nil for a result, else a JSON-RPC error or a failure to get an answer.
//
// A JSON-RPC error is described by its code alone: the upstream's
// message may quote the call's arguments (a card number), which a
// trace backend must not get; a malformed answer without its first
// bytes, which may be the tool's result.
func EndSend(span trace.Span, err error) {
	var (
		rpc       *jsonrpc.Error
		malformed *retry.MalformedError
	)
	switch {
	case errors.As(err, &rpc):
		span.SetStatus(codes.Error, rpcStatus(rpc.Code))
	case errors.As(err, &malformed):
		span.SetStatus(codes.Error, malformed.Summary())
	case err != nil:
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// AnswerError marks a call's span with the JSON-RPC error object it was
// answered with: its code, not its message, which may be the upstream's
// and quote the call's arguments (as EndSend).
func AnswerError(span trace.Span, errObject json.RawMessage) {
	var e struct {
		Code int `json:"code"`
	}
	_ = json.Unmarshal(errObject, &e)
	span.SetAttributes(ErrorType.String(strconv.Itoa(e.Code)), StatusCode.Int(e.Code))
	span.SetStatus(codes.Error, rpcStatus(e.Code))
}

// rpcStatus is the status description of a JSON-RPC error answer.
func rpcStatus(code int) string {
	return "JSON-RPC error " + strconv.Itoa(code)
}

// requestID renders a JSON-RPC id as its attribute: a string's text, a
// number's digits, cut as a tool's name is (toolName): the id is the
// client's, of any length.
func requestID(id json.RawMessage) string {
	var s string
	if json.Unmarshal(id, &s) == nil {
		return cut(s)
	}
	return cut(string(id))
}
