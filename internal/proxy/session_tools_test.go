package proxy

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

// TestToolsChangedDuringTheProxysListing: a change the upstream announces
// while the proxy lists its tools makes the pages read so far stale, so
// the proxy lists again rather than go by them, and a read-only tool is
// still passed through, not recorded.
func TestToolsChangedDuringTheProxysListing(t *testing.T) {
	r := newRig(t, 0)
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"quote","arguments":{}}}`)
	if got := r.upstream.next(t, "upstream"); got != `{"jsonrpc":"2.0","id":"mcp-idempotent:1","method":"tools/list"}` {
		t.Fatalf("upstream got %s; want the proxy's tools/list", got)
	}
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[`+
		`{"name":"quote","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}],"nextCursor":"2"}}`)
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"cursor":"2"`) {
		t.Fatalf("upstream got %s; want the listing's second page asked for", got)
	}
	r.upstream.send(t, `{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)
	r.client.next(t, "client") // the notification, passed on
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:2","result":{"tools":[]}}`)
	if got := r.upstream.next(t, "upstream"); got != `{"jsonrpc":"2.0","id":"mcp-idempotent:3","method":"tools/list"}` {
		t.Fatalf("upstream got %s; want the tools listed again from the start", got)
	}
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:3","result":{"tools":[`+
		`{"name":"quote","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}]}}`)
	if got := r.upstream.next(t, "upstream"); got != `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"quote","arguments":{}}}` {
		t.Fatalf("upstream got %s; want the read-only call passed through as it came", got)
	}
}

// TestToolsChangedInABatch: a change announced inside a batch from the
// upstream is acted on as one sent alone: the proxy forgets what it knew
// of the tools and lists them again.
func TestToolsChangedInABatch(t *testing.T) {
	r := newRig(t, 0)
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	r.upstream.next(t, "upstream")
	r.upstream.send(t, `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"quote","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}]}}`)
	r.client.next(t, "client")
	r.upstream.send(t, `[{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}]`)
	r.client.next(t, "client")
	r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"quote","arguments":{}}}`)
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"method":"tools/list"`) {
		t.Fatalf("upstream got %s; want the tools listed again after the change", got)
	}
}

// TestUnansweredListingDoesNotHoldCalls: a server that never answers the
// proxy's tools/list does not hold the calls waiting on the listing: after
// listTimeout they go on as calls to a tool with side effects.
func TestUnansweredListingDoesNotHoldCalls(t *testing.T) {
	defer func(d time.Duration) { listTimeout = d }(listTimeout)
	listTimeout = 50 * time.Millisecond
	r := newRig(t, 0)
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card"}}`)
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"method":"tools/list"`) {
		t.Fatalf("upstream got %s; want the proxy's tools/list", got)
	}
	// Not answered: the proxy takes it back, and the call goes on.
	want := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"mcp-idempotent:1","reason":"no answer came in time"}}`
	if got := r.upstream.next(t, "upstream"); got != want {
		t.Fatalf("upstream got %s; want %s", got, want)
	}
	call := r.upstream.next(t, "upstream")
	if !strings.Contains(call, `"method":"tools/call"`) {
		t.Fatalf("upstream got %s; want the call", call)
	}
	r.upstream.answerCharged(t, call)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":1,`) || !strings.Contains(got, "charged") {
		t.Fatalf("client got %s; want the answer", got)
	}
	// As a tool with side effects, calling again replays.
	r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card"}}`)
	r.upstream.next(t, "upstream") // the listing, tried again
	if got := r.client.next(t, "client"); !strings.Contains(got, `"mcp-idempotent/replayed":true`) {
		t.Fatalf("calling again got %s; want the answer replayed", got)
	}
}

