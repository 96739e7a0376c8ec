package streamhttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// recorder wraps a handler and keeps the requests it saw.
type recorder struct {
	next http.Handler

	mu   sync.Mutex
	seen []seenRequest
	// fail, when set, answers the next POST carrying a request with this
	// method instead of the handler.
	fail func(w http.ResponseWriter, body string) bool
	// hook, when set, sees each request first.
	hook func(*http.Request)
	// got receives the method of each request, for tests that wait for one.
	got chan string
}

type seenRequest struct {
	method string
	header http.Header
	body   string
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	req.Body = io.NopCloser(strings.NewReader(string(body)))
	r.mu.Lock()
	r.seen = append(r.seen, seenRequest{req.Method, req.Header.Clone(), string(body)})
	fail, hook := r.fail, r.hook
	r.mu.Unlock()
	if hook != nil {
		hook(req)
	}
	if r.got != nil {
		select {
		case r.got <- req.Method:
		default:
		}
	}
	if fail != nil && req.Method == http.MethodPost && fail(w, string(body)) {
		return
	}
	r.next.ServeHTTP(w, req)
}

// requests returns the requests seen whose body contains substr.
func (r *recorder) requests(method, substr string) []seenRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []seenRequest
	for _, s := range r.seen {
		if s.method == method && strings.Contains(s.body, substr) {
			out = append(out, s)
		}
	}
	return out
}

type progressArgs struct {
	Steps int `json:"steps"`
}

// newServer starts a go-sdk server behind a recorder.
func newServer(t *testing.T, opts *mcp.StreamableHTTPOptions) (*mcp.Server, *recorder, *httptest.Server) {
	t.Helper()
	server := mcp.NewServer(&mcp.Implementation{Name: "upstream", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "echo"}, func(ctx context.Context, req *mcp.CallToolRequest, in struct {
		Text string `json:"text"`
	}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
	})
	mcp.AddTool(server, &mcp.Tool{Name: "progress"}, func(ctx context.Context, req *mcp.CallToolRequest, in progressArgs) (*mcp.CallToolResult, any, error) {
		for i := range in.Steps {
			err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: req.Params.GetProgressToken(),
				Progress:      float64(i + 1),
				Total:         float64(in.Steps),
			})
			if err != nil {
				return nil, nil, err
			}
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
	})
	rec := &recorder{next: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, opts)}
	ts := httptest.NewServer(rec)
	t.Cleanup(ts.Close)
	return server, rec, ts
}

