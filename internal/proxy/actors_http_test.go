package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/transport/stdio"
	"github.com/mcp-idempotent/mcp-idempotent/internal/transport/streamhttp"
)

// actorsFront is the Streamable HTTP front serving two actors, alice
// (token tok-a) and bob (tok-b), each session with its own upstream, and
// one interceptor and store for all: as serve runs them.
type actorsFront struct {
	url   string
	runs  atomic.Int64 // tools/calls the upstreams ran
	calls chan string  // the arguments of each tools/call an upstream read
	hold  chan struct{}
	once  sync.Once
}

func (f *actorsFront) release() { f.once.Do(func() { close(f.hold) }) }

func newActorsFront(t *testing.T, scope policy.Scope, held bool) *actorsFront {
	t.Helper()
	f := &actorsFront{calls: make(chan string, 16), hold: make(chan struct{})}
	if !held {
		f.release()
	}
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom()})
	resolve := func(tool string, ann *mcp.Annotations) policy.Policy {
		p := policy.FromAnnotations(ann)
		p.Scope = scope
		return p
	}
	srv := streamhttp.NewServer(streamhttp.ServerOptions{
		Tokens: map[string]string{"tok-a": "alice", "tok-b": "bob"},
		Open: func(ctx context.Context, ss *streamhttp.ServerSession) error {
			ur, uw := io.Pipe()
			qr, qw := io.Pipe()
			go f.upstream(stdio.NewConn(qr, uw, 0))
			scope := "session:" + ss.ID()
			s := New(ss, stdio.NewConn(ur, qw, 0), Options{Interceptor: in, Resolve: resolve, Actor: ss.Actor(), Scope: scope,
				UpstreamID: "stdio:test", ShutdownGrace: time.Second})
			return s.Run(ctx)
		},
	})
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		f.release()
		hs.CloseClientConnections()
		srv.Close()
		hs.Close()
	})
	f.url = hs.URL
	return f
}

// upstream answers initialize and tools/list, and each tools/call, once
// hold is closed, with the number of the run.
func (f *actorsFront) upstream(conn *stdio.Conn) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		b, err := conn.ReadFrame()
		if err != nil {
			conn.Close()
			return
		}
		var m struct {
			ID     json.RawMessage
			Method string
			Params struct{ Arguments json.RawMessage }
		}
		json.Unmarshal(b, &m)
		switch m.Method {
		case "initialize":
			conn.WriteFrame([]byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"u","version":"1"}}}`))
		case "tools/list":
			conn.WriteFrame([]byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"tools":[]}}`))
		case "tools/call":
			f.calls <- string(m.Params.Arguments)
			wg.Go(func() {
				<-f.hold
				n := f.runs.Add(1)
				conn.WriteFrame(fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"run %d"}]}}`, m.ID, n))
			})
		}
	}
}

// called waits for an upstream to read a tools/call.
func (f *actorsFront) called(t *testing.T, what string) {
	t.Helper()
	select {
	case <-f.calls:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s reached no upstream within 5s", what)
	}
}

// do sends method with body under token, in session sid if set.
func (f *actorsFront) do(t *testing.T, method, token, sid, body string, header ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), method, f.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// open initialises a session under token and returns its id.
func (f *actorsFront) open(t *testing.T, token string) string {
	t.Helper()
	resp := f.do(t, "POST", token, "", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	defer resp.Body.Close()
	sid := resp.Header.Get("Mcp-Session-Id")
	if sid == "" {
		t.Fatalf("initialize under %s: %s, no session", token, resp.Status)
	}
	nextData(t, sseEvents(resp.Body), "initialize")
	f.do(t, "POST", token, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`).Body.Close()
	return sid
}

