package streamhttp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// A fakeProxy stands in for the proxy behind a Server: it answers every
// request with {"method":M,"id":ID} (the id it saw), after the request's
// gate opens for methods named "slow", and records what it read.
type fakeProxy struct {
	gate chan struct{} // closed to let "slow" requests answer

	mu     sync.Mutex
	frames []string // every frame read, in order
	opened int      // sessions opened
	ended  chan *ServerSession
	// routed receives the id of each answer once it is handed to the
	// session, written once it is written to the client, and lost once
	// it never can be (the first 1024; a test that reads them makes
	// fewer).
	routed, written, lost chan string
}

// note sends id on ch unless ch is full.
func note(ch chan string, id string) {
	select {
	case ch <- id:
	default:
	}
}

func newFakeProxy() *fakeProxy {
	return &fakeProxy{gate: make(chan struct{}), ended: make(chan *ServerSession, 16),
		routed: make(chan string, 1024), written: make(chan string, 1024), lost: make(chan string, 1024)}
}

func (p *fakeProxy) open(ctx context.Context, s *ServerSession) error {
	p.mu.Lock()
	p.opened++
	p.mu.Unlock()
	defer func() { p.ended <- s }()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		f, err := s.ReadFrame()
		if err != nil {
			return nil
		}
		p.mu.Lock()
		p.frames = append(p.frames, string(f))
		p.mu.Unlock()
		msgs, err := jsonrpc.DecodeBatch(f)
		if err != nil {
			m, err := jsonrpc.Decode(f)
			if err != nil {
				continue
			}
			msgs = []*jsonrpc.Message{m}
		}
		for _, m := range msgs {
			if !m.IsRequest() {
				continue
			}
			if m.Method == "end" {
				return nil // the upstream went away with the answer owed
			}
			p.answer(&wg, s, m)
		}
	}
}

