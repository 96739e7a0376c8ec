package proxy

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/metrics"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

// TestMetricsCountEachCallOnce drives a session through a new execution,
// its replay, a read-only call, a tool's error result, a JSON-RPC error
// and a client key reused for other arguments, and checks the exposition
// an operator alerts on: each call counted once, under its decision, and
// each execution's moves and sends once.
func TestMetricsCountEachCallOnce(t *testing.T) {
	m := metrics.New()
	in := intercept.New(intercept.Options{Store: m.TimeStore(memstore.New(memstore.Options{})), Hasher: fingerprint.NewRandom(), Observer: m})
	r := newRigOptions(t, 0, Options{Interceptor: in})
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	r.upstream.send(t, `{"jsonrpc":"2.0","id":`+idOf(r.upstream.next(t, "upstream"))+`,"result":{"tools":[`+
		`{"name":"charge","inputSchema":{"type":"object"}},`+
		`{"name":"search","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}]}}`)
	r.client.next(t, "client")

	answer := func(id, params string) {
		t.Helper()
		r.client.send(t, `{"jsonrpc":"2.0","id":`+id+`,"method":"tools/call","params":`+params+`}`)
	}
	sent := func(reply string) string {
		t.Helper()
		call := r.upstream.next(t, "upstream")
		r.upstream.send(t, `{"jsonrpc":"2.0","id":`+idOf(call)+`,`+reply+`}`)
		return r.client.next(t, "client")
	}
	// A new execution, then the same call again: replayed.
	answer("2", `{"name":"charge","arguments":{"n":1}}`)
	sent(`"result":{"content":[{"type":"text","text":"charged"}]}`)
	answer("3", `{"name":"charge","arguments":{"n":1}}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, "charged") {
		t.Fatalf("the repeat got %s; want the result replayed", got)
	}
	// A repeat while the first is in flight: attached.
	answer("9", `{"name":"charge","arguments":{"n":9}}`)
	first := r.upstream.next(t, "upstream")
	answer("10", `{"name":"charge","arguments":{"n":9}}`)
	for !strings.Contains(scrapeMetrics(m), `decision="attached"`) {
		time.Sleep(time.Millisecond) // the repeat is on its way to the store
	}
	r.upstream.send(t, `{"jsonrpc":"2.0","id":`+idOf(first)+`,"result":{"content":[{"type":"text","text":"nine"}]}}`)
	r.client.next(t, "client")
	r.client.next(t, "client")
	// Read-only: passed through.
	answer("4", `{"name":"search","arguments":{}}`)
	sent(`"result":{"content":[]}`)
	// The tool's error result, and a JSON-RPC error.
	answer("5", `{"name":"charge","arguments":{"n":2}}`)
	sent(`"result":{"content":[{"type":"text","text":"declined"}],"isError":true}`)
	answer("6", `{"name":"charge","arguments":{"n":3}}`)
	sent(`"error":{"code":-32000,"message":"boom"}`)
	// A client key, then the same key for other arguments: refused.
	answer("7", `{"name":"charge","arguments":{"n":4},"_meta":{"idempotencyKey":"k1"}}`)
	sent(`"result":{"content":[{"type":"text","text":"charged"}]}`)
	answer("8", `{"name":"charge","arguments":{"n":5},"_meta":{"idempotencyKey":"k1"}}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"error"`) {
		t.Fatalf("the reused key got %s; want it refused", got)
	}
	in.Wait(t.Context())

	got := scrapeMetrics(m)
	for _, want := range []string{
		`mcp_idempotent_calls_total{class="side_effect",decision="new",tool="charge"} 5`,
		`mcp_idempotent_calls_total{class="side_effect",decision="replayed",tool="charge"} 1`,
		`mcp_idempotent_calls_total{class="side_effect",decision="key_refused",tool="charge"} 1`,
		`mcp_idempotent_calls_total{class="side_effect",decision="attached",tool="charge"} 1`,
		`mcp_idempotent_calls_total{class="read_only",decision="passed_through",tool="search"} 1`,
		`mcp_idempotent_transitions_total{state="dispatched",tool="charge"} 5`,
		`mcp_idempotent_transitions_total{state="completed",tool="charge"} 4`,
		`mcp_idempotent_transitions_total{state="failed",tool="charge"} 1`,
		`mcp_idempotent_upstream_seconds_count{tool="charge"} 5`,
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("the exposition lacks %s", want)
		}
	}
	for _, not := range []string{`tool="search"} `, `mcp_idempotent_store_errors_total{`, `mcp_idempotent_attempts_total{`} {
		for line := range strings.Lines(got) {
			if strings.Contains(line, not) && !strings.HasPrefix(line, "mcp_idempotent_calls_total") {
				t.Errorf("the exposition holds %s", strings.TrimSpace(line))
			}
		}
	}
}

// scrapeMetrics returns the exposition m serves.
func scrapeMetrics(m *metrics.Metrics) string {
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.String()
}

// downStore is a store that cannot reserve, as an unreachable one.
type downStore struct{ record.Store }

func (downStore) Reserve(context.Context, *record.Record, record.ReserveOptions) (*record.Record, bool, error) {
	return nil, false, errors.New("connection refused")
}

// TestMetricsCountStoreOutage: a call the store cannot reserve is
// counted store_unavailable once, and the failed reservation once in the
// store's errors; nothing went upstream, so nothing moved or was timed.
func TestMetricsCountStoreOutage(t *testing.T) {
	m := metrics.New()
	in := intercept.New(intercept.Options{Store: m.TimeStore(downStore{memstore.New(memstore.Options{})}), Hasher: fingerprint.NewRandom(), Observer: m})
	r := newRigOptions(t, 0, Options{Interceptor: in})
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	r.upstream.send(t, `{"jsonrpc":"2.0","id":`+idOf(r.upstream.next(t, "upstream"))+`,"result":{"tools":[{"name":"charge","inputSchema":{"type":"object"}}]}}`)
	r.client.next(t, "client")
	r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge","arguments":{}}}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"error"`) {
		t.Fatalf("the call got %s; want it refused", got)
	}
	in.Wait(t.Context())
	got := scrapeMetrics(m)
	for _, want := range []string{
		`mcp_idempotent_calls_total{class="side_effect",decision="store_unavailable",tool="charge"} 1`,
		`mcp_idempotent_store_errors_total{op="reserve"} 1`,
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("the exposition lacks %s", want)
		}
	}
	for _, not := range []string{"mcp_idempotent_transitions_total{", "mcp_idempotent_upstream_seconds_count{", `decision="new"`} {
		if strings.Contains(got, not) {
			t.Errorf("the exposition holds %s:\n%s", not, got)
		}
	}
}