func dial(t *testing.T, url string) *Client {
	t.Helper()
	c, err := Dial(context.Background(), url, Options{Header: http.Header{"Authorization": {"Bearer secret"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func write(t *testing.T, c *Client, frame string) {
	t.Helper()
	if err := c.WriteFrame([]byte(frame)); err != nil {
		t.Fatalf("WriteFrame(%s): %v", frame, err)
	}
}

func read(t *testing.T, c *Client) *jsonrpc.Message {
	t.Helper()
	f, err := c.ReadFrame()
	if err != nil {
		t.Fatalf("ReadFrame: %v", err)
	}
	if strings.ContainsAny(string(f), "\r\n") {
		t.Errorf("frame holds a newline: %q", f)
	}
	m, err := jsonrpc.Decode(f)
	if err != nil {
		t.Fatalf("decoding %s: %v", f, err)
	}
	return m
}

// readNoAnswer reads the Client's own account of a request the server did
// not answer, which must come next.
func readNoAnswer(t *testing.T, c *Client) *jsonrpc.NoAnswer {
	t.Helper()
	f, err := c.ReadFrame()
	na, ok := errors.AsType[*jsonrpc.NoAnswer](err)
	if !ok {
		t.Fatalf("ReadFrame = %s, %v; want a *jsonrpc.NoAnswer", f, err)
	}
	return na
}

// readResponse reads frames until the response with id, returning it and
// the frames before it.
func readResponse(t *testing.T, c *Client, id string) (*jsonrpc.Message, []*jsonrpc.Message) {
	t.Helper()
	var before []*jsonrpc.Message
	for {
		m := read(t, c)
		if m.IsResponse() && string(m.ID) == id {
			return m, before
		}
		before = append(before, m)
	}
}

const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"test","version":"1"}}}`

// handshake initializes the session and returns the initialize result.
func handshake(t *testing.T, c *Client) *jsonrpc.Message {
	t.Helper()
	write(t, c, initialize)
	resp, _ := readResponse(t, c, "1")
	if resp.Error != nil {
		t.Fatalf("initialize failed: %s", resp.Raw)
	}
	write(t, c, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return resp
}

func TestSession(t *testing.T) {
	for _, jsonResponse := range []bool{false, true} {
		name := "sse"
		if jsonResponse {
			name = "json"
		}
		t.Run(name, func(t *testing.T) {
			_, rec, ts := newServer(t, &mcp.StreamableHTTPOptions{JSONResponse: jsonResponse})
			c := dial(t, ts.URL)
			init := handshake(t, c)
			var r struct {
				ProtocolVersion string `json:"protocolVersion"`
			}
			json.Unmarshal(init.Result, &r)
			if r.ProtocolVersion != "2025-11-25" {
				t.Errorf("protocolVersion = %q", r.ProtocolVersion)
			}
			sid := c.SessionID()
			if sid == "" {
				t.Fatal("no session id after initialize")
			}

			write(t, c, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
			list, _ := readResponse(t, c, "2")
			if !strings.Contains(string(list.Result), `"echo"`) {
				t.Errorf("tools/list = %s", list.Raw)
			}
			write(t, c, `{"jsonrpc":"2.0","id":"c-3","method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"},"_meta":{"mcp-idempotent/execution-id":"01JEXEC"}}}`)
			call, _ := readResponse(t, c, `"c-3"`)
			if !strings.Contains(string(call.Result), `"hi"`) {
				t.Errorf("tools/call = %s", call.Raw)
			}

			for _, s := range rec.requests(http.MethodPost, "") {
				if got := s.header.Get("Authorization"); got != "Bearer secret" {
					t.Errorf("POST %s: Authorization = %q", s.body, got)
				}
				if got := s.header.Get("Accept"); got != "application/json, text/event-stream" {
					t.Errorf("POST: Accept = %q", got)
				}
				if strings.Contains(s.body, `"initialize"`) {
					if s.header.Get(headerSessionID) != "" || s.header.Get(headerProtocolVersion) != "" {
						t.Errorf("initialize carried session headers: %v", s.header)
					}
					continue
				}
				if got := s.header.Get(headerSessionID); got != sid {
					t.Errorf("POST %s: Mcp-Session-Id = %q, want %q", s.body, got, sid)
				}
				if got := s.header.Get(headerProtocolVersion); got != "2025-11-25" {
					t.Errorf("POST %s: MCP-Protocol-Version = %q", s.body, got)
				}
			}
			calls := rec.requests(http.MethodPost, `"tools/call"`)
			if len(calls) != 1 || calls[0].header.Get(headerIdempotencyKey) != `"01JEXEC"` {
				t.Errorf("Idempotency-Key of the tools/call = %q", calls[0].header.Get(headerIdempotencyKey))
			}
			if got := rec.requests(http.MethodPost, `"tools/list"`)[0].header.Get(headerIdempotencyKey); got != "" {
				t.Errorf("tools/list carried Idempotency-Key %q", got)
			}

			if err := c.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			dels := rec.requests(http.MethodDelete, "")
			if len(dels) != 1 || dels[0].header.Get(headerSessionID) != sid {
				t.Errorf("DELETE requests: %v", dels)
			}
			if _, err := c.ReadFrame(); err != io.EOF {
				t.Errorf("ReadFrame after Close = %v, want io.EOF", err)
			}
			if err := c.WriteFrame([]byte(`{"jsonrpc":"2.0","id":9,"method":"ping"}`)); !errors.Is(err, ErrClosed) {
				t.Errorf("WriteFrame after Close = %v, want ErrClosed", err)
			}
		})
	}
}

// TestProgressOverSSE checks that the notifications a tool sends before its
// result arrive, in order, before the result, and that the SSE event ids are
// kept.
func TestProgressOverSSE(t *testing.T) {
	// The go-sdk server numbers its events only when it can replay them.
	_, _, ts := newServer(t, &mcp.StreamableHTTPOptions{EventStore: mcp.NewMemoryEventStore(nil)})
	c := dial(t, ts.URL)
	handshake(t, c)
	write(t, c, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"progress","arguments":{"steps":3},"_meta":{"progressToken":"tok"}}}`)
	resp, before := readResponse(t, c, "7")
	if !strings.Contains(string(resp.Result), `"done"`) {
		t.Errorf("result = %s", resp.Raw)
	}
	var progress []float64
	for _, m := range before {
		if m.Method != "notifications/progress" {
			continue
		}
		var p struct {
			ProgressToken string  `json:"progressToken"`
			Progress      float64 `json:"progress"`
		}
		json.Unmarshal(m.Params, &p)
		if p.ProgressToken != "tok" {
			t.Errorf("progress token = %q", p.ProgressToken)
		}
		progress = append(progress, p.Progress)
	}
	if len(progress) != 3 || progress[0] != 1 || progress[2] != 3 {
		t.Errorf("progress = %v, want [1 2 3]", progress)
	}
	if c.LastEventID() == "" {
		t.Error("no SSE event id kept")
	}
}

