package proxy

import (
	"encoding/json"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/telemetry"
)

// TestTracestateGoesWithItsTraceparent: W3C trace context says a
// tracestate belongs to the traceparent it came with. A client's
// tracestate goes upstream beside the proxy's span when the client's
// traceparent is its parent; with a traceparent that is malformed or
// absent, the proxy's span starts a new trace, and the client's
// tracestate is not sent beside it.
func TestTracestateGoesWithItsTraceparent(t *testing.T) {
	for _, tt := range []struct{ name, meta, state string }{
		{"valid", `{"traceparent":"` + traceparent + `","tracestate":"vendor=a"}`, "vendor=a"},
		{"malformed", `{"traceparent":"00-zz","tracestate":"vendor=a"}`, ""},
		{"absent", `{"tracestate":"vendor=a","progressToken":"p"}`, ""},
	} {
		for _, tool := range []string{"echo", "charge_card"} {
			t.Run(tt.name+"/"+tool, func(t *testing.T) {
				r, _ := tracedRig(t)
				r.client.send(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"`+tool+`","arguments":{},"_meta":`+tt.meta+`}}`)
				got := r.upstream.next(t, "upstream")
				m, err := jsonrpc.Decode([]byte(got))
				if err != nil {
					t.Fatal(err)
				}
				c := telemetry.FromMeta(jsonrpc.Member(m.Params, "_meta"))
				if c.Parent == "" || c.State != tt.state {
					t.Errorf("the upstream got %s; want the proxy's traceparent, and tracestate %q", got, tt.state)
				}
				var id json.RawMessage = m.ID
				r.upstream.send(t, `{"jsonrpc":"2.0","id":`+string(id)+`,"result":{"content":[]}}`)
				r.client.next(t, "client")
			})
		}
	}
}
