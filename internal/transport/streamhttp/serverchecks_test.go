package streamhttp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

func TestServerBadInput(t *testing.T) {
	_, _, hs := newTestServer(t, ServerOptions{MaxMessage: 1024})
	sid := start(t, hs.URL, nil)
	bsid := startWith(t, hs.URL, batchInitBody, nil)
	tests := []struct {
		name   string
		method string
		body   string
		hdr    map[string]string
		status int
		code   int // the JSON-RPC error code in the body; 0 for none
	}{
		{"content type", "POST", initBody, map[string]string{"Content-Type": "text/plain"}, 415, -32600},
		{"no accept", "POST", initBody, map[string]string{"Accept": ""}, 406, -32600},
		{"accept json only", "POST", initBody, map[string]string{"Accept": "application/json"}, 406, -32600},
		{"accept refusing SSE", "POST", initBody, map[string]string{"Accept": "application/json, text/event-stream;q=0"}, 406, -32600},
		{"accept refusing SSE past a range", "POST", initBody, map[string]string{"Accept": "*/*, text/event-stream; q=0.0"}, 406, -32600},
		{"too large", "POST", `{"jsonrpc":"2.0","id":1,"method":"x","params":{"p":"` + strings.Repeat("a", 2000) + `"}}`, session(sid), 413, -32600},
		{"not json", "POST", `{"jsonrpc":`, session(sid), 400, -32700},
		{"not an object", "POST", `42`, session(sid), 400, -32600},
		{"id given twice", "POST", `{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}`, session(sid), 400, -32600},
		{"method in another case", "POST", `{"jsonrpc":"2.0","id":1,"method":"ping","Method":"tools/call"}`, session(sid), 400, -32600},
		{"no method nor id", "POST", `{"jsonrpc":"2.0"}`, session(sid), 400, -32600},
		{"an id alone", "POST", `{"jsonrpc":"2.0","id":7,"mehtod":"tools/list"}`, session(sid), 400, -32600},
		{"batch with an id alone", "POST", `[{"jsonrpc":"2.0","id":8,"method":"a"},{"jsonrpc":"2.0","id":9,"mehtod":"a"}]`, batchSession(bsid), 400, -32600},
		{"empty batch", "POST", `[]`, session(sid), 400, -32600},
		{"no jsonrpc member", "POST", `{"id":6,"method":"tools/list"}`, session(sid), 400, -32600},
		{"jsonrpc 1.0", "POST", `{"jsonrpc":"1.0","id":6,"method":"tools/list"}`, session(sid), 400, -32600},
		{"null id", "POST", `{"jsonrpc":"2.0","id":null,"method":"tools/list"}`, session(sid), 400, -32600},
		{"fractional id", "POST", `{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}`, session(sid), 400, -32600},
		{"tools/call without an id", "POST", `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"charge"}}`, session(sid), 400, -32600},
		{"batch with a tools/call without an id", "POST", `[{"jsonrpc":"2.0","id":8,"method":"a"},{"jsonrpc":"2.0","method":"tools/call","params":{"name":"charge"}}]`, batchSession(bsid), 400, -32600},
		{"batch reusing an id", "POST", `[{"jsonrpc":"2.0","id":5,"method":"a"},{"jsonrpc":"2.0","id":5,"method":"b"}]`, batchSession(bsid), 400, -32600},
		{"no session", "POST", `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, nil, 400, -32600},
		{"unknown session", "POST", `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, session("nope"), 404, -32600},
		{"bad version", "POST", `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, map[string]string{headerSessionID: sid, headerProtocolVersion: "1999-01-01"}, 400, codeUnsupportedVersion},
		{"put", "PUT", `{}`, session(sid), 405, -32600},
		{"get without accept", "GET", "", map[string]string{headerSessionID: sid, "Accept": "application/json"}, 406, -32600},
		{"get without session", "GET", "", nil, 405, -32600},
		{"get unknown session", "GET", "", session("nope"), 404, -32600},
		{"resume unknown event", "GET", "", map[string]string{headerSessionID: sid, headerLastEventID: "99-3"}, 400, -32600},
		{"resume bad event id", "GET", "", map[string]string{headerSessionID: sid, headerLastEventID: "x"}, 400, -32600},
		{"delete without session", "DELETE", "", nil, 400, -32600},
		{"delete unknown session", "DELETE", "", session("nope"), 404, -32600},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := do(t, t.Context(), tt.method, hs.URL, tt.body, tt.hdr)
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d; body %s", resp.StatusCode, tt.status, b)
			}
			m, err := jsonrpc.Decode(b)
			if err != nil || m.Error == nil {
				t.Fatalf("body %q is not a JSON-RPC error", b)
			}
			if e := jsonrpc.DecodeError(m.Error); e.Code != tt.code || e.Message == "" {
				t.Fatalf("error %+v, want code %d and a message", e, tt.code)
			}
		})
	}
}

// TestServerTooDeep: JSON nested past the decoders' limit is refused for
// that, not called "not JSON".
func TestServerTooDeep(t *testing.T) {
	_, _, hs := newTestServer(t, ServerOptions{})
	sid := start(t, hs.URL, nil)
	deep := strings.Repeat("[", 10001) + strings.Repeat("]", 10001)
	resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{"a":`+deep+`}}}`, session(sid))
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m, err := jsonrpc.Decode(b)
	if resp.StatusCode != 400 || err != nil || m.Error == nil {
		t.Fatalf("%s %s; want 400 with a JSON-RPC error", resp.Status, b)
	}
	if e := jsonrpc.DecodeError(m.Error); e.Code != jsonrpc.CodeParseError || !strings.Contains(e.Message, "deeper than 10000 levels") || strings.Contains(e.Message, "not JSON") {
		t.Errorf("refused with %+v; want a parse error saying it nests too deep", e)
	}
}

func TestServerOriginAndHost(t *testing.T) {
	_, _, hs := newTestServer(t, ServerOptions{AllowOrigins: []string{"https://app.example.com", "https://ports.example.com:443"},
		AllowHosts: []string{"MCP.Example.org", "[fd00::1]", "fqdn.example.net."}})
	tests := []struct {
		name   string
		hdr    map[string]string
		status int
	}{
		{"no origin", nil, 200},
		{"loopback origin", map[string]string{"Origin": "http://localhost:5173"}, 200},
		{"allowed origin", map[string]string{"Origin": "https://app.example.com"}, 200},
		{"foreign origin", map[string]string{"Origin": "https://evil.example"}, 403},
		{"allowed origin named with its default port", map[string]string{"Origin": "https://ports.example.com"}, 200},
		{"allowed origin's host on another port", map[string]string{"Origin": "https://app.example.com:8443"}, 403},
		{"allowed origin's host in another scheme", map[string]string{"Origin": "http://app.example.com"}, 403},
		{"null origin", map[string]string{"Origin": "null"}, 403},
		{"foreign host", map[string]string{"Host": "evil.example:80"}, 403},
		{"rebinding host", map[string]string{"Host": "attacker.localhost.evil.example"}, 403},
		{"allowed origin's host", map[string]string{"Host": "app.example.com"}, 200},
		{"allowed host in another case", map[string]string{"Host": "mcp.EXAMPLE.org:8080"}, 200},
		{"allowed IPv6 host", map[string]string{"Host": "[fd00::1]:8080"}, 200},
		// A DNS name with its final dot is the same host.
		{"allowed host with a final dot", map[string]string{"Host": "mcp.example.org.:8080"}, 200},
		{"host allowed with a final dot", map[string]string{"Host": "fqdn.example.net"}, 200},
		{"host allowed with a final dot, given so", map[string]string{"Host": "fqdn.example.net."}, 200},
		{"allowed origin's host with a final dot", map[string]string{"Host": "app.example.com."}, 200},
		{"allowed origin with a final dot", map[string]string{"Origin": "https://app.example.com."}, 200},
		{"loopback host with a final dot", map[string]string{"Host": "localhost.:8080"}, 200},
		{"final dot alone", map[string]string{"Host": "."}, 403},
		{"foreign host with a final dot", map[string]string{"Host": "evil.example."}, 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(t.Context(), "POST", hs.URL, strings.NewReader(initBody))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			for k, v := range tt.hdr {
				if k == "Host" {
					req.Host = v
				} else {
					req.Header.Set(k, v)
				}
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tt.status {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, b)
			}
		})
	}
}