// TestGETStream checks that a server-to-client message sent outside any
// request reaches ReadFrame through the GET stream.
func TestGETStream(t *testing.T) {
	server, rec, ts := newServer(t, nil)
	rec.got = make(chan string, 16)
	c := dial(t, ts.URL)
	handshake(t, c)
	for m := range rec.got {
		if m == http.MethodGet {
			break
		}
	}
	gets := rec.requests(http.MethodGet, "")
	if len(gets) == 0 || gets[0].header.Get(headerSessionID) != c.SessionID() || gets[0].header.Get("Accept") != "text/event-stream" {
		t.Fatalf("GET stream requests: %v", gets)
	}
	// Adding a tool makes the server send notifications/tools/list_changed,
	// which belongs to no request.
	server.AddTool(&mcp.Tool{Name: "late", InputSchema: json.RawMessage(`{"type":"object"}`)}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{}, nil
	})
	m := read(t, c)
	if m.Method != "notifications/tools/list_changed" {
		t.Errorf("got %s, want notifications/tools/list_changed", m.Raw)
	}
}

// TestHTTPErrors checks that a POST refused with an HTTP error is answered
// with a JSON-RPC error under the request's id, carrying the status and
// Retry-After.
func TestHTTPErrors(t *testing.T) {
	_, rec, ts := newServer(t, nil)
	c := dial(t, ts.URL)
	handshake(t, c)
	rec.mu.Lock()
	rec.fail = func(w http.ResponseWriter, body string) bool {
		switch {
		case strings.Contains(body, `"unavailable"`):
			w.Header().Set("Retry-After", "2")
			http.Error(w, "busy", http.StatusServiceUnavailable)
		case strings.Contains(body, `"gone"`):
			http.Error(w, "no such session", http.StatusNotFound)
		case strings.Contains(body, `"accepted"`):
			w.WriteHeader(http.StatusAccepted)
		default:
			return false
		}
		return true
	}
	rec.mu.Unlock()

	for _, tc := range []struct {
		name, id, tool string
		want           jsonrpc.NoAnswer
	}{
		{"503", `"a"`, "unavailable", jsonrpc.NoAnswer{Status: 503, RetryAfter: "2", Reason: "upstream answered HTTP 503"}},
		// Accepted, and never answered: it may run, so the outcome is
		// unknown, never failed.
		{"202", `"b"`, "accepted", jsonrpc.NoAnswer{Status: 202, Reason: "upstream accepted the request without answering it (HTTP 202)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			write(t, c, `{"jsonrpc":"2.0","id":`+tc.id+`,"method":"tools/call","params":{"name":"`+tc.tool+`"}}`)
			na := readNoAnswer(t, c)
			want := tc.want
			want.ID = json.RawMessage(tc.id)
			if string(na.ID) != string(want.ID) || na.NotSent || na.Status != want.Status || na.RetryAfter != want.RetryAfter || na.Reason != want.Reason {
				t.Errorf("got %+v, want %+v", *na, want)
			}
		})
	}

	// A notification refused gets no answer: there is no one to answer.
	rec.mu.Lock()
	rec.fail = func(w http.ResponseWriter, body string) bool {
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return true
	}
	rec.mu.Unlock()
	write(t, c, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`)
	write(t, c, `{"jsonrpc":"2.0","id":99,"method":"ping"}`)
	if na := readNoAnswer(t, c); string(na.ID) != "99" {
		t.Errorf("got %+v, want the ping's account, the notification's none", *na)
	}
}

// TestAnswersOnTheirOwnPOST: a POST's answer stream answers that POST's
// requests only: an answer on it under another request's id, which would
// be taken for that request's, is dropped, as is a message that is
// neither a request nor an answer; the POST whose answer did not come is
// answered as unanswered.
func TestAnswersOnTheirOwnPOST(t *testing.T) {
	_, rec, ts := newServer(t, nil)
	c := dial(t, ts.URL)
	handshake(t, c)
	rec.mu.Lock()
	rec.fail = func(w http.ResponseWriter, body string) bool {
		if !strings.Contains(body, `"steal"`) {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `[{"foo":1},{"jsonrpc":"2.0","id":"other","result":{"content":[{"type":"text","text":"stolen"}]}}]`)
		return true
	}
	rec.mu.Unlock()
	write(t, c, `{"jsonrpc":"2.0","id":"steal-1","method":"tools/call","params":{"name":"steal"}}`)
	if na := readNoAnswer(t, c); string(na.ID) != `"steal-1"` || na.NotSent || !strings.Contains(na.Reason, "ended without an answer") {
		t.Fatalf("got %+v; want the request answered as unanswered, nothing else", *na)
	}
	write(t, c, `{"jsonrpc":"2.0","id":7,"method":"ping"}`)
	if m := read(t, c); string(m.ID) != "7" {
		t.Fatalf("got %s; want the ping's answer next, the stolen answer and the junk dropped", m.Raw)
	}
}

// TestSessionExpired: a 404 to a request carrying the session id answers
// that request, and then ReadFrame reports that the session is gone, so
// that the proxy starts a new one.
func TestSessionExpired(t *testing.T) {
	_, rec, ts := newServer(t, nil)
	c := dial(t, ts.URL)
	handshake(t, c)
	rec.mu.Lock()
	rec.fail = func(w http.ResponseWriter, body string) bool {
		if !strings.Contains(body, `"gone"`) {
			return false // the handshake's last notification may still be on its way
		}
		http.Error(w, "no such session", http.StatusNotFound)
		return true
	}
	rec.mu.Unlock()
	write(t, c, `{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"gone"}}`)
	if na := readNoAnswer(t, c); string(na.ID) != "17" || na.Reason != "upstream session expired (HTTP 404)" || na.Status != 404 {
		t.Fatalf("got %+v; want the session-expired account under id 17", *na)
	}
	if _, err := c.ReadFrame(); !errors.Is(err, ErrSessionExpired) {
		t.Fatalf("ReadFrame after the 404 = %v; want ErrSessionExpired", err)
	}
}

func TestUnreachable(t *testing.T) {
	ts := httptest.NewServer(http.NotFoundHandler())
	// A user and a query, either of which may be a credential, are never
	// shown: not in the error the client gets, nor in the log.
	url := strings.Replace(ts.URL, "//", "//token:pass@", 1) + "/mcp?key=querysecret"
	ts.Close()
	var log strings.Builder
	c, err := Dial(context.Background(), url, Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	write(t, c, initialize)
	e := readNoAnswer(t, c)
	if string(e.ID) != "1" || !e.NotSent {
		t.Fatalf("got %+v, want id 1, not sent (the dial failed)", *e)
	}
	if !strings.HasPrefix(e.Reason, "upstream unreachable") || !strings.Contains(e.Reason, "http://***@127.0.0.1") || !strings.Contains(e.Reason, "/mcp?***") {
		t.Errorf("message = %q; want it to name the upstream without its user or query", e.Reason)
	}
	for _, secret := range []string{"token", "pass", "querysecret"} {
		if strings.Contains(e.Reason, secret) || strings.Contains(log.String(), secret) {
			t.Errorf("%q shown: message %q, log %q", secret, e.Reason, log.String())
		}
	}
}

// TestWriteDoesNotWait checks that WriteFrame returns while the server is
// still working on the call.
func TestWriteDoesNotWait(t *testing.T) {
	release := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, "{\n  \"jsonrpc\": \"2.0\",\n  \"id\": 5,\n  \"result\": {}\n}\n")
	}))
	defer ts.Close()
	c := dial(t, ts.URL)
	write(t, c, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"slow"}}`)
	close(release) // WriteFrame returned before the server answered
	f, err := c.ReadFrame()
	if err != nil || string(f) != `{"jsonrpc":"2.0","id":5,"result":{}}` {
		t.Errorf("ReadFrame = %s, %v; want the compacted answer", f, err)
	}
}

