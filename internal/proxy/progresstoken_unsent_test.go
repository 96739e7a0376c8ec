package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

// refusingUpstream is a sink that cannot write a tools/call.
type refusingUpstream struct{ sink }

func (u *refusingUpstream) WriteRequest(id string, method string, params json.RawMessage) error {
	if method == "tools/call" {
		return errors.New("broken pipe")
	}
	return u.sink.WriteRequest(id, method, params)
}

// TestUnsentCallLeavesNoProgressToken: a call the upstream could not
// take is over; the session keeps nothing of it for the token it would
// have gone upstream with. Kept, its caller and the request it came in
// would stay in memory until a thousand later calls pushed it out.
func TestUnsentCallLeavesNoProgressToken(t *testing.T) {
	client, upstream := &sink{}, &refusingUpstream{}
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom()})
	s := New(client, upstream, Options{Interceptor: in, Actor: "a", Scope: "s", UpstreamID: "u"})
	ctx := context.Background()
	s.fromClient(ctx, []byte(`{"jsonrpc":"2.0","id":"l","method":"tools/list","params":{}}`))
	s.fromUpstream(s.up, []byte(`{"jsonrpc":"2.0","id":"l","result":{"tools":[{"name":"charge_card","inputSchema":{"type":"object"}}]}}`))
	client.take()
	s.fromClient(ctx, []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{},"_meta":{"progressToken":"p1"}}}`))
	if got := client.take(); got == nil {
		t.Fatal("the call was not answered")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, tok := range s.tokens {
		t.Errorf("the session holds the token %s of a call never sent (for its caller: %v)", key, tok.call != nil)
	}
}
