package streamhttp

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
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
	v, _, _ := statelessVersion(m)
	return v
}

// TestServerStatelessAmbiguousVersion: DESIGN section 10. A POST without
// a session whose _meta, or the version in it, a server could read
// otherwise (given twice, or in another case) is refused with 400 and
// invalid params naming the member, before it is routed: the proxy would
// route it on the version it took, the stateless lane for one, and the
// upstream might read the other. With MCP-Protocol-Version set, the body
// is read against it all the same. A notification is refused so too.
func TestServerStatelessAmbiguousVersion(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{})
	const v = `"io.modelcontextprotocol/protocolVersion"`
	list := func(params string) string {
		return `{"jsonrpc":"2.0","id":3,"method":"tools/list","params":` + params + `}`
	}
	method := map[string]string{headerMcpMethod: "tools/list"}
	both := map[string]string{headerMcpMethod: "tools/list", headerProtocolVersion: "2026-07-28"}
	for _, tt := range []struct {
		name   string
		body   string
		hdr    map[string]string
		member string
	}{
		{"_meta twice", list(`{"_meta":{` + v + `:"2099-01-01"},"_meta":{` + v + `:"2026-07-28"}}`), method, `"_meta"`},
		{"_meta twice, the header set", list(`{"_meta":{` + v + `:"2099-01-01"},"_meta":{` + v + `:"2026-07-28"}}`), both, `"_meta"`},
		{"_meta in another case", list(`{"_META":{` + v + `:"2099-01-01"},"_meta":{` + v + `:"2026-07-28"}}`), method, `"_META"`},
		{"the version twice", list(`{"_meta":{` + v + `:"2099-01-01",` + v + `:"2026-07-28"}}`), method, v},
		{"the version twice, the header set", list(`{"_meta":{` + v + `:"2026-07-28",` + v + `:"2099-01-01"}}`), both, v},
		{"the version in another case", list(`{"_meta":{` + v + `:"2026-07-28","io.modelcontextprotocol/protocolversion":"2099-01-01"}}`), method, `"io.modelcontextprotocol/protocolversion"`},
		{"the progress token twice", list(`{"_meta":{` + v + `:"2026-07-28","progressToken":"a","progressToken":"b"}}`), both, `"progressToken"`},
		{"a notification", `{"jsonrpc":"2.0","method":"notifications/progress","params":{"_meta":{},"_meta":{` + v + `:"2026-07-28"}}}`,
			map[string]string{headerMcpMethod: "notifications/progress"}, `"_meta"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := p.seen(`"jsonrpc"`)
			resp := do(t, t.Context(), "POST", hs.URL, tt.body, tt.hdr)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("%s, want 400: %s", resp.Status, b)
			}
			m, err := jsonrpc.Decode(b)
			if err != nil || m.Error == nil {
				t.Fatalf("refused with %q; want a JSON-RPC error", b)
			}
			wantID := "3"
			if !strings.Contains(tt.body, `"id"`) {
				wantID = "null"
			}
			e := jsonrpc.DecodeError(m.Error)
			if string(m.ID) != wantID || e.Code != jsonrpc.CodeInvalidParams || !strings.Contains(e.Message, "ambiguous member: "+tt.member) {
				t.Fatalf("refused with %s; want %d under id %s naming %s", b, jsonrpc.CodeInvalidParams, wantID, tt.member)
			}
			if p.seen(`"jsonrpc"`) != before {
				t.Fatal("a refused request reached the proxy")
			}
		})
	}
}

// TestClientAmbiguousVersion: the Client does not POST a request whose
// _meta the server could read otherwise than the Client does when it
// picks the request's headers (MCP-Protocol-Version, the session's or
// none): WriteFrame fails, and nothing is sent.
func TestClientAmbiguousVersion(t *testing.T) {
	posts := make(chan string, 1)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		posts <- string(body)
		w.WriteHeader(http.StatusBadRequest)
	}))
	defer ts.Close()
	c := dial(t, ts.URL)
	frame := `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"},"_meta":{}}}`
	if err := c.WriteFrame([]byte(frame)); !errors.Is(err, jsonrpc.ErrAmbiguous) {
		t.Fatalf("WriteFrame(%s) = %v; want ErrAmbiguous", frame, err)
	}
	c.Close()
	select {
	case got := <-posts:
		t.Fatalf("the server got %s; want nothing", got)
	default:
	}
}
