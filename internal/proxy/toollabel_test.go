package proxy

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/metrics"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

// TestUnlistedToolsKeepTheToolLabel: a client that calls more names the
// upstream does not list than the tool label has places does not push
// the upstream's tools into "other": the unlisted names all count as
// "unlisted", a tool first called after them, or listed only later
// (tools/list_changed), keeps its own label, and so does a call that came
// before the proxy had listed the tools.
func TestUnlistedToolsKeepTheToolLabel(t *testing.T) {
	m := metrics.New()
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom(), Observer: m})
	r := newRigOptions(t, 0, Options{Interceptor: in})
	tools := `{"name":"create_issue","inputSchema":{"type":"object"}},` +
		`{"name":"search","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}`

	// Called before any listing: it waits for the proxy's own.
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_issue","arguments":{"n":0}}}`)
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"method":"tools/list"`) {
		t.Fatalf("upstream got %s; want the proxy's tools/list", got)
	}
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[`+tools+`]}}`)
	r.upstream.answerCharged(t, r.upstream.next(t, "upstream"))
	r.client.next(t, "client")

	n := metrics.MaxTools + 100
	for i := range n {
		r.client.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"nosuch_%03d"}}`, i+2, i))
		call := r.upstream.next(t, "upstream")
		r.upstream.send(t, `{"jsonrpc":"2.0","id":`+idOf(call)+`,"error":{"code":-32602,"message":"unknown tool"}}`)
		r.client.next(t, "client")
	}

	// The upstream's tools, called after them.
	r.client.send(t, `{"jsonrpc":"2.0","id":"s","method":"tools/call","params":{"name":"search","arguments":{}}}`)
	r.upstream.answerCharged(t, r.upstream.next(t, "upstream"))
	r.client.next(t, "client")
	r.client.send(t, `{"jsonrpc":"2.0","id":"c","method":"tools/call","params":{"name":"create_issue","arguments":{"n":1}}}`)
	r.upstream.answerCharged(t, r.upstream.next(t, "upstream"))
	r.client.next(t, "client")

	// A tool the upstream lists after a change.
	r.upstream.send(t, `{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)
	r.client.next(t, "client") // the notification, passed on
	r.client.send(t, `{"jsonrpc":"2.0","id":"l","method":"tools/call","params":{"name":"late","arguments":{}}}`)
	list := r.upstream.next(t, "upstream")
	if !strings.Contains(list, `"method":"tools/list"`) {
		t.Fatalf("upstream got %s; want the tools listed again after the change", list)
	}
	r.upstream.send(t, `{"jsonrpc":"2.0","id":`+idOf(list)+`,"result":{"tools":[`+tools+`,{"name":"late","inputSchema":{"type":"object"}}]}}`)
	r.upstream.answerCharged(t, r.upstream.next(t, "upstream"))
	r.client.next(t, "client")

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	got := rec.Body.String()
	for _, want := range []string{
		fmt.Sprintf(`mcp_idempotent_calls_total{class="side_effect",decision="new",tool="unlisted"} %d`, n),
		`mcp_idempotent_calls_total{class="side_effect",decision="new",tool="create_issue"} 2`,
		`mcp_idempotent_calls_total{class="read_only",decision="passed_through",tool="search"} 1`,
		`mcp_idempotent_calls_total{class="side_effect",decision="new",tool="late"} 1`,
		`mcp_idempotent_upstream_seconds_count{tool="late"} 1`,
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("the exposition lacks %s", want)
		}
	}
	if strings.Contains(got, `tool="other"`) || strings.Contains(got, "nosuch_") {
		t.Errorf("unlisted names took the tool label's places")
	}
}