// TestServerRepeatedHeaders: a header the server reads one value of,
// given twice, is refused: the server would read the first value, and
// another hop before or after it may read the last.
func TestServerRepeatedHeaders(t *testing.T) {
	_, _, hs := newTestServer(t, ServerOptions{})
	for _, tt := range []struct {
		name   string
		values []string
	}{
		{"Origin", []string{"http://localhost:5173", "https://evil.example"}},
		{"Mcp-Session-Id", []string{"a", "b"}},
		{"MCP-Protocol-Version", []string{"2025-11-25", "2025-06-18"}},
		{"Authorization", []string{"Bearer a", "Bearer b"}},
		{"Content-Type", []string{"application/json", "text/plain"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(t.Context(), "POST", hs.URL, strings.NewReader(initBody))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Del(tt.name)
			for _, v := range tt.values {
				req.Header.Add(tt.name, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("%s given twice: %s %s; want 400", tt.name, resp.Status, b)
			}
		})
	}
	// Two Hosts: Go's server refuses them before the handler (Go's
	// client cannot send them, so the request is written by hand).
	conn, err := net.Dial("tcp", hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: localhost\r\nHost: evil.example\r\nContent-Type: application/json\r\n"+
		"Accept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n%s", len(initBody), initBody)
	if status, _ := bufio.NewReader(conn).ReadString('\n'); !strings.Contains(status, " 400 ") {
		t.Errorf("Host given twice: %q; want 400", status)
	}
	// Accept is a list: given twice, its values add up.
	req, _ := http.NewRequestWithContext(t.Context(), "POST", hs.URL, strings.NewReader(initBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Add("Accept", "application/json")
	req.Header.Add("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("Accept given twice: %s; want 200", resp.Status)
	}
}

func TestServerAuth(t *testing.T) {
	srv, p, hs := newTestServer(t, ServerOptions{Tokens: map[string]string{"tok-a": "alice", "tok-b": "bob"}})
	for _, auth := range []string{"", "Bearer wrong", "Basic dG9rLWE6", "Bearer tok-a-longer"} {
		resp := do(t, t.Context(), "POST", hs.URL, initBody, map[string]string{"Authorization": auth})
		resp.Body.Close()
		if resp.StatusCode != 401 || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Fatalf("Authorization %q: %s, WWW-Authenticate %q; want 401 and a Bearer challenge", auth, resp.Status, resp.Header.Get("WWW-Authenticate"))
		}
	}
	sidA := start(t, hs.URL, map[string]string{"Authorization": "Bearer tok-a"})
	// Bob's token does not open Alice's session.
	hdr := session(sidA)
	hdr["Authorization"] = "Bearer tok-b"
	resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, hdr)
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("another token's session: %s, want 404", resp.Status)
	}
	if srv.Sessions() != 1 || p.opened != 1 {
		t.Fatalf("%d sessions open, %d opened; want 1", srv.Sessions(), p.opened)
	}
	srv.mu.Lock()
	actor := srv.sessions[sidA].Actor()
	srv.mu.Unlock()
	if actor != "alice" {
		t.Fatalf("the session acts for %q, want alice", actor)
	}
}