// answer answers m on its own goroutine, as a proxy answers calls.
func (p *fakeProxy) answer(wg *sync.WaitGroup, s *ServerSession, m *jsonrpc.Message) {
	wg.Go(func() {
		switch m.Method {
		case "slow":
			select {
			case <-p.gate:
			case <-s.done:
				return
			}
		case "linger":
			// Still stopping after the session ended, until the test
			// opens the gate.
			<-s.done
			<-p.gate
		case "drain":
			// Answered a while after the session ends, as a proxy
			// answers the calls under way within its grace.
			<-s.done
			time.Sleep(100 * time.Millisecond)
		case "related":
			// A question of the proxy's about the request, then the
			// answer once the test opens the gate.
			s.WriteRelated([]byte(`{"jsonrpc":"2.0","id":"q1","method":"elicitation/create","params":{}}`), string(jsonrpc.IDKey(m.ID)))
			select {
			case <-p.gate:
			case <-s.done:
				return
			}
		case "progress":
			s.WriteFrame([]byte(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":` + progressToken(m.Params) + `,"progress":1}}`))
			s.WriteFrame([]byte(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"hi"}}`))
		}
		result, _ := json.Marshal(map[string]any{"method": m.Method, "id": m.ID})
		if m.Method == "asint" {
			// An upstream that decodes the id and writes it its own way.
			m.ID = json.RawMessage(strings.TrimSuffix(string(m.ID), ".0"))
		}
		id := string(m.ID)
		if m.Method == "slowrecord" {
			// Recording the delivery takes a while: the client must
			// have its answer meanwhile.
			s.WriteAnswer(jsonrpc.NewResponse(m.ID, result), func(error) {
				<-p.gate
				note(p.written, id)
			})
			note(p.routed, id)
			return
		}
		s.WriteAnswer(jsonrpc.NewResponse(m.ID, result), func(err error) {
			switch {
			case err == nil:
				note(p.written, id)
			case errors.Is(err, ErrNeverRead):
				note(p.lost, id)
			default:
				note(p.lost, id+": "+err.Error())
			}
		})
		note(p.routed, id)
	})
}

func (p *fakeProxy) seen(substr string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, f := range p.frames {
		if strings.Contains(f, substr) {
			n++
		}
	}
	return n
}

func newTestServer(t *testing.T, opts ServerOptions) (*Server, *fakeProxy, *httptest.Server) {
	t.Helper()
	p := newFakeProxy()
	opts.Open = p.open
	if opts.Actor == "" {
		opts.Actor = "alice"
	}
	srv := NewServer(opts)
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		select {
		case <-p.gate:
		default:
			close(p.gate)
		}
		hs.CloseClientConnections()
		srv.Close()
		hs.Close()
	})
	return srv, p, hs
}

const (
	initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	version  = "2025-11-25"
)

// do sends one request with the usual headers, overridden by hdr ("" deletes).
func do(t *testing.T, ctx context.Context, method, url, body string, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// start initialises a session and returns its id.
func start(t *testing.T, url string, hdr map[string]string) string {
	t.Helper()
	resp := do(t, t.Context(), "POST", url, initBody, hdr)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("initialize: %s %s", resp.Status, b)
	}
	sid := resp.Header.Get(headerSessionID)
	if sid == "" {
		t.Fatal("initialize: no Mcp-Session-Id")
	}
	if msgs := readEvents(t, resp.Body); len(msgs) != 1 || !strings.Contains(msgs[0].data, `"initialize"`) {
		t.Fatalf("initialize answered %v", msgs)
	}
	return sid
}

// openSession starts a session in either answer mode (SSE or JSON) and
// returns its id.
func openSession(t *testing.T, url string) string {
	t.Helper()
	resp := do(t, t.Context(), "POST", url, initBody, nil)
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	sid := resp.Header.Get(headerSessionID)
	if resp.StatusCode != 200 || sid == "" {
		t.Fatalf("initialize: %s, session %q", resp.Status, sid)
	}
	return sid
}

type testEvent struct{ id, data string }

// readEvents reads SSE events with data until the stream ends.
func readEvents(t *testing.T, body io.Reader) []testEvent {
	t.Helper()
	r := newSSEReader(body, 1<<20)
	var out []testEvent
	for {
		ev, err := r.next()
		if err != nil {
			return out
		}
		if len(ev.Data) > 0 {
			out = append(out, testEvent{ev.ID, string(ev.Data)})
		}
	}
}

func session(sid string) map[string]string {
	return map[string]string{headerSessionID: sid, headerProtocolVersion: version}
}

func TestServerBadInput(t *testing.T) {
	_, _, hs := newTestServer(t, ServerOptions{MaxMessage: 1024})
	sid := start(t, hs.URL, nil)
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
		{"too large", "POST", `{"jsonrpc":"2.0","id":1,"method":"x","params":{"p":"` + strings.Repeat("a", 2000) + `"}}`, session(sid), 413, -32600},
		{"not json", "POST", `{"jsonrpc":`, session(sid), 400, -32700},
		{"not an object", "POST", `42`, session(sid), 400, -32600},
		{"no method nor id", "POST", `{"jsonrpc":"2.0"}`, session(sid), 400, -32600},
		{"empty batch", "POST", `[]`, session(sid), 400, -32600},
		{"no jsonrpc member", "POST", `{"id":6,"method":"tools/list"}`, session(sid), 400, -32600},
		{"jsonrpc 1.0", "POST", `{"jsonrpc":"1.0","id":6,"method":"tools/list"}`, session(sid), 400, -32600},
		{"null id", "POST", `{"jsonrpc":"2.0","id":null,"method":"tools/list"}`, session(sid), 400, -32600},
		{"fractional id", "POST", `{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}`, session(sid), 400, -32600},
		{"batch reusing an id", "POST", `[{"jsonrpc":"2.0","id":5,"method":"a"},{"jsonrpc":"2.0","id":5,"method":"b"}]`, session(sid), 400, -32600},
		{"no session", "POST", `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, nil, 400, -32600},
		{"unknown session", "POST", `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, session("nope"), 404, -32600},
		{"bad version", "POST", `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, map[string]string{headerSessionID: sid, headerProtocolVersion: "1999-01-01"}, 400, -32600},
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

func TestServerOriginAndHost(t *testing.T) {
	_, _, hs := newTestServer(t, ServerOptions{AllowOrigins: []string{"https://app.example.com"}})
	tests := []struct {
		name   string
		hdr    map[string]string
		status int
	}{
		{"no origin", nil, 200},
		{"loopback origin", map[string]string{"Origin": "http://localhost:5173"}, 200},
		{"allowed origin", map[string]string{"Origin": "https://app.example.com"}, 200},
		{"foreign origin", map[string]string{"Origin": "https://evil.example"}, 403},
		{"null origin", map[string]string{"Origin": "null"}, 403},
		{"foreign host", map[string]string{"Host": "evil.example:80"}, 403},
		{"rebinding host", map[string]string{"Host": "attacker.localhost.evil.example"}, 403},
		{"allowed origin's host", map[string]string{"Host": "app.example.com"}, 200},
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

func TestServerSessionLifecycle(t *testing.T) {
	srv, p, hs := newTestServer(t, ServerOptions{})
	sid := start(t, hs.URL, nil)
	resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, session(sid))
	resp.Body.Close()
	if resp.StatusCode != 202 {
		t.Fatalf("a notification: %s, want 202", resp.Status)
	}
	resp = do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":"a","method":"tools/list"}`, session(sid))
	msgs := readEvents(t, resp.Body)
	resp.Body.Close()
	if len(msgs) != 1 || msgs[0].data != `{"jsonrpc":"2.0","id":"a","result":{"id":"a","method":"tools/list"}}` {
		t.Fatalf("tools/list answered %v", msgs)
	}
	resp = do(t, t.Context(), "DELETE", hs.URL, "", session(sid))
	resp.Body.Close()
	if resp.StatusCode != 204 {
		t.Fatalf("DELETE: %s, want 204", resp.Status)
	}
	ended := <-p.ended
	if ended.ID() != sid {
		t.Fatalf("session %s ended, want %s", ended.ID(), sid)
	}
	// What the journal's session lines say of it.
	if why, addr := ended.EndReason(), ended.RemoteAddr(); why != EndDeleted || !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Errorf("ended session: EndReason %q, RemoteAddr %q; want %q and the client's loopback address", why, addr, EndDeleted)
	}
	resp = do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`, session(sid))
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("a deleted session: %s, want 404", resp.Status)
	}
	if n := srv.Sessions(); n != 0 {
		t.Fatalf("%d sessions open after DELETE", n)
	}
}

// TestServerResume: the client loses the stream of a call under way and
// comes back with Last-Event-ID; it gets the answer, which the proxy
// produced once.
func TestServerResume(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{})
	sid := start(t, hs.URL, nil)
	ctx, cut := context.WithCancel(t.Context())
	resp := do(t, ctx, "POST", hs.URL, `{"jsonrpc":"2.0","id":7,"method":"slow"}`, session(sid))
	r := newSSEReader(resp.Body, 1<<20)
	priming, err := r.next()
	if err != nil || len(priming.Data) != 0 || priming.ID == "" {
		t.Fatalf("the stream opened with %+v, %v; want a priming event with an id and no data", priming, err)
	}
	cut() // the connection breaks
	resp.Body.Close()

	close(p.gate) // the answer comes while nobody listens
	hdr := session(sid)
	hdr[headerLastEventID] = priming.ID
	resp = do(t, t.Context(), "GET", hs.URL, "", hdr)
	defer resp.Body.Close()
	msgs := readEvents(t, resp.Body)
	if len(msgs) != 1 || !strings.Contains(msgs[0].data, `"id":7`) {
		t.Fatalf("the resumed stream held %v; want the answer to 7", msgs)
	}
	if n := p.seen(`"slow"`); n != 1 {
		t.Fatalf("the proxy read the request %d times; want 1", n)
	}
}

// TestServerResumePastTheEnd: a Last-Event-ID the server never sent, past
// the end of its stream, is refused as an unknown or evicted one is,
// rather than resuming the stream after events that do not exist yet and
// skipping them when they come; the stream can still be resumed from an
// event it did send.
func TestServerResumePastTheEnd(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{})
	sid := start(t, hs.URL, nil)
	ctx, cut := context.WithCancel(t.Context())
	resp := do(t, ctx, "POST", hs.URL, `{"jsonrpc":"2.0","id":7,"method":"slow"}`, session(sid))
	priming, err := newSSEReader(resp.Body, 1<<20).next()
	num, seq, ok := parseEventID(priming.ID)
	if err != nil || !ok || seq != 0 {
		t.Fatalf("the stream opened with %+v, %v; want a priming event with the stream's first id", priming, err)
	}
	cut() // the connection breaks
	resp.Body.Close()

	for _, last := range []string{eventID(num, 1), eventID(num, 1000)} {
		hdr := session(sid)
		hdr[headerLastEventID] = last
		resp := do(t, t.Context(), "GET", hs.URL, "", hdr)
		if resp.StatusCode != 400 {
			// An SSE stream: its body would not end.
			resp.Body.Close()
			t.Fatalf("resuming after %s, which was never sent: %s; want 400", last, resp.Status)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m, err := jsonrpc.Decode(b)
		if err != nil || m.Error == nil {
			t.Fatalf("resuming after %s: body %q is not a JSON-RPC error", last, b)
		}
		if e := jsonrpc.DecodeError(m.Error); e.Code != jsonrpc.CodeInvalidRequest || !strings.Contains(e.Message, "is not held") {
			t.Fatalf("resuming after %s: error %+v; want %d saying the event is not held", last, e, jsonrpc.CodeInvalidRequest)
		}
	}

	close(p.gate)
	hdr := session(sid)
	hdr[headerLastEventID] = priming.ID
	resp = do(t, t.Context(), "GET", hs.URL, "", hdr)
	defer resp.Body.Close()
	if msgs := readEvents(t, resp.Body); resp.StatusCode != 200 || len(msgs) != 1 || !strings.Contains(msgs[0].data, `"id":7`) {
		t.Fatalf("resuming after %s: %s with %v; want the answer to 7", priming.ID, resp.Status, msgs)
	}
}

// TestServerResumeWhileStopping: while serve stops (Close), a session
// winds down with its calls under way, and a client whose stream broke can
// still resume it and get its answer, rather than 404.
func TestServerResumeWhileStopping(t *testing.T) {
	srv, _, hs := newTestServer(t, ServerOptions{})
	sid := start(t, hs.URL, nil)
	ctx, cut := context.WithCancel(t.Context())
	resp := do(t, ctx, "POST", hs.URL, `{"jsonrpc":"2.0","id":7,"method":"drain"}`, session(sid))
	priming, err := newSSEReader(resp.Body, 1<<20).next()
	if err != nil || priming.ID == "" {
		t.Fatalf("the stream opened with %+v, %v; want a priming event", priming, err)
	}
	cut() // the connection breaks
	resp.Body.Close()

	closed := make(chan struct{})
	go func() { srv.Close(); close(closed) }() // serve stops; the call is answered in the wind-down
	waitFor(t, func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		ss := srv.sessions[sid]
		return ss == nil || ss.closed()
	})
	hdr := session(sid)
	hdr[headerLastEventID] = priming.ID
	resp = do(t, t.Context(), "GET", hs.URL, "", hdr)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("resuming while serve stops: %s; want 200", resp.Status)
	}
	if msgs := readEvents(t, resp.Body); len(msgs) != 1 || !strings.Contains(msgs[0].data, `"id":7`) {
		t.Fatalf("the resumed stream held %v; want the answer to 7", msgs)
	}
	<-closed
}

// TestServerAnswerWritten: an answer counts as written to the client when
// an HTTP response carried it (its own stream, a resumed one, or a JSON
// body), not when the session queued it: one the client dropped and did
// not resume never does, and counts as lost once the session is gone.
func TestServerAnswerWritten(t *testing.T) {
	next := func(ch chan string, what string) string {
		t.Helper()
		select {
		case id := <-ch:
			return id
		case <-time.After(5 * time.Second):
			t.Fatalf("no answer %s within 5s", what)
			return ""
		}
	}
	none := func(ch chan string, what string) {
		t.Helper()
		select {
		case id := <-ch:
			t.Fatalf("answer %s %s; want none", id, what)
		default:
		}
	}
	for _, jsonResponse := range []bool{false, true} {
		srv, p, hs := newTestServer(t, ServerOptions{JSONResponse: jsonResponse})
		// idle reports whether the server has seen every request of the
		// session end, a client's dropped one included.
		idle := func(sid string) bool {
			srv.mu.Lock()
			ss := srv.sessions[sid]
			srv.mu.Unlock()
			ss.mu.Lock()
			defer ss.mu.Unlock()
			return ss.active == 0
		}
		resp := do(t, t.Context(), "POST", hs.URL, initBody, nil)
		io.ReadAll(resp.Body)
		resp.Body.Close()
		sid := resp.Header.Get(headerSessionID)
		next(p.routed, "routed") // initialize's
		next(p.written, "written")

		// Read by the client: written.
		resp = do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":2,"method":"ping"}`, session(sid))
		io.ReadAll(resp.Body)
		resp.Body.Close()
		if id := next(p.written, "written"); id != "2" {
			t.Fatalf("written %s; want 2", id)
		}
		next(p.routed, "routed")

		// Dropped before the answer, never resumed: not written. (A JSON
		// response has no headers before its answer: the request waits
		// on a goroutine of its own.)
		ctx, cut := context.WithCancel(t.Context())
		primed := make(chan string, 1)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, "POST", hs.URL, strings.NewReader(`{"jsonrpc":"2.0","id":3,"method":"slow"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set(headerProtocolVersion, version)
			req.Header.Set(headerSessionID, sid)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				primed <- ""
				return
			}
			defer resp.Body.Close()
			ev, err := newSSEReader(resp.Body, 1<<20).next()
			if err != nil {
				primed <- ""
				return
			}
			primed <- ev.ID
		}()
		var priming string
		if jsonResponse {
			waitFor(t, func() bool { return p.seen(`"slow"`) > 0 })
		} else {
			priming = <-primed
		}
		cut()
		// The answer comes once the server has seen the request go, as it
		// would a long call later.
		waitFor(t, func() bool { return idle(sid) })
		close(p.gate)
		if id := next(p.routed, "routed"); id != "3" {
			t.Fatalf("routed %s; want 3", id)
		}
		none(p.written, "written after the client dropped its request")
		if jsonResponse {
			// No resumption: the answer is lost, as the session's end
			// tells.
			none(p.lost, "lost while the session lasts")
			resp = do(t, t.Context(), "DELETE", hs.URL, "", session(sid))
			resp.Body.Close()
			if id := next(p.lost, "lost at the session's end"); id != "3" {
				t.Fatalf("lost %s; want 3", id)
			}
			none(p.written, "written after the session ended")
			continue
		}
		// Resumed: written then.
		hdr := session(sid)
		hdr[headerLastEventID] = priming
		resp = do(t, t.Context(), "GET", hs.URL, "", hdr)
		readEvents(t, resp.Body)
		resp.Body.Close()
		if id := next(p.written, "written on the resumed stream"); id != "3" {
			t.Fatalf("written %s; want 3", id)
		}
		// Written: no longer waiting to be told lost.
		srv.mu.Lock()
		ss := srv.sessions[sid]
		srv.mu.Unlock()
		ss.mu.Lock()
		unread := len(ss.unread)
		ss.mu.Unlock()
		if unread != 0 {
			t.Fatalf("%d answers still unread after each was written; want none", unread)
		}
	}
}

// TestServerAnswerBeforeItsRecord: the client gets its answer (a JSON
// body here, which net/http would otherwise hold until the handler
// returns) before the delivery is recorded, however long that takes.
func TestServerAnswerBeforeItsRecord(t *testing.T) {
	_, _, hs := newTestServer(t, ServerOptions{JSONResponse: true})
	resp := do(t, t.Context(), "POST", hs.URL, initBody, nil)
	io.ReadAll(resp.Body)
	resp.Body.Close()
	sid := resp.Header.Get(headerSessionID)
	got := make(chan string, 1)
	go func() {
		resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":2,"method":"slowrecord"}`, session(sid))
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- string(b)
	}()
	select {
	case b := <-got:
		if !strings.Contains(b, `"id":2`) {
			t.Fatalf("got %s; want the answer to 2", b)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the answer waited for its delivery to be recorded")
	}
}

// TestServerResend: a client that lost the stream and sends the same
// request again gets the one answer; the request is not passed on twice.
func TestServerResend(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{})
	sid := start(t, hs.URL, nil)
	body := `{"jsonrpc":"2.0","id":8,"method":"slow"}`
	ctx, cut := context.WithCancel(t.Context())
	resp := do(t, ctx, "POST", hs.URL, body, session(sid))
	priming, err := newSSEReader(resp.Body, 1<<20).next() // the request is in
	if err != nil {
		t.Fatal(err)
	}
	cut()
	resp.Body.Close()

	resp = do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":8,"method":"other"}`, session(sid))
	refusal, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(refusal), `"id":null,"error"`) {
		t.Fatalf("another request under a pending id: %s %s, want 400 under a null id (not 8: it would answer the request that holds it)", resp.Status, refusal)
	}
	resp = do(t, t.Context(), "POST", hs.URL, body, session(sid))
	defer resp.Body.Close()
	close(p.gate)
	msgs := readEvents(t, resp.Body)
	if len(msgs) != 1 || !strings.Contains(msgs[0].data, `"id":8`) {
		t.Fatalf("the second POST got %v; want the answer to 8", msgs)
	}
	if n := p.seen(`"slow"`); n != 1 {
		t.Fatalf("the proxy read the request %d times; want 1", n)
	}
	// The first stream got the answer too, for a client that resumes it.
	hdr := session(sid)
	hdr[headerLastEventID] = priming.ID
	resp = do(t, t.Context(), "GET", hs.URL, "", hdr)
	defer resp.Body.Close()
	if msgs := readEvents(t, resp.Body); len(msgs) != 1 || !strings.Contains(msgs[0].data, `"id":8`) {
		t.Fatalf("the first stream, resumed, held %v; want the answer to 8", msgs)
	}
}

// TestServerStateless: 2026-07-28 requests carry no session; two clients
// may use the same id at once, and each gets its own answer, with its own
// id back. A client that closes its request cancels it.
func TestServerStateless(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{})
	hdr := map[string]string{headerProtocolVersion: "2026-07-28", headerMcpMethod: "tools/list"}
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			resp := do(t, t.Context(), "POST", hs.URL, body, hdr)
			defer resp.Body.Close()
			if resp.Header.Get(headerSessionID) != "" {
				t.Error("a stateless answer carries a session id")
			}
			msgs := readEvents(t, resp.Body)
			if len(msgs) != 1 || !strings.HasPrefix(msgs[0].data, `{"jsonrpc":"2.0","id":1,"result":`) {
				t.Errorf("answered %v; want the answer under id 1", msgs)
			}
		})
	}
	wg.Wait()
	if n := p.seen(`"id":"h1"`) + p.seen(`"id":"h2"`); n != 2 {
		t.Fatalf("the proxy saw %v; want two requests under distinct ids", p.frames)
	}
	// Without the header, server/discover alone marks a stateless request.
	resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":"d","method":"server/discover"}`, map[string]string{headerMcpMethod: "server/discover"})
	msgs := readEvents(t, resp.Body)
	resp.Body.Close()
	if len(msgs) != 1 || !strings.HasPrefix(msgs[0].data, `{"jsonrpc":"2.0","id":"d"`) {
		t.Fatalf("server/discover answered %v", msgs)
	}

	ctx, cut := context.WithCancel(t.Context())
	resp = do(t, ctx, "POST", hs.URL, `{"jsonrpc":"2.0","id":5,"method":"slow"}`, map[string]string{headerProtocolVersion: "2026-07-28", headerMcpMethod: "slow"})
	waitFor(t, func() bool { return p.seen(`"slow"`) == 1 })
	cut()
	resp.Body.Close()
	waitFor(t, func() bool { return p.seen(`notifications/cancelled`) == 1 })
	if p.seen(`"requestId":"h4"`) != 1 {
		t.Fatalf("the cancellation does not name the request's id: %v", p.frames)
	}
}

