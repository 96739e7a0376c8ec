package streamhttp

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// seenPOST is one POST a fake server received.
type seenPOST struct {
	header http.Header
	msg    *jsonrpc.Message
}

// fakeServer answers every request with an empty result (initialize with a
// session and version 2025-11-25), accepts notifications with 202, refuses
// GET and DELETE with 405, and sends each POST to the channel it returns.
func fakeServer(t *testing.T) (*httptest.Server, <-chan seenPOST) {
	t.Helper()
	seen := make(chan seenPOST, 16)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		body, _ := io.ReadAll(r.Body)
		m, err := jsonrpc.Decode(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		seen <- seenPOST{r.Header.Clone(), m}
		if !m.IsRequest() {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		result := `{}`
		if m.Method == "initialize" {
			w.Header().Set(headerSessionID, "sess-1")
			result = `{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"fake","version":"1"}}`
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(jsonrpc.NewResponse(m.ID, json.RawMessage(result)))
	}))
	t.Cleanup(ts.Close)
	return ts, seen
}

// TestEras drives one Client through messages of both eras, in order, as a
// client that probes with server/discover and a legacy session may mix
// them, and checks the headers of each POST. Notifications declare no
// version, so they follow the request before them.
func TestEras(t *testing.T) {
	ts, seen := fakeServer(t)
	c := dial(t, ts.URL)
	legacy := map[string]string{headerSessionID: "sess-1", headerProtocolVersion: "2025-11-25", headerMcpMethod: "", headerMcpName: ""}
	for _, tc := range []struct {
		name, frame string
		// want holds the expected value of each header; "" means absent.
		want map[string]string
	}{
		{"initialize", initialize,
			map[string]string{headerSessionID: "", headerProtocolVersion: "", headerMcpMethod: ""}},
		{"initialized", `{"jsonrpc":"2.0","method":"notifications/initialized"}`, legacy},
		{"legacy tools/list", `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, legacy},
		{"discover", `{"jsonrpc":"2.0","id":3,"method":"server/discover","params":{` + statelessMeta + `}}`,
			map[string]string{headerSessionID: "", headerProtocolVersion: "2026-07-28", headerMcpMethod: "server/discover", headerMcpName: ""}},
		{"notification after a stateless request", `{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}`,
			map[string]string{headerSessionID: "", headerProtocolVersion: "2026-07-28", headerMcpMethod: "notifications/roots/list_changed"}},
		{"stateless tools/call", `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"café","arguments":{},` +
			`"_meta":{"mcp-idempotent/execution-id":"01JX","io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`,
			map[string]string{headerSessionID: "", headerProtocolVersion: "2026-07-28", headerMcpMethod: "tools/call",
				headerMcpName: "=?base64?Y2Fmw6k=?=", headerIdempotencyKey: `"01JX"`}},
		// Not a stateless request in flight: it is for the session.
		{"cancellation", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`, legacy},
		{"legacy tools/call", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"café"}}`, legacy},
		{"notification after a legacy request", `{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}`, legacy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			write(t, c, tc.frame)
			p := <-seen
			for name, want := range tc.want {
				if got := p.header.Get(name); got != want {
					t.Errorf("%s = %q; want %q", name, got, want)
				}
			}
			if got := p.header.Get("Authorization"); got != "Bearer secret" {
				t.Errorf("Authorization = %q; the configured headers go on every POST", got)
			}
			if p.msg.IsRequest() {
				if resp, _ := readResponse(t, c, string(p.msg.ID)); resp.Error != nil {
					t.Errorf("answer = %s", resp.Raw)
				}
			}
		})
	}
}