// TestServerAuthEmptyTokens: a Tokens map that is empty but not nil still
// requires a token, and so accepts none: only nil turns authentication off.
func TestServerAuthEmptyTokens(t *testing.T) {
	srv, p, hs := newTestServer(t, ServerOptions{Tokens: map[string]string{}})
	for _, auth := range []string{"", "Bearer ", "Bearer tok-a"} {
		resp := do(t, t.Context(), "POST", hs.URL, initBody, map[string]string{"Authorization": auth})
		resp.Body.Close()
		if resp.StatusCode != 401 || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Fatalf("Authorization %q: %s, WWW-Authenticate %q; want 401 and a Bearer challenge", auth, resp.Status, resp.Header.Get("WWW-Authenticate"))
		}
	}
	p.mu.Lock()
	opened := p.opened
	p.mu.Unlock()
	if srv.Sessions() != 0 || opened != 0 {
		t.Fatalf("%d sessions open, %d opened; want none", srv.Sessions(), opened)
	}
}

// TestServerRefusalsCarryTheID: a request refused for what it holds is
// refused under its id when that id is valid, and under null when the id
// is the fault.
func TestServerRefusalsCarryTheID(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{})
	sid := start(t, hs.URL, nil)
	for body, want := range map[string]string{
		`{"jsonrpc":"1.0","id":100,"method":"tools/list"}`:  `"id":100,"error"`,
		`{"jsonrpc":"2.0","id":true,"method":"tools/list"}`: `"id":null,"error"`,
		// Valid JSON, but which id it has depends on who reads it.
		`{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}`: `"id":null,"error":{"code":-32600,"message":"ambiguous member: \"id\" is given twice"`,
		// A request whose method is misspelled would be taken for an
		// answer, and its client would wait.
		`{"jsonrpc":"2.0","id":7,"mehtod":"tools/list"}`:    `"id":7,"error":{"code":-32600,"message":"not a JSON-RPC message: it has an id, but neither a method, a result nor an error"`,
		`{"jsonrpc":"2.0","id":true,"mehtod":"tools/list"}`: `"id":null,"error":{"code":-32600,"message":"not a JSON-RPC message`,
	} {
		resp := do(t, t.Context(), "POST", hs.URL, body, session(sid))
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(got), want) {
			t.Errorf("%s: %s %s; want 400 with %s", body, resp.Status, got, want)
		}
	}
	if n := p.seen("mehtod"); n != 0 {
		t.Errorf("the proxy read %d messages without a method; want none", n)
	}
}