// TestServerRefusalsCarryTheID: a request refused for what it holds is
// refused under its id when that id is valid, and under null when the id
// is the fault.
func TestServerRefusalsCarryTheID(t *testing.T) {
	_, _, hs := newTestServer(t, ServerOptions{})
	sid := start(t, hs.URL, nil)
	for body, want := range map[string]string{
		`{"jsonrpc":"1.0","id":100,"method":"tools/list"}`:  `"id":100,"error"`,
		`{"jsonrpc":"2.0","id":true,"method":"tools/list"}`: `"id":null,"error"`,
	} {
		resp := do(t, t.Context(), "POST", hs.URL, body, session(sid))
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(got), want) {
			t.Errorf("%s: %s %s; want 400 with %s", body, resp.Status, got, want)
		}
	}
}

// TestServerStatelessBatchOfOne: a stateless request sent as an array
// of one is a batch, and refused as one; the actor's lane goes on.
func TestServerStatelessBatchOfOne(t *testing.T) {
	_, _, hs := newTestServer(t, ServerOptions{})
	hdr := map[string]string{headerProtocolVersion: "2026-07-28", headerMcpMethod: "tools/list"}
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`
	resp := do(t, t.Context(), "POST", hs.URL, "["+body+"]", hdr)
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(got), "not a batch") {
		t.Fatalf("an array of one: %s %s; want 400, not a batch", resp.Status, got)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	resp = do(t, ctx, "POST", hs.URL, body, hdr)
	defer resp.Body.Close()
	if msgs := readEvents(t, resp.Body); len(msgs) != 1 || !strings.HasPrefix(msgs[0].data, `{"jsonrpc":"2.0","id":1,"result":`) {
		t.Fatalf("the next stateless request was answered %v", msgs)
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

// waitFor polls cond: the fake proxy's reads happen on the server's
// goroutines, with no event to wait on from here.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestServerProgressAndServerMessages(t *testing.T) {
	_, _, hs := newTestServer(t, ServerOptions{})
	sid := start(t, hs.URL, nil)
	resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":9,"method":"progress","params":{"_meta":{"progressToken":"tok"}}}`, session(sid))
	defer resp.Body.Close()
	msgs := readEvents(t, resp.Body)
	// With no GET stream open, the log message goes on the open POST
	// stream; progress goes on its request's stream.
	if len(msgs) != 3 || !strings.Contains(msgs[0].data, `"progressToken":"tok"`) || !strings.Contains(msgs[1].data, "notifications/message") || !strings.Contains(msgs[2].data, `"id":9`) {
		t.Fatalf("the stream held %v; want progress, the log message, then the answer", msgs)
	}
}