func TestDialRejectsBadURL(t *testing.T) {
	for _, u := range []string{"", "ftp://host/mcp", "http://", "://x", "http://user:secret@h:x/mcp", "ftp://user:secret@h/?secret"} {
		_, err := Dial(context.Background(), u, Options{})
		switch {
		case err == nil:
			t.Errorf("Dial(%q) succeeded", u)
		case strings.Contains(err.Error(), "secret"):
			t.Errorf("Dial(%q) = %v, which shows the credential", u, err)
		}
	}
}

func TestIdempotencyKey(t *testing.T) {
	for _, tc := range []struct {
		params, want string
	}{
		{`{"name":"x","_meta":{"mcp-idempotent/execution-id":"01J"}}`, `"01J"`},
		{`{"_meta":{"mcp-idempotent/execution-id":"a\"b\\c"}}`, `"a\"b\\c"`},
		{`{"_meta":{"mcp-idempotent/execution-id":"é"}}`, ""},
		{`{"_meta":{"mcp-idempotent/execution-id":"a\nb"}}`, ""},
		{`{"_meta":{"mcp-idempotent/execution-id":1}}`, ""},
		{`{"_meta":{"other":"x"}}`, ""},
		{`{"name":"x"}`, ""},
		{`{"_meta":{"mcp-idempotent/execution-id":"one","mcp-idempotent/execution-id":"two"}}`, `"two"`},
	} {
		got, ok := idempotencyKey(json.RawMessage(tc.params))
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("idempotencyKey(%s) = %q, %v; want %q", tc.params, got, ok, tc.want)
		}
	}
}