// TestServerBatchOfASessionVersion: since 2025-06-18 a POST carries one
// message, and a server of that version fails on a batch (the go-sdk's
// ends the session, with every call under way on it). Such a batch is
// refused before the proxy reads it. The version is the request's
// MCP-Protocol-Version, else the one the session's initialize result
// gave; a 2025-03-26 session keeps its batches.
func TestServerBatchOfASessionVersion(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{})
	const batch = `[{"jsonrpc":"2.0","id":"b1","method":"batched"},{"jsonrpc":"2.0","id":"b2","method":"batched"}]`
	tests := []struct {
		name, initialized, header string
		refused                   bool
	}{
		{"2025-06-18 header", "2025-03-26", "2025-06-18", true},
		{"2025-11-25 header", "2025-11-25", "2025-11-25", true},
		{"2025-06-18 session without the header", "2025-06-18", "", true},
		{"2025-03-26 header", "2025-03-26", "2025-03-26", false},
		{"2025-03-26 session without the header", "2025-03-26", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := do(t, t.Context(), "POST", hs.URL, strings.Replace(initBody, version, tt.initialized, 1), nil)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			sid := resp.Header.Get(headerSessionID)
			before := p.seen(`"batched"`)
			resp = do(t, t.Context(), "POST", hs.URL, batch, map[string]string{headerSessionID: sid, headerProtocolVersion: tt.header})
			defer resp.Body.Close()
			if !tt.refused {
				if msgs := readEvents(t, resp.Body); resp.StatusCode != 200 || len(msgs) != 2 {
					t.Fatalf("%s, answers %v; want both answered", resp.Status, msgs)
				}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 400 || !strings.Contains(string(b), `"code":-32600`) || !strings.Contains(string(b), "one message per POST") {
				t.Fatalf("%s %s; want 400, -32600, one message per POST", resp.Status, b)
			}
			if p.seen(`"batched"`) != before {
				t.Fatal("the proxy read the batch")
			}
		})
	}
}

