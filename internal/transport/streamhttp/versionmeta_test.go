package streamhttp

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
)

// TestServerStatelessUnknownVersion: a stateless request that names a
// protocol version the proxy does not know is refused, whether it names
// it in MCP-Protocol-Version or only in its _meta: the proxy has not the
// rules of that version, and would relay it as one it knows. The refusal
// is the 2026-07-28 protocol's UnsupportedProtocolVersionError, listing
// the versions the proxy speaks.
func TestServerStatelessUnknownVersion(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{})
	list := func(version string) string {
		return `{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"` + version + `"}}}`
	}
	for _, tt := range []struct {
		name   string
		body   string
		hdr    map[string]string
		status int
	}{
		{"known, in _meta only", list("2026-07-28"), map[string]string{headerMcpMethod: "tools/list"}, 200},
		{"unknown, in both", list("2026-08-01"), map[string]string{headerProtocolVersion: "2026-08-01", headerMcpMethod: "tools/list"}, 400},
		{"unknown, in _meta only", list("2026-08-01"), map[string]string{headerMcpMethod: "tools/list"}, 400},
		{"not a date, in _meta only", list("draft"), map[string]string{headerMcpMethod: "tools/list"}, 400},
		{"discover, unknown in _meta", `{"jsonrpc":"2.0","id":3,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2099-01-01"}}}`,
			map[string]string{headerMcpMethod: "server/discover"}, 400},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := p.seen(`"jsonrpc"`)
			resp := do(t, t.Context(), "POST", hs.URL, tt.body, tt.hdr)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("%s, want %d: %s", resp.Status, tt.status, b)
			}
			if tt.status == http.StatusOK {
				return
			}
			m, err := jsonrpc.Decode(b)
			if err != nil || m.Error == nil || tt.hdr[headerProtocolVersion] == "" && string(m.ID) != "3" {
				t.Fatalf("refused with %q; want a JSON-RPC error, for request 3 when the body was read", b)
			}
			e := jsonrpc.DecodeError(m.Error)
			if e.Code != codeUnsupportedVersion || !strings.Contains(e.Message, "unsupported") || !strings.Contains(e.Message, `"`+declaredVersion(tt.body)+`"`) {
				t.Fatalf("refused with %+v; want %d naming the unsupported version", e, codeUnsupportedVersion)
			}
			// The data a go-sdk client picks a version from to ask again.
			var data struct {
				Supported []string `json:"supported"`
				Requested string   `json:"requested"`
			}
			if err := json.Unmarshal(e.Data, &data); err != nil || !slices.Equal(data.Supported, mcp.Versions) || data.Requested != declaredVersion(tt.body) {
				t.Fatalf("refused with data %s; want supported %q and requested %q", e.Data, mcp.Versions, declaredVersion(tt.body))
			}
			if p.seen(`"jsonrpc"`) != before {
				t.Fatal("a refused request reached the proxy")
			}
		})
	}
}

// declaredVersion returns the protocol version the stateless request body declares.
func declaredVersion(body string) string {
	m, err := jsonrpc.Decode([]byte(body))
	if err != nil {
		return ""
	}
	v, _ := statelessVersion(m)
	return v
}
