package proxy

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

// TestRefusedInUseCallIsTraced: a tools/call refused because its id is
// in use by a call still under way gets its span ended, marked with the
// refusal; a span left open is never exported, and the refusal would be
// missing from the trace.
func TestRefusedInUseCallIsTraced(t *testing.T) {
	r, rec := tracedRig(t)
	r.client.send(t, `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"charge_card","arguments":{"n":1}}}`)
	r.upstream.next(t, "upstream") // under way, not answered
	r.client.send(t, `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"charge_card","arguments":{"n":2},"_meta":{"traceparent":"`+traceparent+`"}}}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, "already in use") {
		t.Fatalf("the client got %s; want the id refused as in use", got)
	}
	var refused []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "tools/call charge_card" && s.Parent().SpanID().String() == clientSpan {
			refused = append(refused, s)
		}
	}
	if len(refused) != 1 {
		t.Fatalf("%d ended spans of the refused call; want 1 (started: %d)", len(refused), len(rec.Started()))
	}
	if s := refused[0]; s.Status().Code != codes.Error || attribute(s, "rpc.response.status_code") != "-32600" {
		t.Errorf("the refused call's span: status %v, code %q; want an error, -32600", s.Status(), attribute(s, "rpc.response.status_code"))
	}
}

// TestNotRunCallIsTraced: a tools/call that comes once the client has
// stopped reading, answered that it did not run, gets its span ended
// too, marked with that answer.
func TestNotRunCallIsTraced(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom(), Tracer: tracer})
	client, upstream := &deafSink{}, &sink{}
	s := New(client, upstream, Options{Interceptor: in, Tracer: tracer, Actor: "a", Scope: "s", UpstreamID: "u"})
	ctx := context.Background()
	s.fromClient(ctx, []byte(`{"jsonrpc":"2.0","id":"l","method":"tools/list","params":{}}`))
	s.fromUpstream(s.up, []byte(`{"jsonrpc":"2.0","id":"l","result":{"tools":[{"name":"charge_card","inputSchema":{"type":"object"}}]}}`))
	client.take()
	upstream.take()

	s.fromClient(ctx, []byte(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":200}}}`))
	if got := client.take(); !strings.Contains(string(got), "not run") {
		t.Fatalf("the client was written %s; want call 2 answered that it did not run", got)
	}
	ended := rec.Ended()
	if len(ended) != 1 || ended[0].Name() != "tools/call charge_card" || ended[0].Status().Code != codes.Error {
		t.Fatalf("ended spans %v of %d started; want the call's, marked an error", ended, len(rec.Started()))
	}
}

// TestRefusedAsItCameCallIsTraced: a tools/call refused as it came, for
// its envelope, id or _meta, or in a refused batch, is a span of the
// client's trace too, ended at once, marked with the refusal and the
// decision calls_total counts it under.
func TestRefusedAsItCameCallIsTraced(t *testing.T) {
	meta := `"_meta":{"traceparent":"` + traceparent + `"`
	refused := []struct{ name, frame, code string }{
		{"version", `{"jsonrpc":"1.0","id":5,"method":"tools/call","params":{"name":"charge_card","arguments":{},` + meta + `}}}`, "-32600"},
		{"protocol", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"charge_card","arguments":{},` + meta + `,"io.modelcontextprotocol/protocolVersion":"1999-01-01"}}}`, "-32022"},
		{"token", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"charge_card","arguments":{},` + meta + `,"progressToken":"mcp-idempotent:p"}}}`, "-32602"},
		{"id", `{"jsonrpc":"2.0","id":"mcp-idempotent:5","method":"tools/call","params":{"name":"charge_card","arguments":{},` + meta + `}}}`, "-32600"},
		{"meta", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"charge_card","arguments":{},` + meta + `,"mcp-idempotent/key":"a","mcp-idempotent/key":"b"}}}`, "-32602"},
		{"batch", `[{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"charge_card","arguments":{},` + meta + `}}}]`, "-32600"},
	}
	for _, rc := range refused {
		t.Run(rc.name, func(t *testing.T) {
			r, rec := tracedRig(t)
			r.client.send(t, rc.frame)
			if got := r.client.next(t, "client"); !strings.Contains(got, `"error"`) {
				t.Fatalf("the client got %s; want the call refused", got)
			}
			s := endedCallSpanOf(t, rec, "charge_card")
			if s.Parent().SpanID().String() != clientSpan {
				t.Errorf("the span is under %v; want the client's", s.Parent())
			}
			if s.Status().Code != codes.Error || attribute(s, "rpc.response.status_code") != rc.code || attribute(s, "mcp_idempotent.decision") != "invalid" {
				t.Errorf("span status %v, code %q, decision %q; want an error, %s, invalid",
					s.Status(), attribute(s, "rpc.response.status_code"), attribute(s, "mcp_idempotent.decision"), rc.code)
			}
		})
	}
}
