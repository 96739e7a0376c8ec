package proxy

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/telemetry"
)

const (
	clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpan  = "00f067aa0ba902b7"
	traceparent = "00-" + clientTrace + "-" + clientSpan + "-01"
)

// tracedRig is a rig whose proxy traces into the returned recorder.
func tracedRig(t *testing.T) (*rig, *tracetest.SpanRecorder) {
	t.Helper()
	return tracedRigShadow(t, false)
}

// tracedRigShadow is tracedRig, its proxy in shadow mode if shadow.
func tracedRigShadow(t *testing.T, shadow bool) (*rig, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")
	store := telemetry.TraceStore(memstore.New(memstore.Options{}), tracer)
	in := intercept.New(intercept.Options{Store: store, Hasher: fingerprint.NewRandom(), Tracer: tracer, Shadow: shadow})
	r := newRigOptions(t, 0, Options{Interceptor: in, Tracer: tracer})
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	r.upstream.next(t, "upstream")
	r.upstream.send(t, `{"jsonrpc":"2.0","id":1,"result":{"tools":[`+
		`{"name":"echo","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}},`+
		`{"name":"charge_card","inputSchema":{"type":"object"}}]}}`)
	r.client.next(t, "client")
	return r, rec
}

// upstreamParent returns the traceparent in the _meta of a frame the
// upstream got.
func upstreamParent(t *testing.T, frame string) string {
	t.Helper()
	m, err := jsonrpc.Decode([]byte(frame))
	if err != nil {
		t.Fatal(err)
	}
	return telemetry.FromMeta(jsonrpc.Member(m.Params, "_meta")).Parent
}

// endedSpan returns the one ended span called name, waiting a moment for
// it: a span may end after the client got the answer.
func endedSpan(t *testing.T, rec *tracetest.SpanRecorder, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for deadline := time.Now().Add(5 * time.Second); len(found) == 0 && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		for _, s := range rec.Ended() {
			if s.Name() == name {
				found = append(found, s)
			}
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d ended spans called %q; want 1", len(found), name)
	}
	return found[0]
}

func attribute(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// TestPassedThroughCallsAreTraced: a call the proxy passes upstream as it
// came is still a span of the client's trace, and the upstream gets that
// span as its parent in place of the client's, the rest of the frame
// kept.
func TestPassedThroughCallsAreTraced(t *testing.T) {
	r, rec := tracedRig(t)
	r.client.send(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"a":1},"_meta":{"traceparent":"`+traceparent+`","progressToken":"p"}},"extra":true}`)
	got := r.upstream.next(t, "upstream")
	r.upstream.send(t, `{"jsonrpc":"2.0","id":7,"result":{"content":[]}}`)
	r.client.next(t, "client")
	span := endedSpan(t, rec, "tools/call echo")
	if sc := span.Parent(); sc.TraceID().String() != clientTrace || sc.SpanID().String() != clientSpan {
		t.Errorf("the call's span is under %v; want the client's span %s", sc, traceparent)
	}
	if want := "00-" + clientTrace + "-" + span.SpanContext().SpanID().String() + "-01"; upstreamParent(t, got) != want {
		t.Errorf("the upstream got %s; want its traceparent to be the call's span, %s", got, want)
	}
	for _, kept := range []string{`"arguments":{"a":1}`, `"progressToken":"p"`, `"extra":true`} {
		if !strings.Contains(got, kept) {
			t.Errorf("the upstream got %s; want %s kept", got, kept)
		}
	}
	if d := attribute(span, "mcp_idempotent.decision"); d != "passed_through" {
		t.Errorf("decision %q; want passed_through", d)
	}
}

// TestRecordedCallsAreTraced: a recorded call's span names its decision
// and execution; its send upstream is a child span, which the upstream
// gets as its parent; and an error answer marks the call's span.
func TestRecordedCallsAreTraced(t *testing.T) {
	r, rec := tracedRig(t)
	r.client.send(t, `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"charge_card","arguments":{},"_meta":{"traceparent":"`+traceparent+`"}}}`)
	got := r.upstream.next(t, "upstream")
	var m struct {
		ID json.RawMessage `json:"id"`
	}
	json.Unmarshal([]byte(got), &m)
	r.upstream.send(t, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"error":{"code":-32000,"message":"card declined"}}`)
	if answer := r.client.next(t, "client"); !strings.Contains(answer, "card declined") {
		t.Fatalf("the client got %s; want the upstream's error", answer)
	}
	call := endedSpanOfKind(t, rec, "tools/call charge_card", "server")
	send := endedSpanOfKind(t, rec, "tools/call charge_card", "client")
	if send.Parent().SpanID() != call.SpanContext().SpanID() {
		t.Errorf("the send is under %v; want the call's span", send.Parent().SpanID())
	}
	if want := "00-" + clientTrace + "-" + send.SpanContext().SpanID().String() + "-01"; upstreamParent(t, got) != want {
		t.Errorf("the upstream got traceparent %q; want the send's span, %s", upstreamParent(t, got), want)
	}
	if d := attribute(call, "mcp_idempotent.decision"); d != "new" {
		t.Errorf("decision %q; want new", d)
	}
	if id := attribute(call, "mcp_idempotent.execution.id"); !strings.HasPrefix(id, "exe_") {
		t.Errorf("execution %q; want the execution's id", id)
	}
	if call.Status().Code != codes.Error || send.Status().Code != codes.Error || attribute(call, "rpc.response.status_code") != "-32000" {
		t.Errorf("call status %v (code %q), send status %v; want both errors, the call's code -32000",
			call.Status(), attribute(call, "rpc.response.status_code"), send.Status())
	}
}

