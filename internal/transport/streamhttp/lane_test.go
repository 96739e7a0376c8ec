package streamhttp

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// TestLaneDropsCancelNotices: on a stateless lane the requests of many
// clients share one id space, the lane's ("h1", "h2"...). A
// notifications/cancelled a client posts there names no request of its
// own (a stateless client cancels by closing its request), and one
// naming a lane id would cancel another client's call: it is accepted
// and not passed on.
func TestLaneDropsCancelNotices(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{})
	slow := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":1,"method":"slow"}`,
		map[string]string{headerProtocolVersion: "2026-07-28", headerMcpMethod: "slow"})
	defer slow.Body.Close()
	waitFor(t, func() bool { return p.seen(`"id":"h1"`) == 1 })

	for _, requestID := range []string{`"h1"`, `1`} {
		resp := do(t, t.Context(), "POST", hs.URL,
			`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`+requestID+`,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`,
			map[string]string{headerProtocolVersion: "2026-07-28", headerMcpMethod: "notifications/cancelled"})
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("a cancel notice naming %s: %s; want 202", requestID, resp.Status)
		}
	}
	// A request after the notices: once it is answered, the proxy has
	// read everything posted before it.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	resp := do(t, ctx, "POST", hs.URL, `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`,
		map[string]string{headerProtocolVersion: "2026-07-28", headerMcpMethod: "tools/list"})
	msgs := readEvents(t, resp.Body)
	resp.Body.Close()
	if len(msgs) != 1 || !strings.Contains(msgs[0].data, `"id":2`) {
		t.Fatalf("the request after the notices was answered %v", msgs)
	}
	if n := p.seen(`notifications/cancelled`); n != 0 {
		t.Fatalf("the proxy got %d cancel notices posted on the lane: %v", n, p.frames)
	}
}
