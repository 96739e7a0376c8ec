package proxy

import (
	"strings"
	"testing"
)

// TestToolListedTwiceIsTakenAtItsStrictest: a tool the upstream lists
// twice since its last change, on one page or on two, with a
// readOnlyHint only once, is recorded: a read-only call recorded costs
// nothing, a side effect passed through would run on every retry. Once
// the upstream announces a change, the next listing alone counts.
func TestToolListedTwiceIsTakenAtItsStrictest(t *testing.T) {
	const unhinted = `{"name":"charge","inputSchema":{"type":"object"}}`
	const readOnly = `{"name":"charge","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}`
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge","arguments":{}}}`
	recorded := func(t *testing.T, r *rig) {
		t.Helper()
		if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"mcp-idempotent/execution-id"`) {
			t.Fatalf("upstream got %s; want the call recorded", got)
		}
	}
	for _, order := range [][2]string{{unhinted, readOnly}, {readOnly, unhinted}} {
		t.Run("one page", func(t *testing.T) {
			r := newRig(t, 0)
			r.client.send(t, `{"jsonrpc":"2.0","id":"l","method":"tools/list"}`)
			r.upstream.next(t, "upstream")
			r.upstream.send(t, `{"jsonrpc":"2.0","id":"l","result":{"tools":[`+order[0]+`,`+order[1]+`]}}`)
			r.client.next(t, "client")
			r.client.send(t, call)
			recorded(t, r)
		})
		t.Run("two pages", func(t *testing.T) {
			r := newRig(t, 0)
			r.client.send(t, call)
			r.upstream.next(t, "upstream") // the proxy's listing
			r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[`+order[0]+`],"nextCursor":"2"}}`)
			r.upstream.next(t, "upstream")
			r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:2","result":{"tools":[`+order[1]+`]}}`)
			recorded(t, r)
		})
		t.Run("two listings", func(t *testing.T) {
			r := newRig(t, 0)
			for i, tool := range order {
				r.client.send(t, `{"jsonrpc":"2.0","id":"l","method":"tools/list"}`)
				r.upstream.next(t, "upstream")
				r.upstream.send(t, `{"jsonrpc":"2.0","id":"l","result":{"tools":[`+tool+`]}}`)
				if got := r.client.next(t, "client"); !strings.Contains(got, tool) {
					t.Fatalf("listing %d reached the client as %s", i+1, got)
				}
			}
			r.client.send(t, call)
			recorded(t, r)
		})
	}
	t.Run("after a change", func(t *testing.T) {
		r := newRig(t, 0)
		r.client.send(t, `{"jsonrpc":"2.0","id":"l","method":"tools/list"}`)
		r.upstream.next(t, "upstream")
		r.upstream.send(t, `{"jsonrpc":"2.0","id":"l","result":{"tools":[`+unhinted+`]}}`)
		r.client.next(t, "client")
		r.upstream.send(t, `{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)
		r.client.next(t, "client")
		r.client.send(t, call)
		r.upstream.next(t, "upstream") // the proxy's listing
		r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[`+readOnly+`]}}`)
		if got := r.upstream.next(t, "upstream"); got != call {
			t.Fatalf("upstream got %s; want the call passed through as it came", got)
		}
	})
}

// TestClientsListingAnsweredAfterAChange: an answer to the client's
// tools/list sent before the upstream announced a change may describe
// the tools as they were (over HTTP, the announcement and the answer
// come on different streams), so the proxy does not learn from it: it
// lists the tools itself, and a tool that lost its readOnlyHint is
// recorded.
func TestClientsListingAnsweredAfterAChange(t *testing.T) {
	r := newRig(t, 0)
	r.client.send(t, `{"jsonrpc":"2.0","id":"l","method":"tools/list"}`)
	r.upstream.next(t, "upstream")
	r.upstream.send(t, `{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)
	r.client.next(t, "client")
	stale := `{"jsonrpc":"2.0","id":"l","result":{"tools":[{"name":"charge","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}]}}`
	r.upstream.send(t, stale)
	if got := r.client.next(t, "client"); got != stale {
		t.Fatalf("client got %s; want the listing as it came", got)
	}
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge","arguments":{}}}`)
	if got := r.upstream.next(t, "upstream"); got != `{"jsonrpc":"2.0","id":"mcp-idempotent:1","method":"tools/list"}` {
		t.Fatalf("upstream got %s; want the proxy's own tools/list", got)
	}
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[{"name":"charge","inputSchema":{"type":"object"}}]}}`)
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"mcp-idempotent/execution-id"`) {
		t.Fatalf("upstream got %s; want the call recorded", got)
	}
}

// TestBatchedListingAnsweredAlone: the client's tools/list sent in a
// batch, after a change the upstream announced, and answered on its own
// is learned from as one sent alone: the read-only tool it lists passes
// through with no listing of the proxy's.
func TestBatchedListingAnsweredAlone(t *testing.T) {
	r := newRig(t, 0)
	r.upstream.send(t, `{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)
	r.client.next(t, "client")
	r.client.send(t, `[{"jsonrpc":"2.0","id":"l","method":"tools/list"}]`)
	r.upstream.next(t, "upstream")
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"l","result":{"tools":[{"name":"quote","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}]}}`)
	r.client.next(t, "client")
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"quote","arguments":{}}}`
	r.client.send(t, call)
	if got := r.upstream.next(t, "upstream"); got != call {
		t.Fatalf("upstream got %s; want the read-only call passed through as it came", got)
	}
}
