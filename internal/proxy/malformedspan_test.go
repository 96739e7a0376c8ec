package proxy

import (
	"strings"
	"testing"
)

// TestMalformedShadowCallIsTraced: in shadow mode a malformed call (its
// arguments no object) passes upstream as it came, and is traced as
// other calls are: its span is under the client's, says invalid, ends
// with the answer, and goes upstream as the parent in place of the
// client's.
func TestMalformedShadowCallIsTraced(t *testing.T) {
	r, rec := tracedRigShadow(t, true)
	r.client.send(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"charge_card","arguments":"x","_meta":{"traceparent":"`+traceparent+`"}}}`)
	got := r.upstream.next(t, "upstream")
	if !strings.Contains(got, `"arguments":"x"`) {
		t.Errorf("the upstream got %s; want the arguments as they came", got)
	}
	r.upstream.send(t, `{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"bad arguments"}}`)
	r.client.next(t, "client")
	span := endedCallSpanOf(t, rec, "charge_card")
	if p := span.Parent(); p.TraceID().String() != clientTrace || p.SpanID().String() != clientSpan {
		t.Errorf("the call's span is under %v; want the client's span", p)
	}
	if want := "00-" + clientTrace + "-" + span.SpanContext().SpanID().String() + "-01"; upstreamParent(t, got) != want {
		t.Errorf("the upstream got traceparent %q; want the call's span, %s", upstreamParent(t, got), want)
	}
	if d := attribute(span, "mcp_idempotent.decision"); d != "passed_through" {
		t.Errorf("decision %q; want passed_through, what calls_total counts", d)
	}
	if attribute(span, "rpc.response.status_code") != "-32602" {
		t.Errorf("status code %q; want the answer's, -32602", attribute(span, "rpc.response.status_code"))
	}
}

// TestMalformedMetaShadowCallGoesAsItCame: a call whose _meta is no
// object has no room for the proxy's span: it goes upstream as it came,
// and its span starts a trace of its own.
func TestMalformedMetaShadowCallGoesAsItCame(t *testing.T) {
	r, rec := tracedRigShadow(t, true)
	frame := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"charge_card","arguments":{},"_meta":["x"]}}`
	r.client.send(t, frame)
	if got := r.upstream.next(t, "upstream"); got != frame {
		t.Errorf("the upstream got %s; want %s", got, frame)
	}
	r.upstream.send(t, `{"jsonrpc":"2.0","id":7,"result":{"content":[]}}`)
	r.client.next(t, "client")
	endedCallSpanOf(t, rec, "charge_card")
}