func TestServerJSONResponse(t *testing.T) {
	_, _, hs := newTestServer(t, ServerOptions{JSONResponse: true})
	resp := do(t, t.Context(), "POST", hs.URL, initBody, nil)
	sid := resp.Header.Get(headerSessionID)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Header.Get("Content-Type") != "application/json" || !strings.Contains(string(b), `"method":"initialize"`) {
		t.Fatalf("initialize answered %s %q", resp.Header.Get("Content-Type"), b)
	}
	resp = do(t, t.Context(), "POST", hs.URL, `[{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","id":2,"method":"b"}]`, session(sid))
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	var batch []json.RawMessage
	if err := json.Unmarshal(b, &batch); err != nil || len(batch) != 2 {
		t.Fatalf("a batch answered %q; want an array of two answers", b)
	}
}

// TestServerJSONBatchIsAnArray: in JSON mode a batch is answered with an
// array (JSON-RPC 2.0, section 6), even when it holds one request, and a
// single request with the bare answer.
func TestServerJSONBatchIsAnArray(t *testing.T) {
	_, _, hs := newTestServer(t, ServerOptions{JSONResponse: true})
	sid := openSession(t, hs.URL)
	tests := []struct {
		name string
		body string
		want []string // the ids answered, in an array; nil for one bare answer
	}{
		{"one request", `{"jsonrpc":"2.0","id":1,"method":"a"}`, nil},
		{"batch of one", `[{"jsonrpc":"2.0","id":2,"method":"a"}]`, []string{"2"}},
		{"batch of one request and a notification", `[{"jsonrpc":"2.0","id":3,"method":"a"},{"jsonrpc":"2.0","method":"notifications/x"}]`, []string{"3"}},
		{"batch of two", `[{"jsonrpc":"2.0","id":4,"method":"a"},{"jsonrpc":"2.0","id":5,"method":"b"}]`, []string{"4", "5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := do(t, t.Context(), "POST", hs.URL, tt.body, session(sid))
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("%s %s", resp.Status, b)
			}
			if tt.want == nil {
				if m, err := jsonrpc.Decode(b); err != nil || m.Batch || string(m.ID) != "1" {
					t.Fatalf("answered %s; want the one answer to 1, not in an array", b)
				}
				return
			}
			checkBatchAnswer(t, b, tt.want)
		})
	}
}