// TestServerBatchBeyondTheEventBuffer: the answers to a batch come at
// once, and a session holds its last EventBuffer events, so a batch of
// more requests would lose some of its answers after they ran. It is
// refused before the proxy reads it; one that fits is answered whole.
func TestServerBatchBeyondTheEventBuffer(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{EventBuffer: 4})
	bsid := startWith(t, hs.URL, batchInitBody, nil)
	batch := func(requests int) string {
		msgs := []string{`{"jsonrpc":"2.0","method":"notifications/batched"}`}
		for i := range requests {
			msgs = append(msgs, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"batched"}`, i))
		}
		return "[" + strings.Join(msgs, ",") + "]"
	}
	resp := do(t, t.Context(), "POST", hs.URL, batch(5), batchSession(bsid))
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), `"code":-32600`) || !strings.Contains(string(b), "at most 4 in one batch") {
		t.Fatalf("a batch of 5 requests: %s %s; want 400, -32600, at most 4", resp.Status, b)
	}
	if n := p.seen(`batched"`); n != 0 {
		t.Fatalf("the proxy read %d messages of the refused batch", n)
	}
	resp = do(t, t.Context(), "POST", hs.URL, batch(4), batchSession(bsid))
	defer resp.Body.Close()
	if msgs := readEvents(t, resp.Body); resp.StatusCode != 200 || len(msgs) != 4 {
		t.Fatalf("a batch of 4 requests: %s, answers %v; want all 4 answered", resp.Status, msgs)
	}
}

// TestServerBatchTooLargeForAnUnknownSession: a batch too large for any
// session, sent to one that does not exist, is told the session is
// unknown (404), which is what the client must act on first.
func TestServerBatchTooLargeForAnUnknownSession(t *testing.T) {
	_, _, hs := newTestServer(t, ServerOptions{EventBuffer: 4})
	var msgs []string
	for i := range 5 {
		msgs = append(msgs, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"batched"}`, i))
	}
	resp := do(t, t.Context(), "POST", hs.URL, "["+strings.Join(msgs, ",")+"]", batchSession("no-such-session"))
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("a batch of 5 to an unknown session: %s %s; want 404", resp.Status, b)
	}
}

// TestServerStatelessHeaders: a stateless request whose headers disagree
// with its body is refused before it reaches the proxy.
func TestServerStatelessHeaders(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{})
	call := func(name string) string {
		return `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"` + name + `","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`
	}
	v := "2026-07-28"
	for _, tt := range []struct {
		name   string
		body   string
		hdr    map[string]string
		status int
	}{
		{"matching", call("charge"), map[string]string{headerProtocolVersion: v, headerMcpMethod: "tools/call", headerMcpName: "charge"}, 200},
		{"encoded name", call("café"), map[string]string{headerProtocolVersion: v, headerMcpMethod: "tools/call", headerMcpName: "=?base64?Y2Fmw6k=?="}, 200},
		{"no method header", call("charge"), map[string]string{headerProtocolVersion: v, headerMcpName: "charge"}, 400},
		{"other method", call("charge"), map[string]string{headerProtocolVersion: v, headerMcpMethod: "tools/list", headerMcpName: "charge"}, 400},
		{"no name header", call("charge"), map[string]string{headerProtocolVersion: v, headerMcpMethod: "tools/call"}, 400},
		{"other name", call("charge"), map[string]string{headerProtocolVersion: v, headerMcpMethod: "tools/call", headerMcpName: "refund"}, 400},
		{"bad base64", call("charge"), map[string]string{headerProtocolVersion: v, headerMcpMethod: "tools/call", headerMcpName: "=?base64?!!?="}, 400},
		{"other version", strings.Replace(call("charge"), "2026-07-28", "2026-08-01", 1), map[string]string{headerProtocolVersion: v, headerMcpMethod: "tools/call", headerMcpName: "charge"}, 400},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := p.seen(`"tools/call"`)
			resp := do(t, t.Context(), "POST", hs.URL, tt.body, tt.hdr)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("%s, want %d: %s", resp.Status, tt.status, b)
			}
			if tt.status == 200 {
				return
			}
			if m, err := jsonrpc.Decode(b); err != nil || string(m.ID) != "3" || jsonrpc.DecodeError(m.Error).Code != codeHeaderMismatch {
				t.Fatalf("refused with %s; want a -32020 error for request 3", b)
			}
			if p.seen(`"tools/call"`) != before {
				t.Fatal("a refused request reached the proxy")
			}
		})
	}
}