// TestStatelessGoSDK runs requests of the 2026-07-28 era against the go-sdk
// server in stateless mode, which checks every header against the body: it
// answers them, passes its own JSON-RPC errors through untouched, and the
// Client opens no GET stream and sends no DELETE.
func TestStatelessGoSDK(t *testing.T) {
	for _, tc := range []struct {
		name         string
		jsonResponse bool
	}{{"sse", false}, {"json", true}} {
		t.Run(tc.name, func(t *testing.T) {
			_, rec, ts := newServer(t, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: tc.jsonResponse})
			c := dial(t, ts.URL)

			write(t, c, `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{`+statelessMeta+`}}`)
			disc, _ := readResponse(t, c, "1")
			if !strings.Contains(string(disc.Result), `"2026-07-28"`) {
				t.Fatalf("server/discover = %s; want 2026-07-28 among the supported versions", disc.Raw)
			}
			write(t, c, `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{`+statelessMeta+`}}`)
			if list, _ := readResponse(t, c, "2"); !strings.Contains(string(list.Result), `"echo"`) {
				t.Errorf("tools/list = %s", list.Raw)
			}
			write(t, c, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"},`+statelessMeta+`}}`)
			if call, _ := readResponse(t, c, "3"); !strings.Contains(string(call.Result), `"hi"`) {
				t.Errorf("tools/call = %s", call.Raw)
			}
			// A modern server answers an unknown method with 404 and a
			// JSON-RPC error, which the caller must see as it is.
			write(t, c, `{"jsonrpc":"2.0","id":4,"method":"no/such","params":{`+statelessMeta+`}}`)
			miss, _ := readResponse(t, c, "4")
			if e := jsonrpc.DecodeError(miss.Error); e == nil || e.Code != jsonrpc.CodeMethodNotFound {
				t.Errorf("unknown method = %s; want the server's own -32601", miss.Raw)
			}

			if err := c.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if n := len(rec.requests(http.MethodGet, "")) + len(rec.requests(http.MethodDelete, "")); n != 0 {
				t.Errorf("%d GET or DELETE requests; the stateless era has neither", n)
			}
			for _, s := range rec.requests(http.MethodPost, "") {
				if sid := s.header.Get(headerSessionID); sid != "" {
					t.Errorf("POST %s carried Mcp-Session-Id %q", s.body, sid)
				}
			}
		})
	}
}

// TestDiscoverThenInitialize is what a dual-era client does with a server
// of the 2025 era (the go-sdk server in stateful mode): server/discover
// lists no stateless version, so the client falls back to initialize, and
// the Client then keeps the session as before.
func TestDiscoverThenInitialize(t *testing.T) {
	_, rec, ts := newServer(t, nil)
	c := dial(t, ts.URL)
	write(t, c, `{"jsonrpc":"2.0","id":"d","method":"server/discover","params":{`+statelessMeta+`}}`)
	disc, _ := readResponse(t, c, `"d"`)
	if disc.Error != nil || strings.Contains(string(disc.Result), `"2026-07-28"`) {
		t.Fatalf("server/discover = %s; want a result without 2026-07-28", disc.Raw)
	}
	handshake(t, c)
	write(t, c, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`)
	if call, _ := readResponse(t, c, "2"); !strings.Contains(string(call.Result), `"hi"`) {
		t.Errorf("tools/call = %s", call.Raw)
	}
	calls := rec.requests(http.MethodPost, `"tools/call"`)
	if len(calls) != 1 || calls[0].header.Get(headerSessionID) == "" || calls[0].header.Get(headerMcpMethod) != "" {
		t.Errorf("the tools/call after initialize went with headers %v; want the session's", calls[0].header)
	}
}

// waitLog waits for a log record with message msg.
func waitLog(t *testing.T, events logEvents, msg string) {
	t.Helper()
	for m := range events {
		if m == msg {
			return
		}
	}
}

// TestStatelessCancel: in the 2026-07-28 era, notifications/cancelled is
// not POSTed; the Client closes the request's response stream, which the
// server takes as the cancellation, and answers the cancelled request with
// nothing.
func TestStatelessCancel(t *testing.T) {
	streamClosed := make(chan struct{})
	var mu sync.Mutex
	var methods []string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		m, err := jsonrpc.Decode(body)
		if err != nil {
			m = &jsonrpc.Message{}
		}
		mu.Lock()
		methods = append(methods, r.Method+" "+m.Method)
		mu.Unlock()
		if m.Method != "tools/call" {
			w.Header().Set("Content-Type", "application/json")
			w.Write(jsonrpc.NewResponse(m.ID, json.RawMessage(`{}`)))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"p\",\"progress\":1}}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(streamClosed)
	}))
	defer ts.Close()
	c, events := dialLogged(t, ts.URL)

	write(t, c, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"slow",`+statelessMeta+`}}`)
	if m := read(t, c); m.Method != "notifications/progress" {
		t.Fatalf("got %s; want the progress notification", m.Raw)
	}
	write(t, c, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`)
	<-streamClosed
	waitLog(t, events, "not answering a cancelled request")
	// A cancellation of a request already answered is dropped as well.
	write(t, c, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":6}}`)
	write(t, c, `{"jsonrpc":"2.0","id":8,"method":"ping","params":{`+statelessMeta+`}}`)
	if m := read(t, c); string(m.ID) != "8" {
		t.Fatalf("got %s; want the answer to ping, and nothing for the cancelled call", m.Raw)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"POST tools/call", "POST ping"}; !slices.Equal(methods, want) {
		t.Errorf("the server saw %q; want %q", methods, want)
	}
}