// statelessMeta is the _meta of a 2026-07-28 request: the go-sdk server
// wants the client's capabilities with the version (SEP-2575).
const statelessMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`

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

// logEvents is a slog.Handler that sends the message of each record to a
// channel, for tests that wait for something the Client does not return.
type logEvents chan string

// dialLogged dials url with a Client whose log records come on events;
// the Client is closed when the test ends.
func dialLogged(t *testing.T, url string) (*Client, logEvents) {
	t.Helper()
	events := make(logEvents, 64)
	c, err := Dial(context.Background(), url, Options{Logger: slog.New(events)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, events
}

func (h logEvents) Enabled(context.Context, slog.Level) bool { return true }
func (h logEvents) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h logEvents) WithGroup(string) slog.Handler            { return h }
func (h logEvents) Handle(_ context.Context, r slog.Record) error {
	select {
	case h <- r.Message:
	default: // a full channel must not stop the Client
	}
	return nil
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

// TestPrimingEvent: the event a 2025-11-25 server sends first on a
// stream, an id with empty data, is kept for resuming and otherwise
// passed over without a word: it is no message.
func TestPrimingEvent(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		m, err := jsonrpc.Decode(body)
		if err != nil || m.ID == nil {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "id: prime-1\ndata: \n\n")
		io.WriteString(w, "id: ev-2\nevent: message\ndata: "+string(jsonrpc.NewResponse(m.ID, json.RawMessage(`{}`)))+"\n\n")
	}))
	defer ts.Close()
	c, events := dialLogged(t, ts.URL)
	write(t, c, `{"jsonrpc":"2.0","id":1,"method":"ping","params":{`+statelessMeta+`}}`)
	if m := read(t, c); string(m.ID) != "1" {
		t.Fatalf("got %s; want the answer to ping", m.Raw)
	}
	for {
		select {
		case msg := <-events:
			if strings.Contains(msg, "dropping") {
				t.Errorf("logged %q for the priming event", msg)
			}
			continue
		default:
		}
		break
	}
}

// TestInitializedComesFirst: a request written after
// notifications/initialized reaches the server after it, though each goes
// in a POST of its own; an answer to the server's own request does not
// wait, since the server may be waiting for it.
func TestInitializedComesFirst(t *testing.T) {
	var mu sync.Mutex
	var order []string
	arrived := make(chan string, 4)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		m, err := jsonrpc.Decode(body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		name := m.Method
		if m.IsResponse() {
			name = "response"
		}
		if name == "notifications/initialized" {
			// Taken only once the answer to the server's request has
			// come, or after a while: a request sent meanwhile would
			// be recorded first.
			select {
			case <-arrived:
			case <-time.After(2 * time.Second):
			}
		}
		mu.Lock()
		order = append(order, name)
		mu.Unlock()
		if name != "notifications/initialized" {
			// Signalled only once recorded, so the notification's
			// handler cannot record itself in between.
			arrived <- name
		}
		if m.ID == nil || m.IsResponse() {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(jsonrpc.NewResponse(m.ID, json.RawMessage(`{}`)))
	}))
	defer ts.Close()
	c := dial(t, ts.URL)
	write(t, c, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	write(t, c, `{"jsonrpc":"2.0","id":"s1","result":{"roots":[]}}`)
	write(t, c, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	if m := read(t, c); string(m.ID) != "2" {
		t.Fatalf("got %s; want the answer to tools/list", m.Raw)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"response", "notifications/initialized", "tools/list"}; !slices.Equal(order, want) {
		t.Fatalf("the server got %q; want %q", order, want)
	}
}

// TestQuietStreamsArePaced: a server that answers every resumption with
// a priming event only and closes the stream (polling, SEP-1699) is asked
// again at the pace its retry field sets, or, without one, at a pace that
// slows, never in a tight loop.
func TestQuietStreamsArePaced(t *testing.T) {
	for _, tt := range []struct {
		name  string
		retry string          // the retry field's line, or ""
		least []time.Duration // the least gaps between resumptions
	}{
		{"with a retry field", "retry: 300\n", []time.Duration{300 * time.Millisecond, 300 * time.Millisecond}},
		{"with a retry field of 0", "retry: 0\n", []time.Duration{250 * time.Millisecond, 250 * time.Millisecond}},
		{"without", "", []time.Duration{250 * time.Millisecond, 500 * time.Millisecond}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			gets := make(chan time.Time, 64)
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.ReadAll(r.Body)
				if r.Method == http.MethodDelete {
					return
				}
				if r.Method == http.MethodGet {
					if r.Header.Get("Last-Event-ID") == "" {
						w.WriteHeader(http.StatusMethodNotAllowed)
						return
					}
					select {
					case gets <- time.Now():
					default:
					}
				}
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprintf(w, "id: p\n%sdata: \n\n", tt.retry)
			}))
			defer ts.Close()
			c := dial(t, ts.URL)
			defer c.Close()
			write(t, c, `{"jsonrpc":"2.0","id":1,"method":"ping"}`)
			last := <-gets
			for i, least := range tt.least {
				next := <-gets
				if gap := next.Sub(last); gap < least {
					t.Fatalf("resumption %d came %v after the one before; want at least %v", i+2, gap, least)
				}
				last = next
			}
		})
	}
}

// TestClientRespelledIDReachesItsCaller: a server that decodes a request's
// id and encodes it again (the go-sdk does) answers "<p>" as
// "\u003cp\u003e", and 2.0 as 2: the same id to JSON, which the session
// matches by jsonrpc.IDKey. The Client must hand that answer on, not drop
// it as an answer to no request and report the request unanswered.
func TestClientRespelledIDReachesItsCaller(t *testing.T) {
	_, _, ts := newServer(t, nil)
	c := dial(t, ts.URL)
	handshake(t, c)
	for _, id := range []string{`"<p>"`, `2.0`} {
		write(t, c, `{"jsonrpc":"2.0","id":`+id+`,"method":"ping"}`)
		f, err := c.ReadFrame()
		if na, ok := errors.AsType[*jsonrpc.NoAnswer](err); ok {
			t.Errorf("ping under id %s: the Client answered it itself, %q; the server's answer was dropped", id, na.Reason)
			continue
		}
		if err != nil {
			t.Fatalf("ReadFrame: %v", err)
		}
		m, _ := jsonrpc.Decode(f)
		if string(jsonrpc.IDKey(m.ID)) != string(jsonrpc.IDKey([]byte(id))) || m.Result == nil {
			t.Errorf("ping under id %s got %s; want its answer", id, f)
		}
	}
}