// call sends a tools/call of charge_card in session sid and returns its
// answer.
func (f *actorsFront) call(t *testing.T, token, sid string, id int, meta string) string {
	t.Helper()
	resp := f.do(t, "POST", token, sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"charge_card","arguments":{"n":1}%s}}`, id, meta))
	defer resp.Body.Close()
	return nextData(t, sseEvents(resp.Body), "the call's answer")
}

// TestActorsNeverShareAnExecution: the same call of two actors, one
// after the other, runs twice under every scope but global, whose calls
// match across actors; with the same client key too.
func TestActorsNeverShareAnExecution(t *testing.T) {
	for _, tc := range []struct {
		scope policy.Scope
		meta  string
		runs  int64
	}{
		{policy.ScopeSession, "", 2},
		{policy.ScopeActor, "", 2},
		{policy.ScopeKey, `,"_meta":{"mcp-idempotent/key":"k1"}`, 2},
		{policy.ScopeActor, `,"_meta":{"mcp-idempotent/key":"k1"}`, 2},
		{policy.ScopeGlobal, `,"_meta":{"mcp-idempotent/key":"k1"}`, 2},
		{policy.ScopeGlobal, "", 1},
	} {
		t.Run(string(tc.scope)+tc.meta, func(t *testing.T) {
			f := newActorsFront(t, tc.scope, false)
			a, b := f.open(t, "tok-a"), f.open(t, "tok-b")
			got := f.call(t, "tok-a", a, 1, tc.meta)
			if !strings.Contains(got, "run 1") {
				t.Fatalf("alice got %s", got)
			}
			got = f.call(t, "tok-b", b, 1, tc.meta)
			if f.runs.Load() != tc.runs {
				t.Fatalf("the upstreams ran %d calls; want %d (bob got %s)", f.runs.Load(), tc.runs, got)
			}
			// And alice, again, still gets hers.
			if got := f.call(t, "tok-a", a, 2, tc.meta); !strings.Contains(got, "run 1") {
				t.Fatalf("alice's retry got %s; want her run 1", got)
			}
		})
	}
}

// TestActorsInFlight: bob's call identical to alice's in flight does not
// attach to hers.
func TestActorsInFlight(t *testing.T) {
	f := newActorsFront(t, policy.ScopeActor, true)
	a, b := f.open(t, "tok-a"), f.open(t, "tok-b")
	ra := f.do(t, "POST", "tok-a", a, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"n":1}}}`)
	defer ra.Body.Close()
	f.called(t, "alice's call")
	rb := f.do(t, "POST", "tok-b", b, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"n":1}}}`)
	defer rb.Body.Close()
	f.called(t, "bob's call, which must not attach to alice's,")
}

// TestActorsSessionsApart: bob, with his own token, cannot post to,
// stream from, resume or end alice's session.
func TestActorsSessionsApart(t *testing.T) {
	f := newActorsFront(t, policy.ScopeSession, true)
	a := f.open(t, "tok-a")
	ra := f.do(t, "POST", "tok-a", a, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"n":1}}}`)
	defer ra.Body.Close()
	f.called(t, "alice's call")
	for _, tc := range []struct {
		method, body string
		header       []string
	}{
		{"POST", `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`, nil},
		{"POST", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"n":1}}}`, nil},
		{"POST", `{"jsonrpc":"2.0","id":"mcp-idempotent:ask:1","result":{"action":"accept","content":{}}}`, nil},
		{"GET", "", nil},
		{"GET", "", []string{"Last-Event-ID", "1-0"}},
		{"GET", "", []string{"Last-Event-ID", "2-0"}},
		{"DELETE", "", nil},
	} {
		resp := f.do(t, tc.method, "tok-b", a, tc.body, tc.header...)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("bob's %s %s %v in alice's session: %s; want 404", tc.method, tc.body, tc.header, resp.Status)
		}
	}
	for _, h := range []string{"", "Bearer TOK-A", "Bearer tok-a2", "Basic tok-a", "Bearer", "tok-a"} {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", f.url, nil)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Mcp-Session-Id", a)
		req.Header.Set("X-Forwarded-User", "alice")
		if h != "" {
			req.Header.Set("Authorization", h)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET with Authorization %q: %s; want 401", h, resp.Status)
		}
	}
	// alice's call was not cancelled: it is answered.
	f.release()
	if got := nextData(t, sseEvents(ra.Body), "alice's call"); !strings.Contains(got, "run 1") {
		t.Fatalf("alice got %s", got)
	}
}

// TestActorsGlobalCancel: under global scope, bob's call attaches to
// alice's under way; a cancel from either detaches that caller only.
func TestActorsGlobalCancel(t *testing.T) {
	for _, who := range []string{"alice", "bob"} {
		t.Run(who+" cancels", func(t *testing.T) {
			f := newActorsFront(t, policy.ScopeGlobal, true)
			a, b := f.open(t, "tok-a"), f.open(t, "tok-b")
			body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"n":1},"_meta":{"progressToken":"p"}}}`
			ra := f.do(t, "POST", "tok-a", a, body)
			defer ra.Body.Close()
			f.called(t, "alice's call")
			rb := f.do(t, "POST", "tok-b", b, body)
			defer rb.Body.Close()
			// Bob's call is told it attached, before either cancels.
			eb := sseEvents(rb.Body)
			if got := nextData(t, eb, "bob's call"); !strings.Contains(got, "attached to execution") {
				t.Fatalf("bob's call got %s; want progress saying it attached", got)
			}
			tok, sid, events := "tok-a", a, eb
			if who == "bob" {
				tok, sid, events = "tok-b", b, sseEvents(ra.Body)
			}
			resp := f.do(t, "POST", tok, sid, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`)
			resp.Body.Close()
			f.release()
			got := nextData(t, events, "the other's call")
			for strings.Contains(got, "notifications/progress") {
				got = nextData(t, events, "the other's call")
			}
			if !strings.Contains(got, "run 1") {
				t.Fatalf("the other caller got %s", got)
			}
			if n := f.runs.Load(); n != 1 {
				t.Fatalf("%d runs", n)
			}
		})
	}
}

// TestActorsStatelessApart: 2026-07-28 requests, which name no session,
// go to their actor's lane: bob's call identical to alice's runs again.
func TestActorsStatelessApart(t *testing.T) {
	f := newActorsFront(t, policy.ScopeActor, false)
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"n":1},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`
	for i, tok := range []string{"tok-a", "tok-b", "tok-a"} {
		resp := f.do(t, "POST", tok, "", body, "MCP-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name", "charge_card")
		got := nextData(t, sseEvents(resp.Body), "the call's answer")
		resp.Body.Close()
		want := []string{"run 1", "run 2", "run 1"}[i]
		if !strings.Contains(got, want) {
			t.Fatalf("call %d, under %s, got %s; want %s", i, tok, got, want)
		}
	}
}