// TestServerJSONBatchWithAnEvictedAnswer: a batch of two requests, one of
// whose answers was evicted from the session's buffer before the other
// came, gets an array of the answer it has.
func TestServerJSONBatchWithAnEvictedAnswer(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{JSONResponse: true, EventBuffer: 2})
	sid := openSession(t, hs.URL)
	req, _ := http.NewRequestWithContext(t.Context(), "POST", hs.URL, strings.NewReader(`[{"jsonrpc":"2.0","id":"s","method":"slow"},{"jsonrpc":"2.0","id":"b","method":"a"}]`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range session(sid) {
		req.Header.Set(k, v)
	}
	answered := make(chan []byte, 1)
	go func() {
		var b []byte
		if resp, err := http.DefaultClient.Do(req); err == nil {
			b, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		answered <- b
	}()
	for id := range p.routed {
		if id == `"b"` {
			break
		}
	}
	// Two messages the server starts (on the GET stream in JSON mode)
	// and an answer push the answer to b out of the buffer of two.
	resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":3,"method":"progress","params":{"_meta":{"progressToken":"t"}}}`, session(sid))
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	close(p.gate)
	checkBatchAnswer(t, <-answered, []string{`"s"`})
}

// checkBatchAnswer checks that body is a JSON array of answers to the
// requests ids, in any order (JSON-RPC 2.0 leaves it free).
func checkBatchAnswer(t *testing.T, body []byte, ids []string) {
	t.Helper()
	var batch []json.RawMessage
	if err := json.Unmarshal(body, &batch); err != nil || len(batch) != len(ids) {
		t.Fatalf("answered %s; want an array of the answers to %v", body, ids)
	}
	for _, raw := range batch {
		if m, err := jsonrpc.Decode(raw); err != nil || !m.IsResponse() || !slices.Contains(ids, string(m.ID)) {
			t.Fatalf("the array holds %s; want answers to %v", raw, ids)
		}
	}
}

func TestServerMaxSessions(t *testing.T) {
	_, _, hs := newTestServer(t, ServerOptions{MaxSessions: 1})
	start(t, hs.URL, nil)
	resp := do(t, t.Context(), "POST", hs.URL, initBody, nil)
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a session past the limit: %s (Retry-After %q); want 503 with Retry-After", resp.Status, resp.Header.Get("Retry-After"))
	}
}

// TestServerMaxSessionsCountsThoseStopping: a session ended (DELETE) whose
// upstream is still stopping counts toward MaxSessions, so the limit bounds
// the upstreams running, not only the sessions a client can name.
func TestServerMaxSessionsCountsThoseStopping(t *testing.T) {
	srv, p, hs := newTestServer(t, ServerOptions{MaxSessions: 1})
	sid := start(t, hs.URL, nil)
	resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":2,"method":"linger"}`, session(sid))
	defer resp.Body.Close()
	del := do(t, t.Context(), "DELETE", hs.URL, "", session(sid))
	del.Body.Close()
	if del.StatusCode != 204 {
		t.Fatalf("DELETE: %s", del.Status)
	}
	again := do(t, t.Context(), "POST", hs.URL, initBody, nil)
	again.Body.Close()
	if again.StatusCode != 503 {
		t.Fatalf("a session while the ended one's upstream still stops: %s; want 503", again.Status)
	}
	close(p.gate) // its upstream stops
	waitFor(t, func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return srv.running == 0
	})
	start(t, hs.URL, nil)
}

