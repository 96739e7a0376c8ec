package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// versionServer is an upstream that answers every request with an empty
// result, and initialize with the protocol version it was asked for, or
// with $1 when given: a server that agrees to any version.
var versionServer = []string{"sh", "-c", `
while IFS= read -r line; do
	id=$(printf '%s\n' "$line" | sed -nE 's/.*"id":("[^"]*"|-?[0-9]+).*/\1/p')
	[ -n "$id" ] || continue
	case "$line" in
	*'"method":"initialize"'*)
		v=${1:-$(printf '%s\n' "$line" | sed -nE 's/.*"protocolVersion":"([^"]*)".*/\1/p')}
		printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"%s","capabilities":{},"serverInfo":{"name":"v","version":"1"}}}\n' "$id" "$v" ;;
	*) printf '{"jsonrpc":"2.0","id":%s,"result":{}}\n' "$id" ;;
	esac
done`, "sh"}

// initializeAsking2027 asks for a protocol version serve does not know.
const initializeAsking2027 = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2027-01-01","capabilities":{},"clientInfo":{"name":"mcpi-e2e-raw","version":"0.0.1"}}}`

// sseData is the JSON-RPC message in body, an SSE stream or a JSON body.
func sseData(body string) string {
	for line := range strings.SplitSeq(body, "\n") {
		if data, ok := strings.CutPrefix(line, "data: "); ok && strings.HasPrefix(data, "{") {
			return data
		}
	}
	return body
}

// TestServeUnknownVersionNegotiatedDown: a client asking serve for a
// protocol version it does not know, in front of a server that agrees to
// anything, is answered with one serve knows, and the session it opens
// serves its requests. Before, the server echoed the unknown version,
// and serve refused every later request of the session with 400.
func TestServeUnknownVersionNegotiatedDown(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s := startServe(t, append([]string{"--"}, versionServer...)...)
	hc := httpClient(t)
	rep := rawRequest(t, ctx, hc, http.MethodPost, s.url, postHeaders(map[string]string{"Mcp-Protocol-Version": ""}), initializeAsking2027)
	var answer struct {
		Result struct{ ProtocolVersion string }
	}
	if err := json.Unmarshal([]byte(sseData(rep.body)), &answer); err != nil || answer.Result.ProtocolVersion != "2025-11-25" {
		t.Fatalf("initialize: status %d, body %s; want protocol 2025-11-25", rep.status, rep.body)
	}
	rs := openRawSessionAfter(t, ctx, hc, s.url, rep)
	if rep := rs.post(ctx, `{"jsonrpc":"2.0","id":2,"method":"ping"}`); rep.status != http.StatusOK || !strings.Contains(rep.body, `"result":{}`) {
		t.Fatalf("ping in the session: status %d, body %s; want 200 and its result", rep.status, rep.body)
	}
}

// TestServeUnknownVersionAgreedRefused: a server that answers initialize
// with a protocol version serve does not know, though asked for one it
// knows, gives the client an error and no session.
func TestServeUnknownVersionAgreedRefused(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s := startServe(t, append(append([]string{"--"}, versionServer...), "2027-01-01")...)
	rep := rawRequest(t, ctx, httpClient(t), http.MethodPost, s.url, postHeaders(map[string]string{"Mcp-Protocol-Version": ""}), initializeAsking2027)
	data := sseData(rep.body)
	if rep.header.Get("Mcp-Session-Id") != "" || errorCode(data) != -32602 || !strings.Contains(data, "2027-01-01") {
		t.Fatalf("initialize: session %q, body %s; want no session and a -32602 error naming 2027-01-01", rep.header.Get("Mcp-Session-Id"), rep.body)
	}
}

// TestServeAmbiguousVersionRefused: a request whose _meta, or the version
// in it, a server could read otherwise (given twice, or in another case)
// is refused with invalid params naming the member, not routed or passed
// on under the version serve took: without a session it would go to the
// stateless lane on the last of two versions, and inside one a ping
// declaring an unknown version first would reach the server.
func TestServeAmbiguousVersionRefused(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s := startServe(t, append([]string{"--"}, versionServer...)...)
	hc := httpClient(t)
	const v = `"io.modelcontextprotocol/protocolVersion"`
	list := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{` + v + `:"2099-01-01"},"_meta":{` + v + `:"2026-07-28"}}}`
	rep := rawRequest(t, ctx, hc, http.MethodPost, s.url, postHeaders(map[string]string{"Mcp-Protocol-Version": "", "Mcp-Method": "tools/list"}), list)
	if rep.status != http.StatusBadRequest || errorCode(rep.body) != -32602 || !strings.Contains(rep.body, `ambiguous member: \"_meta\" is given twice`) {
		t.Fatalf("tools/list without a session, _meta twice: status %d, body %s; want 400 and -32602 naming _meta", rep.status, rep.body)
	}
	rs := openRawSession(t, ctx, hc, s.url)
	for _, params := range []string{
		`{"_meta":{` + v + `:"2099-01-01",` + v + `:"2025-11-25"}}`,
		`{"_META":{` + v + `:"2099-01-01"},"_meta":{` + v + `:"2025-11-25"}}`,
	} {
		rep := rs.post(ctx, `{"jsonrpc":"2.0","id":2,"method":"ping","params":`+params+`}`)
		if data := sseData(rep.body); errorCode(data) != -32602 || !strings.Contains(data, "ambiguous member") || !strings.Contains(data, `"id":2`) {
			t.Fatalf("ping in the session, params %s: status %d, body %s; want -32602 for id 2 naming the member", params, rep.status, rep.body)
		}
	}
	if rep := rs.post(ctx, `{"jsonrpc":"2.0","id":3,"method":"ping","params":{"_meta":{`+v+`:"2025-11-25"}}}`); !strings.Contains(rep.body, `"result":{}`) {
		t.Fatalf("ping in the session, one version: status %d, body %s; want its result", rep.status, rep.body)
	}
}
