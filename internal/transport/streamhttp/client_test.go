package streamhttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

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

// TestGETStreamRetryOfZeroIsPaced: a server whose GET stream asks for no
// pause (retry: 0) and ends at once is not asked again in a tight loop.
func TestGETStreamRetryOfZeroIsPaced(t *testing.T) {
	gets := make(chan time.Time, 64)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		switch r.Method {
		case http.MethodGet:
			select {
			case gets <- time.Now():
			default:
			}
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "retry: 0\n\n")
		case http.MethodPost:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"s","version":"1"}}}`)
		}
	}))
	defer ts.Close()
	c := dial(t, ts.URL)
	defer c.Close()
	write(t, c, initialize)
	last := <-gets
	for i := range 2 {
		next := <-gets
		if gap := next.Sub(last); gap < minQuietWait {
			t.Fatalf("GET %d came %v after the one before; want at least %v", i+2, gap, minQuietWait)
		}
		last = next
	}
}