// TestServerMaxSessionsEndsTheIdlest: with MaxSessions open, a new
// session is refused with Retry-After, and the session idle longest, if a
// minute or more, is ended to make room for the retry: clients that never
// send DELETE do not hold every upstream until the idle timeout.
func TestServerMaxSessionsEndsTheIdlest(t *testing.T) {
	clock, advance := fakeClock()
	srv, p, hs := newTestServer(t, ServerOptions{MaxSessions: 1, Now: clock})
	sid := start(t, hs.URL, nil)
	waitFor(t, func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return srv.sessions[sid].active == 0
	})
	advance(30 * time.Second)
	refused := do(t, t.Context(), "POST", hs.URL, initBody, nil)
	refused.Body.Close()
	if refused.StatusCode != 503 || srv.Sessions() != 1 {
		t.Fatalf("past the limit with a session idle 30 s: %s, %d sessions; want 503 and the session kept", refused.Status, srv.Sessions())
	}
	advance(time.Minute)
	refused = do(t, t.Context(), "POST", hs.URL, initBody, nil)
	refused.Body.Close()
	if refused.StatusCode != 503 || refused.Header.Get("Retry-After") == "" {
		t.Fatalf("past the limit: %s; want 503 with Retry-After", refused.Status)
	}
	select {
	case ended := <-p.ended:
		if ended.ID() != sid {
			t.Fatalf("session %s ended; want the idle one, %s", ended.ID(), sid)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the session idle for 90 s was not ended to make room")
	}
	waitFor(t, func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return srv.running == 0
	})
	start(t, hs.URL, nil) // the retry
}

// fakeClock returns a clock for ServerOptions.Now, stopped at a fixed
// time, and a function that moves it on.
func fakeClock() (clock func() time.Time, advance func(time.Duration)) {
	now := time.Unix(1e9, 0)
	var mu sync.Mutex
	clock = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance = func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	return clock, advance
}

func TestServerIdleTimeout(t *testing.T) {
	clock, advance := fakeClock()
	srv, p, hs := newTestServer(t, ServerOptions{IdleTimeout: time.Minute, Now: clock})
	sid := start(t, hs.URL, nil)

	// A call under way keeps the session however long it takes.
	resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":2,"method":"slow"}`, session(sid))
	advance(2 * time.Minute)
	srv.Reap()
	if srv.Sessions() != 1 {
		t.Fatal("a session with a call under way was reaped")
	}
	close(p.gate)
	readEvents(t, resp.Body)
	resp.Body.Close()
	waitFor(t, func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return srv.sessions[sid].active == 0
	})

	advance(59 * time.Second)
	srv.Reap()
	if srv.Sessions() != 1 {
		t.Fatal("a session idle for less than the timeout was reaped")
	}
	advance(2 * time.Second)
	srv.Reap()
	if ended := <-p.ended; ended.ID() != sid {
		t.Fatalf("session %s ended, want %s", ended.ID(), sid)
	}
	resp = do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":3,"method":"x"}`, session(sid))
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("a reaped session: %s, want 404", resp.Status)
	}
}

// TestServerIdleCountsFromTheAnswer: a session's idle time counts from
// the arrival of an answer its client was owed, not from the client's
// last request: a client that dropped its stream during a long call has
// the whole idle timeout to resume it and get the answer.
func TestServerIdleCountsFromTheAnswer(t *testing.T) {
	clock, advance := fakeClock()
	srv, p, hs := newTestServer(t, ServerOptions{IdleTimeout: time.Minute, Now: clock})
	sid := start(t, hs.URL, nil)

	ctx, drop := context.WithCancel(t.Context())
	resp := do(t, ctx, "POST", hs.URL, `{"jsonrpc":"2.0","id":2,"method":"slow"}`, session(sid))
	drop() // the client's stream breaks while the call runs
	resp.Body.Close()
	srv.mu.Lock()
	ss := srv.sessions[sid]
	srv.mu.Unlock()
	waitFor(t, func() bool {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		return ss.active == 0
	})
	advance(2 * time.Minute)
	close(p.gate) // the answer comes, with no one there to read it
	waitFor(t, func() bool {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		return len(ss.pending) == 0
	})
	srv.Reap()
	if srv.Sessions() != 1 {
		t.Fatal("the session was reaped as its answer came; want the idle timeout counted from it")
	}
	advance(61 * time.Second)
	srv.Reap()
	if srv.Sessions() != 0 {
		t.Fatal("the session outlived the idle timeout after its answer")
	}
}