// TestShadowCallsAreTraced: in shadow mode a recorded call's span says
// passed_through, as calls_total does, and the spans of what the proxy
// judged (the store's, the send's) are its children in the client's
// trace, not a trace of their own.
func TestShadowCallsAreTraced(t *testing.T) {
	r, rec := tracedRigShadow(t, true)
	r.client.send(t, `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"charge_card","arguments":{},"_meta":{"traceparent":"`+traceparent+`"}}}`)
	got := r.upstream.next(t, "upstream")
	r.upstream.send(t, `{"jsonrpc":"2.0","id":8,"result":{"content":[]}}`)
	if answer := r.client.next(t, "client"); answer != `{"jsonrpc":"2.0","id":8,"result":{"content":[]}}` {
		t.Fatalf("the client got %s; want the upstream's answer as it came", answer)
	}
	call := endedSpanOfKind(t, rec, "tools/call charge_card", "server")
	if want := "00-" + clientTrace + "-" + call.SpanContext().SpanID().String() + "-01"; upstreamParent(t, got) != want {
		t.Errorf("the upstream got traceparent %q; want the call's span, %s", upstreamParent(t, got), want)
	}
	if d := attribute(call, "mcp_idempotent.decision"); d != "passed_through" {
		t.Errorf("decision %q; want passed_through", d)
	}
	for _, name := range []string{"store reserve", "store update"} {
		s := endedSpanOfKind(t, rec, name, "internal")
		if s.Parent().TraceID().String() != clientTrace || s.Parent().SpanID() != call.SpanContext().SpanID() {
			t.Errorf("%s is under %v; want the call's span", name, s.Parent())
		}
	}
	send := endedSpanOfKind(t, rec, "tools/call charge_card", "client")
	if send.Parent().TraceID().String() != clientTrace || send.Parent().SpanID() != call.SpanContext().SpanID() {
		t.Errorf("the send is under %v; want the call's span", send.Parent())
	}
}

func endedSpanOfKind(t *testing.T, rec *tracetest.SpanRecorder, name, kind string) sdktrace.ReadOnlySpan {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		for _, s := range rec.Ended() {
			if s.Name() == name && s.SpanKind().String() == kind {
				return s
			}
		}
	}
	t.Fatalf("no ended %s span called %q", kind, name)
	return nil
}