// TestServerBodyTimeout: a client that sends part of a body and stops is
// cut off after BodyTimeout, not left holding the connection.
func TestServerBodyTimeout(t *testing.T) {
	_, _, hs := newTestServer(t, ServerOptions{BodyTimeout: 200 * time.Millisecond})
	c, err := net.Dial("tcp", strings.TrimPrefix(hs.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer 5s after the body stopped coming: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("the server answered %d; want 400", resp.StatusCode)
	}
	// The refusal says what was slow and what to do, not a socket's
	// "i/o timeout".
	if want := "did not all come within 200ms"; !strings.Contains(string(body), want) || strings.Contains(string(body), "i/o timeout") {
		t.Errorf("the refusal %s does not say %q", body, want)
	}
}

// TestServerRefusesUnreadBodyAtOnce: a request refused before its body
// is read (here, without a valid token) is answered at once, not once its
// body has all come, however slowly the client sends it.
func TestServerRefusesUnreadBodyAtOnce(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{Tokens: map[string]string{"tok-a": "alice"}})
	c, err := net.Dial("tcp", strings.TrimPrefix(hs.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer wrong\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer 10s after the headers, the body still owed: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
		t.Errorf("answered %s, closing %v; want 401, and the connection closed", resp.Status, resp.Close)
	}
	// The server does not wait for the body for ever either: it closes
	// the connection.
	if _, err := br.ReadByte(); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the connection is still open 10s after the headers, the body still owed")
	}
	if p.seen("{") != 0 {
		t.Error("an unauthenticated body reached the proxy")
	}
}

// TestServerBatchInALaterSession: a header naming 2025-03-26 does not let
// a batch into a session that agreed on a later protocol, whose upstream
// would fail on it.
func TestServerBatchInALaterSession(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{})
	sid := start(t, hs.URL, nil)
	resp := do(t, t.Context(), "POST", hs.URL, `[{"jsonrpc":"2.0","id":8,"method":"a"},{"jsonrpc":"2.0","id":9,"method":"b"}]`, batchSession(sid))
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m, err := jsonrpc.Decode(b)
	if resp.StatusCode != 400 || err != nil || m.Error == nil {
		t.Fatalf("%s %s; want 400 with a JSON-RPC error", resp.Status, b)
	}
	if e := jsonrpc.DecodeError(m.Error); e.Code != jsonrpc.CodeInvalidRequest || !strings.Contains(e.Message, "a session of protocol "+version+" takes one message per POST") {
		t.Errorf("refused with %+v; want -32600 naming the session's protocol", e)
	}
	if p.seen(`"id":8`) != 0 {
		t.Error("the batch reached the proxy")
	}
}

// TestServerInitializeInABatch: an initialize sent in a batch with other
// messages starts no session, and the refusal says why: MCP 2025-03-26
// forbids it, and "Mcp-Session-Id is required: start a session with
// initialize" would send the client back to what it sent.
func TestServerInitializeInABatch(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{})
	resp := do(t, t.Context(), "POST", hs.URL, "["+batchInitBody+`,{"jsonrpc":"2.0","id":9,"method":"ping"}]`, nil)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m, err := jsonrpc.Decode(b)
	if resp.StatusCode != 400 || err != nil || m.Error == nil || resp.Header.Get(headerSessionID) != "" {
		t.Fatalf("%s %s; want 400 with a JSON-RPC error and no session", resp.Status, b)
	}
	if e := jsonrpc.DecodeError(m.Error); e.Code != jsonrpc.CodeInvalidRequest || !strings.Contains(e.Message, "initialize starts a session alone") {
		t.Errorf("refused with %+v; want -32600 saying initialize goes alone", e)
	}
	if p.seen(`"id":9`) != 0 {
		t.Error("the batch reached the proxy")
	}
}

