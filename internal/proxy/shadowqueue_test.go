package proxy

import (
	"encoding/json"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
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