// TestStatelessNoResume: 2026-07-28 streams are not resumable, so an SSE
// answer that ends early is answered with an error at once, even when its
// events carry ids, and no GET is sent.
func TestStatelessNoResume(t *testing.T) {
	var gets atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			gets.Add(1)
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "id: 1\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\n\n")
	}))
	defer ts.Close()
	c := dial(t, ts.URL)
	write(t, c, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"x",`+statelessMeta+`}}`)
	if m := read(t, c); m.Method != "notifications/message" {
		t.Errorf("got %s; want the notification", m.Raw)
	}
	if na := readNoAnswer(t, c); string(na.ID) != "4" || na.NotSent {
		t.Errorf("got %+v; want id 4 unanswered, sent", *na)
	}
	if n := gets.Load(); n != 0 {
		t.Errorf("%d GET requests; want none", n)
	}
}

// TestParamHeadersGoSDK calls a tool whose inputSchema mirrors arguments
// into Mcp-Param-* headers, on the go-sdk server in stateless mode, which
// refuses a call whose headers do not match: before tools/list the Client
// cannot know the bindings, and the server's HeaderMismatch error reaches
// the caller as it is; after it, the calls go through, an argument that
// needs encoding included.
func TestParamHeadersGoSDK(t *testing.T) {
	server, rec, ts := newServer(t, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	server.AddTool(&mcp.Tool{Name: "execute_sql", InputSchema: json.RawMessage(`{"type":"object","properties":{
		"region":{"type":"string","x-mcp-header":"Region"},
		"query":{"type":"string"},
		"opts":{"type":"object","properties":{"shard":{"type":"integer","x-mcp-header":"Shard"}}}}}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ran"}}}, nil
		})
	c := dial(t, ts.URL)
	call := func(id, args string) *jsonrpc.Message {
		t.Helper()
		write(t, c, `{"jsonrpc":"2.0","id":`+id+`,"method":"tools/call","params":{"name":"execute_sql","arguments":`+args+`,`+statelessMeta+`}}`)
		m, _ := readResponse(t, c, id)
		return m
	}

	const headerMismatch = -32020 // spec 2026-07-28, "Server Validation"
	if m := call("1", `{"region":"us-west1","query":"SELECT 1"}`); m.Error == nil || jsonrpc.DecodeError(m.Error).Code != headerMismatch {
		t.Errorf("the call before tools/list got %s; want the server's HeaderMismatch", m.Raw)
	}
	write(t, c, `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{`+statelessMeta+`}}`)
	readResponse(t, c, "2")
	for _, tc := range []struct {
		id, args string
		want     map[string]string
	}{
		{"3", `{"region":"us-west1","query":"SELECT 1","opts":{"shard":42}}`,
			map[string]string{"Mcp-Param-Region": "us-west1", "Mcp-Param-Shard": "42"}},
		{"4", `{"region":"Zürich","query":"SELECT 1"}`,
			map[string]string{"Mcp-Param-Region": "=?base64?WsO8cmljaA==?=", "Mcp-Param-Shard": ""}},
		{"5", `{"region":null,"query":"SELECT 1"}`,
			map[string]string{"Mcp-Param-Region": "", "Mcp-Param-Shard": ""}},
	} {
		if m := call(tc.id, tc.args); m.Error != nil || !strings.Contains(string(m.Result), `"ran"`) {
			t.Errorf("call %s = %s", tc.args, m.Raw)
		}
		posts := rec.requests(http.MethodPost, `"id":`+tc.id+`,`)
		for name, want := range tc.want {
			if got := posts[0].header.Get(name); got != want {
				t.Errorf("call %s: %s = %q; want %q", tc.args, name, got, want)
			}
		}
	}
}