// TestServerSessionEndsWithAnswersOwed: when the proxy for a session
// stops, every request still owed an answer gets an error; no stream
// hangs.
func TestServerSessionEndsWithAnswersOwed(t *testing.T) {
	_, _, hs := newTestServer(t, ServerOptions{})
	sid := start(t, hs.URL, nil)
	resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":4,"method":"end"}`, session(sid))
	defer resp.Body.Close()
	msgs := readEvents(t, resp.Body)
	if len(msgs) != 1 || !strings.Contains(msgs[0].data, `"id":4,"error"`) || !strings.Contains(msgs[0].data, "session ended") {
		t.Fatalf("the stream held %v; want an error answer to 4", msgs)
	}
}

// TestServerSessionEndAnswersUnderTheClientsID: the error of a request
// owed an answer as the session ends goes under its id as the client
// spelled it: its IDKey is another id for a string with an escaped
// backslash, and no JSON for one with an escaped quote.
func TestServerSessionEndAnswersUnderTheClientsID(t *testing.T) {
	for _, id := range []string{`"a\\b"`, `"say \"hi\""`} {
		_, _, hs := newTestServer(t, ServerOptions{})
		sid := start(t, hs.URL, nil)
		resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":`+id+`,"method":"end"}`, session(sid))
		msgs := readEvents(t, resp.Body)
		resp.Body.Close()
		if len(msgs) != 1 || !strings.Contains(msgs[0].data, `"id":`+id+`,"error"`) {
			t.Errorf("id %s: the stream held %v; want an error under that id", id, msgs)
		}
	}
}

// TestServerEventBufferBound: a session holds its last EventBuffer events;
// a stream whose events were dropped cannot be resumed, and says so.
func TestServerEventBufferBound(t *testing.T) {
	_, _, hs := newTestServer(t, ServerOptions{EventBuffer: 2})
	sid := start(t, hs.URL, nil)
	primings := make([]string, 2)
	for i := range primings {
		resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":1`+strconv.Itoa(i)+`,"method":"x"}`, session(sid))
		ev, err := newSSEReader(resp.Body, 1<<20).next()
		if err != nil {
			t.Fatal(err)
		}
		primings[i] = ev.ID
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	for i, want := range []int{400, 200} {
		hdr := session(sid)
		hdr[headerLastEventID] = primings[i]
		resp := do(t, t.Context(), "GET", hs.URL, "", hdr)
		var msgs []testEvent
		if resp.StatusCode == 200 {
			msgs = readEvents(t, resp.Body)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("resuming stream %d: %s, want %d", i, resp.Status, want)
		}
		if want == 200 && (len(msgs) != 1 || !strings.Contains(msgs[0].data, `"id":11`)) {
			t.Fatalf("the resumed stream held %v; want the answer to 11", msgs)
		}
	}
}

func TestWithID(t *testing.T) {
	frame := []byte(`{"jsonrpc":"2.0","result":{"id":1},"id":1}`)
	m, err := jsonrpc.Decode(frame)
	if err != nil {
		t.Fatal(err)
	}
	got := string(jsonrpc.Replace(frame, m.ID, json.RawMessage(`"h1"`)))
	if want := `{"jsonrpc":"2.0","result":{"id":1},"id":"h1"}`; got != want {
		t.Fatalf("withID = %s, want %s", got, want)
	}
}

// TestServerCancelledRequestEndsItsResponse: a request the client cancels
// gets no answer, and its response ends (an SSE stream with no answer, a
// 202 without a body) rather than staying open until the client gives up.
func TestServerCancelledRequestEndsItsResponse(t *testing.T) {
	for _, jsonResponse := range []bool{false, true} {
		t.Run(fmt.Sprintf("json=%v", jsonResponse), func(t *testing.T) {
			_, p, hs := newTestServer(t, ServerOptions{JSONResponse: jsonResponse})
			sid := openSession(t, hs.URL)
			type result struct {
				status int
				body   string
			}
			got := make(chan result, 1)
			go func() {
				resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":7,"method":"slow"}`, session(sid))
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				got <- result{resp.StatusCode, string(b)}
			}()
			waitFor(t, func() bool { return p.seen(`"slow"`) == 1 })
			resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`, session(sid))
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("the cancellation: %s, want 202", resp.Status)
			}
			select {
			case r := <-got:
				if strings.Contains(r.body, `"id":7`) {
					t.Errorf("the cancelled request was answered: %s", r.body)
				}
				if jsonResponse && r.status != http.StatusAccepted {
					t.Errorf("the cancelled request's response: %d %q; want 202", r.status, r.body)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the cancelled request's response is still open 5s after the cancellation")
			}
		})
	}
}

// TestServerAmbiguousCancellationCancelsNothing: a cancellation whose
// requestId comes in another case ("RequestId") is one the proxy refuses
// as naming two requests; the session reads it the same way, and the
// request it might name keeps its response and gets its answer.
func TestServerAmbiguousCancellationCancelsNothing(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{})
	sid := openSession(t, hs.URL)
	got := make(chan string, 1)
	go func() {
		resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":7,"method":"slow"}`, session(sid))
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got <- string(b)
	}()
	waitFor(t, func() bool { return p.seen(`"slow"`) == 1 })
	resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"RequestId":7}}`, session(sid))
	resp.Body.Close()
	waitFor(t, func() bool { return p.seen(`RequestId`) == 1 })
	close(p.gate)
	if body := <-got; !strings.Contains(body, `"id":7`) {
		t.Fatalf("the request's response ended with %q; want its answer", body)
	}
}

// TestServerEndingSessionStillAnswers: when a session ends (the server
// shutting down, a DELETE), the requests under way keep their streams
// until their answers come from the session's drain, instead of being
// cut off with no answer.
func TestServerEndingSessionStillAnswers(t *testing.T) {
	for _, jsonResponse := range []bool{false, true} {
		t.Run(fmt.Sprintf("json=%v", jsonResponse), func(t *testing.T) {
			srv, p, hs := newTestServer(t, ServerOptions{JSONResponse: jsonResponse})
			sid := openSession(t, hs.URL)
			got := make(chan string, 1)
			go func() {
				resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":9,"method":"drain"}`, session(sid))
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				got <- string(b)
			}()
			waitFor(t, func() bool { return p.seen(`"drain"`) == 1 })
			srv.Close()
			select {
			case body := <-got:
				if !strings.Contains(body, `"id":9,"result"`) {
					t.Fatalf("the request under way got %q; want its answer", body)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no answer 5s after the session ended")
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
	status, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("no answer 5s after the body stopped coming: %v", err)
	}
	if !strings.Contains(status, "400 Bad Request") {
		t.Errorf("the server answered %q; want 400", status)
	}
}

