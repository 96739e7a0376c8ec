package proxy

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

// TestShadowCancelledWhileQueued: in shadow mode a request the client
// cancels while it waits behind the proxy's listing of the tools still
// goes upstream as it came, its cancellation after it, in the order the
// client sent them, as without the proxy. Normal mode drops both.
func TestShadowCancelledWhileQueued(t *testing.T) {
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom(), Shadow: true})
	r := newRigOptions(t, 0, Options{Interceptor: in})
	sent := []string{
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge","arguments":{"card":"4242"}}}`,
		`{"jsonrpc":"2.0","id":3,"method":"resources/list"}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"gave up"}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}`,
		`{"jsonrpc":"2.0","id":4,"method":"ping"}`, // not queued: the cancellations are read
	}
	r.client.send(t, sent[0])
	list := r.upstream.next(t, "upstream") // the proxy's tools/list
	for _, f := range sent[1:] {
		r.client.send(t, f)
	}
	if got := r.upstream.next(t, "upstream"); got != sent[4] {
		t.Fatalf("the upstream got %s; want the ping", got)
	}
	var m struct{ ID json.RawMessage }
	json.Unmarshal([]byte(list), &m)
	r.upstream.send(t, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"tools":[]}}`)
	for _, want := range sent[:4] {
		if got := r.upstream.next(t, "upstream"); got != want {
			t.Errorf("the upstream got %s; want %s", got, want)
		}
	}
}

// TestShadowBatchWithToolCall: in a session whose protocol has batches,
// a batch holding a tools/call is refused in normal mode. In shadow mode
// it goes upstream as it came, its calls unrecorded and counted as the
// shadow decision invalid, and the client gets the upstream's answer.
func TestShadowBatchWithToolCall(t *testing.T) {
	batch := `[{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge","arguments":{"card":"4242"}}},` +
		`{"jsonrpc":"2.0","id":3,"method":"ping"}]`
	for _, shadow := range []bool{false, true} {
		d := &decisions{counted: map[string]int{}, shown: map[string]int{}, settled: make(chan record.State, 64)}
		in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom(), Observer: d, Shadow: shadow})
		r := newRigOptions(t, 0, Options{Interceptor: in})
		r.handshake(t, "2025-03-26", gives("2025-03-26"))
		r.client.send(t, batch)
		if !shadow {
			if got := r.client.next(t, "client"); !strings.Contains(got, "cannot be sent in a batch") {
				t.Errorf("normal mode: the client got %s; want the batch refused", got)
			}
			continue
		}
		// A call whose params could be read two ways refuses the batch
		// in shadow mode too.
		r.client.send(t, `[{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"charge","name":"refund"}}]`)
		if got := r.client.next(t, "client"); !strings.Contains(got, `"name\" is given twice`) {
			t.Errorf("the client got %s; want the ambiguous batch refused", got)
		}
		nextIs(t, r.upstream, "upstream", batch, "the batch as it came")
		answer := `[{"jsonrpc":"2.0","id":2,"result":{"content":[]}},{"jsonrpc":"2.0","id":3,"result":{}}]`
		r.upstream.send(t, answer)
		nextIs(t, r.client, "client", answer, "the upstream's answer")
		d.mu.Lock()
		if !maps.Equal(d.counted, map[string]int{"passed_through": 1}) || !maps.Equal(d.shown, map[string]int{"invalid": 1}) {
			t.Errorf("decisions %v, shadow decisions %v; want passed_through, and invalid", d.counted, d.shown)
		}
		d.mu.Unlock()
	}
}

// TestShadowCancelledInQueuedBatch: a request in a batch that waits in
// the queue, cancelled meanwhile, reaches the upstream before its
// cancellation in shadow mode, as one sent alone does.
func TestShadowCancelledInQueuedBatch(t *testing.T) {
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom(), Shadow: true})
	r := newRigOptions(t, 0, Options{Interceptor: in})
	sent := []string{
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge","arguments":{"card":"4242"}}}`,
		`[{"jsonrpc":"2.0","id":3,"method":"resources/list"},{"jsonrpc":"2.0","id":5,"method":"prompts/list"}]`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}`,
	}
	r.client.send(t, sent[0])
	list := r.upstream.next(t, "upstream") // the proxy's tools/list
	for _, f := range sent[1:] {
		r.client.send(t, f)
	}
	r.client.send(t, `{"jsonrpc":"2.0","id":4,"method":"ping"}`)
	if got := r.upstream.next(t, "upstream"); got != `{"jsonrpc":"2.0","id":4,"method":"ping"}` {
		t.Fatalf("the upstream got %s; want the ping", got)
	}
	var m struct{ ID json.RawMessage }
	json.Unmarshal([]byte(list), &m)
	r.upstream.send(t, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"tools":[]}}`)
	for _, want := range sent {
		if got := r.upstream.next(t, "upstream"); got != want {
			t.Errorf("the upstream got %s; want %s", got, want)
		}
	}
}

