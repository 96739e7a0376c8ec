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