// TestHandlerOtherPaths: a path other than the endpoint's gets 404 at
// once, its body unread, and the connection closes rather than wait for
// the body; the endpoint is served.
func TestHandlerOtherPaths(t *testing.T) {
	srv, p, _ := newTestServer(t, ServerOptions{})
	hs := httptest.NewServer(srv.Handler("/mcp"))
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
	})
	start(t, hs.URL+"/mcp", nil)

	c, err := net.Dial("tcp", strings.TrimPrefix(hs.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /other HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"a\"")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer 10s after the headers, the body still owed: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !resp.Close || !strings.Contains(string(b), "/other is not the MCP endpoint, which is /mcp") {
		t.Errorf("answered %s, closing %v, %s; want 404 naming the endpoint, and the connection closed", resp.Status, resp.Close, b)
	}
	if _, err := br.ReadByte(); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the connection is still open 10s after the headers, the body still owed")
	}
	if p.seen(`"a"`) != 0 {
		t.Error("a body for another path reached the proxy")
	}
}

// TestHandlerPathAsGiven: the endpoint's path is taken as it is, not as a
// ServeMux pattern: braces are no wildcard (nor a panic), and a path
// ending in "/" is not a subtree.
func TestHandlerPathAsGiven(t *testing.T) {
	for _, tt := range []struct{ path, other string }{
		{"/{", "/x"},
		{"/a/{id}", "/a/7"},
		{"/mcp/", "/mcp/x"},
		{"/", "/mcp"},
	} {
		t.Run(tt.path, func(t *testing.T) {
			srv, _, _ := newTestServer(t, ServerOptions{})
			hs := httptest.NewServer(srv.Handler(tt.path))
			t.Cleanup(func() {
				hs.CloseClientConnections()
				hs.Close()
			})
			start(t, hs.URL+tt.path, nil)
			resp := do(t, t.Context(), "POST", hs.URL+tt.other, initBody, nil)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("POST %s, endpoint %s: %s %s; want 404", tt.other, tt.path, resp.Status, b)
			}
		})
	}
}

// TestServerRefusesALongBodyAtOnce: a body whose Content-Length is over
// MaxMessage gets 413 before any of it is read, not once the limit's
// worth has come (nor after BodyTimeout, for a client that waits for an
// answer to its headers).
func TestServerRefusesALongBodyAtOnce(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{MaxMessage: 1024, BodyTimeout: time.Hour})
	c, err := net.Dial("tcp", strings.TrimPrefix(hs.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 100000\r\n\r\n{")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer 10s after the headers, the body still owed: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "--max-message-size") {
		t.Errorf("answered %s %s; want 413 naming the limit", resp.Status, b)
	}
	if p.seen(`{`) != 0 {
		t.Error("the body reached the proxy")
	}
}

// TestServerRefusalEchoesLittle: a refusal quotes what the client sent
// (here a session id of half a megabyte) cut short, saying how long it
// was, rather than echo it whole.
func TestServerRefusalEchoesLittle(t *testing.T) {
	_, _, hs := newTestServer(t, ServerOptions{})
	id := strings.Repeat("x", 500_000)
	resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":1,"method":"ping"}`, session(id))
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || len(b) > 1000 || !strings.Contains(string(b), "(500000 bytes)") {
		t.Fatalf("an unknown session id of 500,000 bytes: %s with %d bytes %.300q; want 404, under 1,000 bytes, giving its length", resp.Status, len(b), b)
	}
}

// TestServerRefusalEchoesLittleOfAnID: a refusal quoting a request's id
// (here a batch giving one id of 300,000 bytes twice) cuts it short too.
func TestServerRefusalEchoesLittleOfAnID(t *testing.T) {
	_, _, hs := newTestServer(t, ServerOptions{})
	req := `{"jsonrpc":"2.0","id":"` + strings.Repeat("x", 300_000) + `","method":"ping"}`
	resp := do(t, t.Context(), "POST", hs.URL, "["+req+","+req+"]", nil)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || len(b) > 1000 || !strings.Contains(string(b), "(300002 bytes)") {
		t.Fatalf("a batch giving an id of 300,000 bytes twice: %s with %d bytes %.300q; want 400, under 1,000 bytes, giving its length", resp.Status, len(b), b)
	}
}