// TestMetricsCountShadow: in shadow mode each call is counted once as
// passed through, and once as what it would have become.
func TestMetricsCountShadow(t *testing.T) {
	m := metrics.New()
	in := intercept.New(intercept.Options{Store: m.TimeStore(memstore.New(memstore.Options{})), Hasher: fingerprint.NewRandom(), Observer: m, Shadow: true})
	r := newRigOptions(t, 0, Options{Interceptor: in})
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	r.upstream.send(t, `{"jsonrpc":"2.0","id":`+idOf(r.upstream.next(t, "upstream"))+`,"result":{"tools":[{"name":"charge","inputSchema":{"type":"object"}}]}}`)
	r.client.next(t, "client")
	for _, id := range []string{"2", "3"} {
		r.client.send(t, `{"jsonrpc":"2.0","id":`+id+`,"method":"tools/call","params":{"name":"charge","arguments":{}}}`)
		r.upstream.answerCharged(t, r.upstream.next(t, "upstream"))
		r.client.next(t, "client")
		in.Wait(t.Context())
	}
	got := scrapeMetrics(m)
	for _, want := range []string{
		`mcp_idempotent_calls_total{class="side_effect",decision="passed_through",tool="charge"} 2`,
		`mcp_idempotent_shadow_decisions_total{class="side_effect",decision="new",tool="charge"} 1`,
		`mcp_idempotent_shadow_decisions_total{class="side_effect",decision="replayed",tool="charge"} 1`,
		`mcp_idempotent_upstream_seconds_count{tool="charge"} 1`,
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("the exposition lacks %s\n%s", want, got)
		}
	}
}
