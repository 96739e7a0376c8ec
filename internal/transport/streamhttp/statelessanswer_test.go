package streamhttp

import (
	"io"
	"strings"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// TestServerStatelessAnswer: an answer posted without a session, as a
// 2026-07-28 client might post one to a server's request, is refused
// saying that no request of the server's reaches such a client, not
// that a header naming its method is missing, and not under its id,
// which is the client's own request's to read.
func TestServerStatelessAnswer(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{})
	for _, hdr := range []map[string]string{
		{headerProtocolVersion: "2026-07-28"},
		{headerProtocolVersion: "2026-07-28", headerMcpMethod: "elicitation/create"},
	} {
		resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":3,"result":{"action":"accept"}}`, hdr)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Fatalf("%s, want 400: %s", resp.Status, b)
		}
		m, err := jsonrpc.Decode(b)
		if err != nil || string(m.ID) != "null" || !strings.Contains(jsonrpc.DecodeError(m.Error).Message, "no request of the server's") {
			t.Fatalf("refused with %s; want an error under no id saying no request of the server's reaches a client without a session", b)
		}
	}
	if p.seen(`"accept"`) != 0 {
		t.Fatal("a refused answer reached the proxy")
	}
}
