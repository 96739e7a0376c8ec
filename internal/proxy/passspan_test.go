package proxy

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

// passedCalls are the calls that go upstream as they came: a read-only
// tool's, and in shadow mode every call.
var passedCalls = []struct {
	shadow bool
	tool   string
}{{false, "echo"}, {true, "echo"}, {true, "charge_card"}}

// endedCallSpans returns the ended server spans of tools/calls of tool.
func endedCallSpans(rec *tracetest.SpanRecorder, tool string) []sdktrace.ReadOnlySpan {
	var found []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "tools/call "+tool && s.SpanKind().String() == "server" {
			found = append(found, s)
		}
	}
	return found
}

// TestPassedCallSpanTakesTheAnswer: the span of a call passed upstream
// as it came lasts until its answer, and an error answer sets its
// status, as for any other call.
func TestPassedCallSpanTakesTheAnswer(t *testing.T) {
	for _, pc := range passedCalls {
		t.Run(fmt.Sprint("shadow=", pc.shadow, "/", pc.tool), func(t *testing.T) {
			r, rec := tracedRigShadow(t, pc.shadow)
			r.client.send(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"`+pc.tool+`","arguments":{}}}`)
			r.upstream.next(t, "upstream")
			// The next frame is read only once the call was forwarded and
			// the reading goroutine is done with it.
			r.client.send(t, `{"jsonrpc":"2.0","id":8,"method":"ping"}`)
			r.upstream.next(t, "upstream")
			if n := len(endedCallSpans(rec, pc.tool)); n != 0 {
				t.Fatalf("%d call spans ended before the answer came; want 0", n)
			}
			r.upstream.send(t, `{"jsonrpc":"2.0","id":7,"error":{"code":-32001,"message":"no"}}`)
			if got := r.client.next(t, "client"); !strings.Contains(got, "-32001") {
				t.Fatalf("the client got %s; want the upstream's error", got)
			}
			s := endedCallSpanOf(t, rec, pc.tool)
			if s.Status().Code != codes.Error || attribute(s, "rpc.response.status_code") != "-32001" {
				t.Errorf("span status %v, code %q; want an error, -32001", s.Status(), attribute(s, "rpc.response.status_code"))
			}
		})
	}
}

// TestPassedCallSpanEndsWithTheUpstream: a call passed as it came whose
// upstream exits before answering ends its span with the error the
// client is told.
func TestPassedCallSpanEndsWithTheUpstream(t *testing.T) {
	for _, pc := range passedCalls {
		t.Run(fmt.Sprint("shadow=", pc.shadow, "/", pc.tool), func(t *testing.T) {
			r, rec := tracedRigShadow(t, pc.shadow)
			r.client.send(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"`+pc.tool+`","arguments":{}}}`)
			r.upstream.next(t, "upstream")
			r.upstreamW.Close()
			if got := r.client.next(t, "client"); !strings.Contains(got, "-32603") {
				t.Fatalf("the client got %s; want the call answered with an error", got)
			}
			s := endedCallSpanOf(t, rec, pc.tool)
			if s.Status().Code != codes.Error || attribute(s, "rpc.response.status_code") != "-32603" {
				t.Errorf("span status %v, code %q; want an error, -32603", s.Status(), attribute(s, "rpc.response.status_code"))
			}
		})
	}
}

// TestPassedCallSpanEndsOnCancel: a call passed as it came that its
// client cancels ends its span then, once; an answer that comes after
// ends nothing more.
func TestPassedCallSpanEndsOnCancel(t *testing.T) {
	for _, pc := range passedCalls {
		t.Run(fmt.Sprint("shadow=", pc.shadow, "/", pc.tool), func(t *testing.T) {
			r, rec := tracedRigShadow(t, pc.shadow)
			r.client.send(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"`+pc.tool+`","arguments":{}}}`)
			r.upstream.next(t, "upstream")
			r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`)
			r.upstream.next(t, "upstream") // the cancellation, passed on
			s := endedCallSpanOf(t, rec, pc.tool)
			if s.Status().Code == codes.Error {
				t.Errorf("span status %v; want none: the caller left", s.Status())
			}
			r.upstream.send(t, `{"jsonrpc":"2.0","id":7,"error":{"code":-32800,"message":"cancelled"}}`)
			r.client.send(t, `{"jsonrpc":"2.0","id":9,"method":"ping"}`)
			r.upstream.next(t, "upstream")
			if n := len(endedCallSpans(rec, pc.tool)); n != 1 {
				t.Errorf("%d call spans ended; want 1", n)
			}
		})
	}
}

