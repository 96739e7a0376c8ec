package proxy

import (
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

// TestToolsCallWithoutAnID: a tools/call sent as a notification, with no
// id, is refused under a null id and never reaches the upstream, alone or
// in a batch, in shadow mode too: passed on, the tool would run
// unrecorded, and no answer could tell its caller so.
func TestToolsCallWithoutAnID(t *testing.T) {
	const (
		call = `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"charge_card","arguments":{}}}`
		ping = `{"jsonrpc":"2.0","id":9,"method":"ping"}`
		want = `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"mcp-idempotent: tools/call is a request and needs an id; without one it was not sent"}}`
	)
	for _, shadow := range []bool{false, true} {
		in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom(), Shadow: shadow})
		r := newRigWith(t, 0, in)
		r.client.send(t, call)
		if got := r.client.next(t, "client"); got != want {
			t.Fatalf("shadow %v: client got %s; want %s", shadow, got, want)
		}
		r.client.send(t, `[`+call+`,`+ping+`]`)
		if got := r.client.next(t, "client"); got != `[{"jsonrpc":"2.0","id":9,"error":{"code":-32600,"message":"mcp-idempotent: tools/call is a request and needs an id; without one it was not sent"}}]` {
			t.Fatalf("shadow %v: client got %s for the batch; want its ping refused", shadow, got)
		}
		// The upstream's next frame is this ping: nothing came before it.
		r.client.send(t, ping)
		if got := r.upstream.next(t, "upstream"); got != ping {
			t.Fatalf("shadow %v: upstream got %s; want nothing before the ping", shadow, got)
		}
	}
}