// TestReadOnlyWithARetryRule: a read-only tool whose policy has a retry
// rule is still unrecorded, but the proxy sends it, under an id of its
// own, so that a transient answer is sent again; the caller gets the last
// answer under its own id. Without a rule it passes as it came.
func TestReadOnlyWithARetryRule(t *testing.T) {
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom()})
	resolve := func(tool string, ann *mcp.Annotations) policy.Policy {
		p := policy.FromAnnotations(ann)
		switch tool {
		case "quote":
			p.Retry = &policy.RetryRule{MaxAttempts: 3, Base: time.Millisecond, Cap: time.Millisecond,
				Transient: []policy.ResultMatch{{Text: regexp.MustCompile(`busy`)}}}
		case "stamp":
			p.Scope = policy.ScopeKey
			p.Retry = &policy.RetryRule{MaxAttempts: 1}
		}
		return p
	}
	r := newRigOptions(t, 0, Options{Interceptor: in, Resolve: resolve})
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	r.upstream.next(t, "upstream")
	r.upstream.send(t, `{"jsonrpc":"2.0","id":1,"result":{"tools":[`+
		`{"name":"quote","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}},`+
		`{"name":"price","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}},`+
		`{"name":"stamp","inputSchema":{"type":"object"}}]}}`)
	r.client.next(t, "client")

	r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"quote","arguments":{}}}`)
	for i := 1; i <= 2; i++ {
		got := r.upstream.next(t, "upstream")
		want := fmt.Sprintf(`{"jsonrpc":"2.0","id":"mcp-idempotent:%d","method":"tools/call","params":{"name":"quote","arguments":{}}}`, i)
		if got != want {
			t.Fatalf("attempt %d reached the upstream as %s; want %s", i, got, want)
		}
		result := `{"content":[{"type":"text","text":"busy"}],"isError":true}`
		if i == 2 {
			result = `{"content":[{"type":"text","text":"42"}]}`
		}
		r.upstream.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":"mcp-idempotent:%d","result":%s}`, i, result))
	}
	if got := r.client.next(t, "client"); got != `{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"42"}]}}` {
		t.Fatalf("the client got %s; want the second attempt's answer under its id", got)
	}

	r.client.send(t, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"price","arguments":{}}}`)
	if got := r.upstream.next(t, "upstream"); got != `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"price","arguments":{}}}` {
		t.Fatalf("a read-only call without a rule reached the upstream as %s; want it as it came", got)
	}

	// A keyless call to a key-scoped tool with a rule: unrecorded, sent by
	// the proxy too (its account is spent).
	r.client.send(t, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"stamp","arguments":{}}}`)
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"id":"mcp-idempotent:3"`) || strings.Contains(got, "execution-id") {
		t.Fatalf("a keyless key-scoped call reached the upstream as %s; want it under the proxy's id, without an execution id", got)
	}
}

// TestReadOnlyCallsReadNoKey: a key or a deadline in _meta that cannot be
// read refuses a call the proxy records or sends itself, but not a
// read-only tool's call passed upstream as it came, which uses neither,
// as it would run without the proxy. So does the proxy's execution id in
// another case, in a call the proxy records.
func TestReadOnlyCallsReadNoKey(t *testing.T) {
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom()})
	resolve := func(tool string, ann *mcp.Annotations) policy.Policy {
		p := policy.FromAnnotations(ann)
		switch tool {
		case "quote":
			p.Retry = &policy.RetryRule{MaxAttempts: 2, Base: time.Millisecond, Cap: time.Millisecond}
		case "stamp":
			p.Scope = policy.ScopeKey
		}
		return p
	}
	r := newRigOptions(t, 0, Options{Interceptor: in, Resolve: resolve})
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	r.upstream.next(t, "upstream")
	r.upstream.send(t, `{"jsonrpc":"2.0","id":1,"result":{"tools":[`+
		`{"name":"echo","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}},`+
		`{"name":"quote","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}},`+
		`{"name":"stamp","inputSchema":{"type":"object"}},`+
		`{"name":"charge_card","inputSchema":{"type":"object"}}]}}`)
	r.client.next(t, "client")

	// The proxy's execution id in another case is the client's business
	// where the proxy vouches for none.
	const idVariant = `{"MCP-Idempotent/Execution-Id":"exe_chosen"}`
	for i, meta := range []string{`{"idempotencyKey":12345}`, `{"mcp-idempotent/key":""}`, `{"mcp-idempotent/deadline_ms":"soon"}`, idVariant} {
		call := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{},"_meta":%s}}`, 10+i, meta)
		r.client.send(t, call)
		if got := r.upstream.next(t, "upstream"); got != call {
			t.Errorf("a read-only call with _meta %s reached the upstream as %s; want it as it came", meta, got)
		}
	}
	for _, tc := range []struct{ tool, meta string }{
		{"charge_card", `{"idempotencyKey":12345}`},
		{"charge_card", `{"mcp-idempotent/deadline_ms":"soon"}`},
		{"stamp", `{"mcp-idempotent/key":""}`},
		{"quote", `{"mcp-idempotent/deadline_ms":0}`},
		{"charge_card", idVariant},
	} {
		r.client.send(t, `{"jsonrpc":"2.0","id":20,"method":"tools/call","params":{"name":"`+tc.tool+`","arguments":{},"_meta":`+tc.meta+`}}`)
		if got := r.client.next(t, "client"); !strings.Contains(got, `"id":20,`) || !strings.Contains(got, `"code":-32602`) {
			t.Errorf("%s with _meta %s got %s; want -32602", tc.tool, tc.meta, got)
		}
	}
	r.upstream.nothingMore(t, "refused calls are not sent")
}

// TestProtocolMeta: the proxy's own requests carry the protocol members
// of the client's request, but not the task that request relates to.
func TestProtocolMeta(t *testing.T) {
	got := protocolMeta(json.RawMessage(`{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/related-task":{"taskId":"t1"},"progressToken":7,"io.modelcontextprotocol/clientInfo":{"name":"c"}}`))
	if len(got) != 2 || string(got["io.modelcontextprotocol/protocolVersion"]) != `"2026-07-28"` || got["io.modelcontextprotocol/clientInfo"] == nil {
		t.Fatalf("protocolMeta = %s; want the protocol version and client info alone", got)
	}
}

// processed returns once the session has read every frame the client sent
// before it: a request under an id reserved for the proxy is refused as
// it is read.
func processed(t *testing.T, r *rig) {
	t.Helper()
	r.client.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:x","method":"ping"}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, "reserved") {
		t.Fatalf("client got %s; want the refusal of the reserved id", got)
	}
}

// TestCallsWaitingForTheListingKeepTheirOrder: calls of a tool the proxy
// has not seen listed, and the messages after them, reach the upstream in
// the order they came, once the proxy's listing is answered. Before, each
// call waited for the listing on a goroutine of its own and went on in
// any order, and a request after them went at once. Answers to the
// upstream's own requests do not wait (it may need one before it answers
// the listing), and a cancelled call or request never goes.
func TestCallsWaitingForTheListingKeepTheirOrder(t *testing.T) {
	r := newRig(t, 0)
	for i, v := range []string{"a", "b", "c", "d", "e", "f"} {
		r.client.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"append","arguments":{"v":%q}}}`, i+1, v))
	}
	r.client.send(t, `{"jsonrpc":"2.0","id":"p","method":"resources/list"}`)
	r.client.send(t, `{"jsonrpc":"2.0","id":"q","method":"resources/list"}`)
	r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}`)
	r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}`)
	r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"q"}}`)
	processed(t, r)
	if got := r.upstream.next(t, "upstream"); got != `{"jsonrpc":"2.0","id":"mcp-idempotent:1","method":"tools/list"}` {
		t.Fatalf("upstream got %s; want the proxy's tools/list, and nothing sent after the first call before it", got)
	}
	// The upstream asks the client something before it lists its tools.
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"r","method":"roots/list"}`)
	r.client.next(t, "client")
	r.client.send(t, `{"jsonrpc":"2.0","id":"r","result":{"roots":[]}}`)
	if got := r.upstream.next(t, "upstream"); got != `{"jsonrpc":"2.0","id":"r","result":{"roots":[]}}` {
		t.Fatalf("upstream got %s; want the client's answer, which waits for nothing", got)
	}
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[{"name":"append","inputSchema":{"type":"object"}}]}}`)
	for _, want := range []string{`"v":"a"`, `"v":"b"`, `"v":"d"`, `"v":"e"`, `"v":"f"`, `"id":"p","method":"resources/list"`, `"method":"notifications/roots/list_changed"`} {
		got := r.upstream.next(t, "upstream")
		if !strings.Contains(got, want) {
			t.Fatalf("upstream got %s; want %s next", got, want)
		}
		if strings.Contains(got, `"method":"tools/call"`) {
			r.upstream.answerCharged(t, got)
		}
	}
	// A call after the queue emptied is handled as it is read.
	r.client.send(t, `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"append","arguments":{"v":"g"}}}`)
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"v":"g"`) {
		t.Fatalf("upstream got %s; want the next call", got)
	}
}

// TestPingsDoNotWaitForTheListing: a client's ping goes upstream as it
// comes, while a call waits for the proxy's listing: it changes nothing,
// so has no order to keep, and MCP asks for a prompt answer. Before, it
// waited behind the call for up to listTimeout (10 s), and a client that
// ends a session on a late ping (the Go SDK's keep-alive) ended it.
func TestPingsDoNotWaitForTheListing(t *testing.T) {
	r := newRig(t, 0)
	callAwaitingTheListing(t, r)
	r.client.send(t, `{"jsonrpc":"2.0","id":"later","method":"resources/list"}`)
	r.client.send(t, `{"jsonrpc":"2.0","id":"p","method":"ping"}`)
	if got := r.upstream.next(t, "upstream"); got != `{"jsonrpc":"2.0","id":"p","method":"ping"}` {
		t.Fatalf("upstream got %s; want the ping, while the listing is unanswered", got)
	}
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"p","result":{}}`)
	if got := r.client.next(t, "client"); got != `{"jsonrpc":"2.0","id":"p","result":{}}` {
		t.Fatalf("client got %s; want the ping's answer", got)
	}
	// The rest keeps its order once the listing is answered.
	answerTheListing(t, r)
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"id":"later","method":"resources/list"`) {
		t.Fatalf("upstream got %s; want the request sent after the call", got)
	}
}

// TestBatchesWaitingForTheListingKeepTheirOrder: a batch (MCP 2025-03-26)
// holding an answer to the upstream's request or a cancellation, sent
// while a call waits for the listing, has those go at once, and its
// requests wait in the queue, in the order they came. Before, the whole
// batch went at once, its requests ahead of the call sent before them.
func TestBatchesWaitingForTheListingKeepTheirOrder(t *testing.T) {
	r := newRig(t, 0)
	callAwaitingTheListing(t, r)
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"r","method":"roots/list"}`)
	r.client.next(t, "client")
	r.client.send(t, `[{"jsonrpc":"2.0","id":"r","result":{"roots":[]}},{"jsonrpc":"2.0","id":"later","method":"resources/list"},`+
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"gone"}}]`)
	for _, want := range []string{
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"gone"}}`,
		`[{"jsonrpc":"2.0","id":"r","result":{"roots":[]}}]`,
	} {
		if got := r.upstream.next(t, "upstream"); got != want {
			t.Fatalf("upstream got %s; want %s, which waits for nothing", got, want)
		}
	}
	answerTheListing(t, r)
	if got := r.upstream.next(t, "upstream"); got != `[{"jsonrpc":"2.0","id":"later","method":"resources/list"}]` {
		t.Fatalf("upstream got %s; want the batch's request, after the call", got)
	}
}