// TestServerRequestAfterTheSessionEnded: a request that found its session
// open, but reaches it after the session stopped and answered everything
// it owed, is refused (404) at once; nothing would ever answer it.
func TestServerRequestAfterTheSessionEnded(t *testing.T) {
	for _, jsonResponse := range []bool{false, true} {
		srv := NewServer(ServerOptions{Actor: "alice", JSONResponse: jsonResponse,
			Open: func(context.Context, *ServerSession) error { return nil }})
		ss, herr := srv.startSession("alice", "")
		if herr != nil {
			t.Fatal(herr)
		}
		waitFor(t, func() bool { return srv.Sessions() == 0 }) // Open returned, endPending ran
		body := []byte(`{"jsonrpc":"2.0","id":3,"method":"ping"}`)
		m, _ := jsonrpc.Decode(body)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		r := httptest.NewRequest("POST", "/", bytes.NewReader(body)).WithContext(ctx)
		r.Header.Set(headerProtocolVersion, version)
		w := httptest.NewRecorder()
		srv.deliver(w, r, ss, body, []*jsonrpc.Message{m}) // as if it found the session just before
		if ctx.Err() != nil || w.Code != http.StatusNotFound {
			t.Errorf("json=%v: the request got %d (context %v); want 404 at once", jsonResponse, w.Code, ctx.Err())
		}
		cancel()
		srv.Close()
	}
}

// TestServerIDsByValue: ids are matched by value, as the proxy and the
// upstream match them: 5.0 is in use while 5 is, and an answer under 5 is
// the answer to a request sent as 5.0.
func TestServerIDsByValue(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{})
	sid := start(t, hs.URL, nil)
	// The slow request stays open past the checks; it is cut and waited
	// for at the end, so it never reports after the test returns.
	slowCtx, stopSlow := context.WithCancel(t.Context())
	slowDone := make(chan struct{})
	defer func() { stopSlow(); <-slowDone }()
	go func() {
		defer close(slowDone)
		req, _ := http.NewRequestWithContext(slowCtx, "POST", hs.URL, strings.NewReader(`{"jsonrpc":"2.0","id":5,"method":"slow"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range session(sid) {
			req.Header.Set(k, v)
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	waitFor(t, func() bool { return p.seen(`"slow"`) == 1 })
	resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":5.0,"method":"ping"}`, session(sid))
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("a request under 5.0 while 5 runs: %s, want 400", resp.Status)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	resp = do(t, ctx, "POST", hs.URL, `{"jsonrpc":"2.0","id":7.0,"method":"asint"}`, session(sid))
	defer resp.Body.Close()
	if msgs := readEvents(t, resp.Body); len(msgs) != 1 || !strings.Contains(msgs[0].data, `"id":7,"result"`) {
		t.Fatalf("a request sent as 7.0 and answered as 7 got %v; want the answer", msgs)
	}
}

// TestEvictedBeforeWrittenEndsTheStream: an answer the session's bound
// evicted before a writer took it (a burst of messages behind it) does not
// leave the stream waiting for it for ever: the stream ends without it,
// and a JSON answer says to send the request again, not 202.
func TestEvictedBeforeWrittenEndsTheStream(t *testing.T) {
	for _, json := range []bool{false, true} {
		srv := NewServer(ServerOptions{EventBuffer: 2, Actor: "alice", Open: func(context.Context, *ServerSession) error { return nil }})
		ss := newServerSession(srv, "s", "alice", "", false)
		ss.mu.Lock()
		call := ss.newStreamLocked()
		call.isJSON = json
		ss.appendLocked(call, []byte(`{"jsonrpc":"2.0","id":1,"result":{}}`))
		ss.endLocked(call)
		get := ss.getStreamLocked()
		for range 3 {
			ss.appendLocked(get, []byte(`{"jsonrpc":"2.0","method":"notifications/message","params":{}}`))
		}
		evicted := len(call.events) == 0
		ss.mu.Unlock()
		if !evicted {
			t.Fatal("the burst did not evict the answer; the test needs it to")
		}
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/mcp", nil)
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			if json {
				srv.answerJSON(rec, req, ss, call)
			} else {
				srv.pump(rec, req, ss, call, 0)
			}
		}()
		select {
		case <-ended:
		case <-time.After(5 * time.Second):
			t.Fatalf("json=%v: the stream still waits for an answer that was evicted", json)
		}
		if json && (rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "send the request again")) {
			t.Fatalf("json: %d %s; want 503 saying to send the request again", rec.Code, rec.Body)
		}
	}
}

// TestLaneForgetsItsStreams: a stateless lane lives as long as the proxy,
// so the streams of its requests must go once the requests do, those its
// clients gave up on included (cut at varying moments here).
func TestLaneForgetsItsStreams(t *testing.T) {
	srv, _, hs := newTestServer(t, ServerOptions{EventBuffer: 4, EventBufferBytes: 1 << 10, JSONResponse: true})
	hdr := map[string]string{headerProtocolVersion: "2026-07-28", headerMcpMethod: "tools/list"}
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`
	for i := range 400 {
		ctx, cut := context.WithCancel(t.Context())
		go func() { time.Sleep(time.Duration(i%40) * 10 * time.Microsecond); cut() }()
		req, _ := http.NewRequestWithContext(ctx, "POST", hs.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
		cut()
	}
	time.Sleep(200 * time.Millisecond)
	srv.mu.Lock()
	ss := srv.lanes["alice"]
	srv.mu.Unlock()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.streams) > 8 {
		t.Fatalf("the lane keeps %d streams after its requests ended; want those of requests under way only", len(ss.streams))
	}
}