// TestCancelledInQueuedBatch: in normal mode a request in a batch that
// waits in the queue, cancelled meanwhile, is not sent, and its
// cancellation neither, as for one that waits alone.
func TestCancelledInQueuedBatch(t *testing.T) {
	r := newRigOptions(t, 0, Options{Interceptor: intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom()})})
	r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge","arguments":{"card":"4242"}}}`)
	list := r.upstream.next(t, "upstream") // the proxy's tools/list
	r.client.send(t, `[{"jsonrpc":"2.0","id":3,"method":"resources/list"},{"jsonrpc":"2.0","id":5,"method":"prompts/list"}]`)
	r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}`)
	r.client.send(t, `{"jsonrpc":"2.0","id":4,"method":"ping"}`)
	if got := r.upstream.next(t, "upstream"); got != `{"jsonrpc":"2.0","id":4,"method":"ping"}` {
		t.Fatalf("the upstream got %s; want the ping", got)
	}
	var m struct{ ID json.RawMessage }
	json.Unmarshal([]byte(list), &m)
	r.upstream.send(t, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"tools":[]}}`)
	r.upstream.next(t, "upstream") // the call
	if got := r.upstream.next(t, "upstream"); got != `[{"jsonrpc":"2.0","id":5,"method":"prompts/list"}]` {
		t.Errorf("the upstream got %s; want the batch without the cancelled request", got)
	}
}

// TestShadowBatchToolCallReservedID: a tools/call in a batch passes in
// shadow mode, but not under an id the proxy keeps for its own requests
// or one not every SDK can read: the batch is refused, as in normal mode
// and as such a call alone is.
func TestShadowBatchToolCallReservedID(t *testing.T) {
	for _, id := range []string{`"mcp-idempotent:1"`, `9007199254740993`} {
		in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom(), Shadow: true})
		r := newRigOptions(t, 0, Options{Interceptor: in})
		r.handshake(t, "2025-03-26", gives("2025-03-26"))
		r.client.send(t, `[{"jsonrpc":"2.0","id":`+id+`,"method":"tools/call","params":{"name":"charge","arguments":{}}}]`)
		r.client.send(t, `{"jsonrpc":"2.0","id":9,"method":"ping"}`)
		if got := r.upstream.next(t, "upstream"); got != `{"jsonrpc":"2.0","id":9,"method":"ping"}` {
			t.Errorf("id %s: the upstream got %s; want the batch refused", id, got)
		}
	}
}

// TestShadowBatchCancelsItsOwnCall: a batch that holds a tools/call and
// its cancellation goes upstream with the call before the cancellation
// in shadow mode, as without the proxy: sent first, the cancellation
// would name no request, and the call would run on.
func TestShadowBatchCancelsItsOwnCall(t *testing.T) {
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom(), Shadow: true})
	r := newRigOptions(t, 0, Options{Interceptor: in})
	r.handshake(t, "2025-03-26", gives("2025-03-26"))
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge","arguments":{"card":"4242"}}}`
	cancel := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`
	r.client.send(t, `[`+call+`,`+cancel+`]`)
	nextIs(t, r.upstream, "upstream", `[`+call+`]`, "the batch's call")
	nextIs(t, r.upstream, "upstream", cancel, "its cancellation, after it")
}

// TestCancelInQueuedBatch: a batch that waits in the queue with a
// request and its cancellation is, in normal mode, a request cancelled
// while it waits: neither is sent. In shadow mode both go upstream, the
// request first, as without the proxy.
func TestCancelInQueuedBatch(t *testing.T) {
	for _, shadow := range []bool{false, true} {
		in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom(), Shadow: shadow})
		r := newRigOptions(t, 0, Options{Interceptor: in})
		call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge","arguments":{"card":"4242"}}}`
		request := `{"jsonrpc":"2.0","id":3,"method":"resources/list"}`
		cancel := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}`
		r.client.send(t, call)
		list := r.upstream.next(t, "upstream") // the proxy's tools/list
		r.client.send(t, `[`+request+`,`+cancel+`]`)
		r.client.send(t, `{"jsonrpc":"2.0","id":4,"method":"ping"}`)
		nextIs(t, r.upstream, "upstream", `{"jsonrpc":"2.0","id":4,"method":"ping"}`, "the ping, which waits for nothing")
		var m struct{ ID json.RawMessage }
		json.Unmarshal([]byte(list), &m)
		r.upstream.send(t, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"tools":[]}}`)
		if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"method":"tools/call"`) {
			t.Fatalf("the upstream got %s; want the call", got)
		}
		if shadow {
			nextIs(t, r.upstream, "upstream", `[`+request+`]`, "shadow mode: the batch's request")
			nextIs(t, r.upstream, "upstream", cancel, "shadow mode: its cancellation, after it")
			continue
		}
		r.client.send(t, `{"jsonrpc":"2.0","id":5,"method":"ping"}`)
		nextIs(t, r.upstream, "upstream", `{"jsonrpc":"2.0","id":5,"method":"ping"}`, "normal mode: neither the request nor its cancellation")
	}
}