// TestFirstOfTwoIdenticalCallsIsSent: of two identical calls of a tool not
// listed yet, the first to come is the one sent, and the second attaches
// to it: the upstream's progress on it goes to the first's token.
func TestFirstOfTwoIdenticalCallsIsSent(t *testing.T) {
	r := newRig(t, 0)
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge","arguments":{"n":1},"_meta":{"progressToken":"tok"}}}`)
	r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge","arguments":{"n":1}}}`)
	processed(t, r)
	r.upstream.next(t, "upstream") // tools/list
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[{"name":"charge","inputSchema":{"type":"object"}}]}}`)
	got := r.upstream.next(t, "upstream")
	if upstreamToken(t, got) == "" {
		t.Fatalf("upstream got %s; want the first call, with a progress token", got)
	}
	r.upstream.send(t, progressOn(upstreamToken(t, got), "1"))
	if got := r.client.next(t, "client"); got != progressOn(`"tok"`, "1") {
		t.Fatalf("the client got %s; want the progress of the first call on its token", got)
	}
}

// callAwaitingTheListing sends a call of a tool the proxy has not seen
// listed, and waits for the proxy's own tools/list, which the call then
// waits for.
func callAwaitingTheListing(t *testing.T, r *rig) {
	t.Helper()
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"append","arguments":{"v":"a"}}}`)
	if got := r.upstream.next(t, "upstream"); got != `{"jsonrpc":"2.0","id":"mcp-idempotent:1","method":"tools/list"}` {
		t.Fatalf("upstream got %s; want the proxy's tools/list", got)
	}
}

// answerTheListing answers callAwaitingTheListing's listing, and waits for
// the call it held.
func answerTheListing(t *testing.T, r *rig) {
	t.Helper()
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[{"name":"append","inputSchema":{"type":"object"}}]}}`)
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"v":"a"`) {
		t.Fatalf("upstream got %s; want the call that waited for the listing", got)
	}
}
