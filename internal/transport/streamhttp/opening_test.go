package streamhttp

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestServerSessionIDOnlyWithResult: MCP gives a session id "on the HTTP
// response containing the InitializeResult". An initialize answered with
// an error ends its session, so its response carries no Mcp-Session-Id, in
// either answer mode. What the upstream sends before its answer still
// reaches the client, in order, on the SSE stream.
func TestServerSessionIDOnlyWithResult(t *testing.T) {
	const params = `{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}`
	for _, tc := range []struct {
		name   string
		json   bool
		params string   // the initialize's params; "" for none
		want   []string // what the body holds, in this order
		id     bool     // the response carries the session id
	}{
		{"sse result", false, params + `}`, []string{`"id":1,"result"`}, true},
		{"sse error", false, "", []string{`"id":1,"error"`}, false},
		{"sse logs then result", false, params + `,"logs":2}`, []string{`"data":0`, `"data":1`, `"id":1,"result"`}, true},
		{"sse logs then error", false, params + `,"logs":2,"fail":true}`, []string{`"data":0`, `"data":1`, `"id":1,"error"`}, false},
		{"json result", true, params + `}`, []string{`"id":1,"result"`}, true},
		{"json error", true, "", []string{`"id":1,"error"`}, false},
		{"json logs then error", true, params + `,"logs":2,"fail":true}`, []string{`"id":1,"error"`}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, hs := newTestServer(t, ServerOptions{JSONResponse: tc.json})
			body := `{"jsonrpc":"2.0","id":1,"method":"initialize"}`
			if tc.params != "" {
				body = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":` + tc.params + `}`
			}
			// A client of 2025-11-25 gets a priming event first.
			resp := do(t, t.Context(), "POST", hs.URL, body, map[string]string{headerProtocolVersion: version})
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("initialize: %s %s", resp.Status, b)
			}
			if sid := resp.Header.Get(headerSessionID); (sid != "") != tc.id {
				t.Errorf("the response's Mcp-Session-Id is %q; want one: %v", sid, tc.id)
			}
			rest := string(b)
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("the body %s lacks %s, or has it out of order (want %q)", b, w, tc.want)
				}
				rest = rest[i+len(w):]
			}
		})
	}
}

// TestServerSessionIDBeforeAServerRequest: a request the upstream sends
// before it answers initialize (a ping) needs the client's answer, and
// the client needs the session id to send one: the id goes out with it,
// so that neither waits on the other for ever.
func TestServerSessionIDBeforeAServerRequest(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{})
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","ask":true}}`
	resp := do(t, t.Context(), "POST", hs.URL, body, nil)
	defer resp.Body.Close()
	sid := resp.Header.Get(headerSessionID)
	if resp.StatusCode != 200 || sid == "" {
		t.Fatalf("initialize: %s, session %q; want 200 and a session", resp.Status, sid)
	}
	r := newSSEReader(resp.Body, 1<<20)
	ev, err := r.next()
	if err != nil || !strings.Contains(string(ev.Data), `"method":"ping"`) {
		t.Fatalf("first event %q, %v; want the server's ping", ev.Data, err)
	}
	reply := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":"s1","result":{}}`, session(sid))
	reply.Body.Close()
	if reply.StatusCode != 202 {
		t.Fatalf("the answer to the ping: %s; want 202", reply.Status)
	}
	close(p.gate) // the upstream has its answer: it answers initialize
	ev, err = r.next()
	if err != nil || !strings.Contains(string(ev.Data), `"id":1,"result"`) {
		t.Fatalf("next event %q, %v; want the InitializeResult", ev.Data, err)
	}
}

// TestServerJSONRequestBeforeInitialize: with JSONResponse, a request
// the upstream sends before it answers initialize can reach no client:
// the answer to initialize is one JSON body, and without the session id
// it gives no client can open the GET stream. The proxy answers a ping
// itself, and refuses anything else at once, so that an upstream waiting
// on it still answers initialize.
func TestServerJSONRequestBeforeInitialize(t *testing.T) {
	for _, tt := range []struct{ ask, reply string }{
		{`"ping"`, `{"jsonrpc":"2.0","id":"s1","result":{}}`},
		{`"roots/list"`, `{"jsonrpc":"2.0","id":"s1","error":{"code":-32601,"message":"mcp-idempotent: the client cannot take a request of the server's, such as \"roots/list\", before`},
	} {
		t.Run(tt.ask, func(t *testing.T) {
			_, p, hs := newTestServer(t, ServerOptions{JSONResponse: true})
			body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","ask":` + tt.ask + `}}`
			req, _ := http.NewRequestWithContext(t.Context(), "POST", hs.URL, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			type result struct {
				resp *http.Response
				err  error
			}
			got := make(chan result, 1)
			go func() {
				resp, err := http.DefaultClient.Do(req)
				got <- result{resp, err}
			}()
			waitFor(t, func() bool { return p.seen(tt.reply) > 0 })
			close(p.gate) // the upstream has its answer: it answers initialize
			r := <-got
			if r.err != nil {
				t.Fatal(r.err)
			}
			resp := r.resp
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || resp.Header.Get(headerSessionID) == "" || !strings.Contains(string(b), `"id":1,"result"`) {
				t.Fatalf("initialize: %s, session %q, %s; want the InitializeResult in a session", resp.Status, resp.Header.Get(headerSessionID), b)
			}
		})
	}
}

// TestServerInitializeLeftEndsTheSession: a client that goes before the
// answer to its initialize never learns the session id, so no client can
// name the session. It ends at once, its upstream stopped and its place
// among MaxSessions freed, rather than at the idle timeout: a client
// whose initialize timed out and that tries again finds room.
func TestServerInitializeLeftEndsTheSession(t *testing.T) {
	for _, jsonResponse := range []bool{false, true} {
		t.Run(fmt.Sprintf("json=%v", jsonResponse), func(t *testing.T) {
			srv, p, hs := newTestServer(t, ServerOptions{MaxSessions: 1, JSONResponse: jsonResponse})
			ctx, cancel := context.WithCancel(t.Context())
			sent := make(chan struct{})
			go func() {
				defer close(sent)
				body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","hold":true}}`
				req, _ := http.NewRequestWithContext(ctx, "POST", hs.URL, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}()
			ss := <-p.started
			waitFor(t, func() bool { return p.seen(`"hold"`) == 1 })
			cancel() // the client's timeout
			<-sent
			select {
			case ended := <-p.ended:
				if ended != ss || ended.EndReason() != EndInitLeft {
					t.Fatalf("session %s ended (%q); want %s, %q", ended.ID(), ended.EndReason(), ss.ID(), EndInitLeft)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the session whose client went before its id was not ended")
			}
			waitFor(t, func() bool {
				srv.mu.Lock()
				defer srv.mu.Unlock()
				return srv.running == 0
			})
			openSession(t, hs.URL) // the client's next try finds room
		})
	}
}