// TestPassedCallSpanEndsWithTheSession: a call passed as it came still
// unanswered when the session ends ends its span with the error the
// client is told.
func TestPassedCallSpanEndsWithTheSession(t *testing.T) {
	r, rec := tracedRigShadow(t, false)
	r.client.send(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{}}}`)
	r.upstream.next(t, "upstream")
	r.clientW.Close()
	if got := r.client.next(t, "client"); !strings.Contains(got, "-32603") {
		t.Fatalf("the client got %s; want the call answered with an error", got)
	}
	s := endedCallSpanOf(t, rec, "echo")
	if s.Status().Code != codes.Error || attribute(s, "rpc.response.status_code") != "-32603" {
		t.Errorf("span status %v, code %q; want an error, -32603", s.Status(), attribute(s, "rpc.response.status_code"))
	}
}

// endedCallSpanOf returns the one ended server span of a tools/call of
// tool, waiting for it: it may end on another goroutine than the one
// that answered.
func endedCallSpanOf(t *testing.T, rec *tracetest.SpanRecorder, tool string) sdktrace.ReadOnlySpan {
	t.Helper()
	return endedSpanOfKind(t, rec, "tools/call "+tool, "server")
}

// TestPassedCallSpanEndsWithAnUnreadableAnswer: a call passed as it came
// whose answer is not JSON gets that frame as it came, and its span ends
// then, with the parse error the frame is, not when the session ends.
func TestPassedCallSpanEndsWithAnUnreadableAnswer(t *testing.T) {
	for _, pc := range passedCalls {
		t.Run(fmt.Sprint("shadow=", pc.shadow, "/", pc.tool), func(t *testing.T) {
			r, rec := tracedRigShadow(t, pc.shadow)
			r.client.send(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"`+pc.tool+`","arguments":{}}}`)
			r.upstream.next(t, "upstream")
			const broken = `{"jsonrpc":"2.0","id":7,"result":{"content":[}}`
			r.upstream.send(t, broken)
			if got := r.client.next(t, "client"); got != broken {
				t.Fatalf("the client got %s; want the upstream's frame as it came", got)
			}
			s := endedCallSpanOf(t, rec, pc.tool)
			if s.Status().Code != codes.Error || attribute(s, "rpc.response.status_code") != "-32700" {
				t.Errorf("span status %v, code %q; want an error, -32700", s.Status(), attribute(s, "rpc.response.status_code"))
			}
		})
	}
}

// TestShadowBatchCallSpans: in shadow mode each tools/call of a batch,
// passed upstream as it came, gets its call span, as one alone does:
// under the client's span, passed_through, lasting until its answer,
// which sets its status.
func TestShadowBatchCallSpans(t *testing.T) {
	r, rec := tracedRigShadow(t, true)
	r.client.send(t, `[{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{},"_meta":{"traceparent":"`+traceparent+`"}}},`+
		`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"charge_card","arguments":{}}}]`)
	r.upstream.next(t, "upstream")
	r.client.send(t, `{"jsonrpc":"2.0","id":9,"method":"ping"}`)
	r.upstream.next(t, "upstream")
	if n := len(endedCallSpans(rec, "echo")) + len(endedCallSpans(rec, "charge_card")); n != 0 {
		t.Fatalf("%d call spans ended before the answers came; want 0", n)
	}
	r.upstream.send(t, `[{"jsonrpc":"2.0","id":7,"result":{"content":[]}},{"jsonrpc":"2.0","id":8,"error":{"code":-32001,"message":"no"}}]`)
	r.client.next(t, "client")
	echo, charge := endedCallSpanOf(t, rec, "echo"), endedCallSpanOf(t, rec, "charge_card")
	if echo.Status().Code == codes.Error || attribute(echo, "jsonrpc.request.id") != "7" {
		t.Errorf("echo's span: status %v, id %q; want no error, 7", echo.Status(), attribute(echo, "jsonrpc.request.id"))
	}
	if charge.Status().Code != codes.Error || attribute(charge, "rpc.response.status_code") != "-32001" {
		t.Errorf("charge_card's span: status %v, code %q; want an error, -32001", charge.Status(), attribute(charge, "rpc.response.status_code"))
	}
	if p := echo.Parent(); p.TraceID().String() != clientTrace || p.SpanID().String() != clientSpan {
		t.Errorf("echo's span is under %v; want the client's span %s", p, traceparent)
	}
	for _, s := range []sdktrace.ReadOnlySpan{echo, charge} {
		if d := attribute(s, "mcp_idempotent.decision"); d != "passed_through" {
			t.Errorf("%s: decision %q; want passed_through", s.Name(), d)
		}
	}
}

// TestShadowBatchCallSpansEndWithTheUpstream: the spans of a batch's
// calls in shadow mode that the upstream leaves unanswered end with the
// error the client is told.
func TestShadowBatchCallSpansEndWithTheUpstream(t *testing.T) {
	r, rec := tracedRigShadow(t, true)
	r.client.send(t, `[{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{}}}]`)
	r.upstream.next(t, "upstream")
	r.upstreamW.Close()
	if got := r.client.next(t, "client"); !strings.Contains(got, "-32603") {
		t.Fatalf("the client got %s; want the call answered with an error", got)
	}
	s := endedCallSpanOf(t, rec, "echo")
	if s.Status().Code != codes.Error || attribute(s, "rpc.response.status_code") != "-32603" {
		t.Errorf("span status %v, code %q; want an error, -32603", s.Status(), attribute(s, "rpc.response.status_code"))
	}
}

// TestShadowBatchCallSpansEndWhenNotWritten: the spans of a batch's
// calls in shadow mode whose write upstream fails end with the error the
// client is told, that they were not sent.
func TestShadowBatchCallSpansEndWhenNotWritten(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom(), Tracer: tracer, Shadow: true})
	toClient, toUpstream := newCountedWriter(), newCountedWriter()
	r := newRigWriting(t, context.Background(), 0, Options{Interceptor: in, Tracer: tracer}, func(c Conn) Conn { return c }, toClient.wrap, toUpstream.wrap)
	toUpstream.fail.Store(true)
	r.client.send(t, `[{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{}}}]`)
	if got := r.client.next(t, "client"); !strings.Contains(got, "was not sent") {
		t.Fatalf("the client got %s; want the call answered that it was not sent", got)
	}
	s := endedCallSpanOf(t, rec, "echo")
	if s.Status().Code != codes.Error || attribute(s, "rpc.response.status_code") != "-32603" {
		t.Errorf("span status %v, code %q; want an error, -32603", s.Status(), attribute(s, "rpc.response.status_code"))
	}
}
