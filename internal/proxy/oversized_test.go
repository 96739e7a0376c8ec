package proxy

import (
	"context"
	"strings"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/transport/stdio"
)

// newLateIDRig is newRig with the session's upstream Conn following a
// frame over the limit to its end for the ids after its first kilobyte,
// as the Conn of an upstream the proxy starts does (stdio.Start).
func newLateIDRig(t *testing.T, limit int) *rig {
	t.Helper()
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom()})
	return newRigUpstream(t, context.Background(), limit, Options{Interceptor: in}, func(c Conn) Conn {
		c.(*stdio.Conn).FollowLateIDs()
		return c
	})
}

// TestOversizedAnswerWithLateID: an answer from the upstream over the
// limit whose id comes after its first kilobyte (after its result, as
// Rust's jsonrpc-core writes it) answers the tools/call it was for once
// the frame has ended: outcome unknown, naming the limit, as for any
// answer that could not be read, and so again for a retry, which is not
// sent again. Without it the call would wait until its session ended.
func TestOversizedAnswerWithLateID(t *testing.T) {
	const limit = 4096
	r := newLateIDRig(t, limit)
	r.startCall(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":1}}}`) // as mcp-idempotent:2
	r.upstream.send(t, `{"jsonrpc":"2.0","result":{"content":[{"type":"text","text":"`+strings.Repeat("x", 2*limit)+`"}]},"id":"mcp-idempotent:2"}`)
	got := r.client.next(t, "client")
	if !strings.Contains(got, `"id":1,`) || !strings.Contains(got, "Outcome unknown:") || !strings.Contains(got, "4096-byte limit (--max-message-size)") {
		t.Fatalf("the tools/call got %.400s; want outcome unknown under its own id, naming the limit", got)
	}
	if !strings.Contains(got, `"state":"unknown"`) {
		t.Fatalf("the tools/call got %.400s; want its execution unknown (DESIGN section 4)", got)
	}
	r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":1}}}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":2,`) || !strings.Contains(got, "Outcome unknown:") {
		t.Fatalf("the retry got %.400s; want outcome unknown", got)
	}
	r.client.send(t, `{"jsonrpc":"2.0","id":3,"method":"ping"}`)
	if got := r.upstream.next(t, "upstream"); got != `{"jsonrpc":"2.0","id":3,"method":"ping"}` {
		t.Fatalf("upstream got %.400s; want the ping, the tool not called again", got)
	}
}

// TestOversizedRequestFromUpstreamIsAnswered: a request from the upstream
// over the limit (a sampling/createMessage, say) is not passed on to the
// client, and the upstream is answered with an error naming the limit
// under the request's id as it was spelled, wherever the id comes: else
// it would wait for ever. A notification over the limit is only dropped.
func TestOversizedRequestFromUpstreamIsAnswered(t *testing.T) {
	const limit = 200
	big := `"` + strings.Repeat("x", 2000) + `"`
	for _, tt := range []struct{ name, frame, id string }{
		{"id in the head", `{"jsonrpc":"2.0","id":9,"method":"sampling/createMessage","params":{"p":` + big + `}}`, `9`},
		{"id after the params", `{"jsonrpc":"2.0","method":"roots/list","params":{"p":` + big + `},"id":"r\u00e9-7"}`, `"r\u00e9-7"`},
		{"method after the params", `{"jsonrpc":"2.0","id":1.0,"params":{"p":` + big + `},"method":"roots/list"}`, `1.0`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newLateIDRig(t, limit)
			r.upstream.send(t, tt.frame)
			want := `{"jsonrpc":"2.0","id":` + tt.id + `,"error":{"code":-32603,"message":"mcp-idempotent: the request was not passed on to the client: message larger than the 200-byte limit (--max-message-size)"}}`
			if got := r.upstream.next(t, "upstream"); got != want {
				t.Fatalf("upstream got %.400s; want %s", got, want)
			}
			r.upstream.send(t, `{"jsonrpc":"2.0","method":"notifications/message","params":{"p":`+big+`}}`)
			r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
			if got := r.upstream.next(t, "upstream"); got != `{"jsonrpc":"2.0","id":2,"method":"ping"}` {
				t.Fatalf("upstream got %.400s; want the ping, and nothing for the notification", got)
			}
			r.upstream.send(t, `{"jsonrpc":"2.0","id":2,"result":{}}`)
			if got := r.client.next(t, "client"); got != `{"jsonrpc":"2.0","id":2,"result":{}}` {
				t.Fatalf("client got %.400s; want only the ping's answer", got)
			}
		})
	}
}

// TestOversizedRequestUnderAClientsID: a request from the upstream over
// the limit whose "method" comes after its first kilobyte, under the id
// of a request of the client's still waiting (each side numbers its own),
// is told from an answer by its method: the client's request is not
// answered for it, and its own answer still passes on.
func TestOversizedRequestUnderAClientsID(t *testing.T) {
	const limit = 200
	r := newLateIDRig(t, limit)
	r.client.send(t, `{"jsonrpc":"2.0","id":5,"method":"resources/read","params":{"uri":"file:///a"}}`)
	r.upstream.next(t, "upstream")
	r.upstream.send(t, `{"jsonrpc":"2.0","id":5,"params":{"p":"`+strings.Repeat("x", 2000)+`"},"method":"sampling/createMessage"}`)
	if got := r.upstream.next(t, "upstream"); !strings.HasPrefix(got, `{"jsonrpc":"2.0","id":5,"error":{"code":-32603,`) {
		t.Fatalf("upstream got %.400s; want its request refused", got)
	}
	r.upstream.send(t, `{"jsonrpc":"2.0","id":5,"result":{"contents":[]}}`)
	if got := r.client.next(t, "client"); got != `{"jsonrpc":"2.0","id":5,"result":{"contents":[]}}` {
		t.Fatalf("client got %.400s; want the read's own answer", got)
	}
}
