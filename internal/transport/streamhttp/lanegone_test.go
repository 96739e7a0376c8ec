package streamhttp

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// TestLaneClientIDOutlivesItsClient: a stateless client that closes its
// request before the proxy has read it still has its request read under
// its own id: the journal and the trace name the call by ClientID and
// TraceHeaders, which the proxy asks as it reads the request, and the
// call runs (the caller is detached only by the cancellation that
// follows). Once the proxy has read that cancellation, the lane lets go
// of the id: a lane lives as long as serve.
func TestLaneClientIDOutlivesItsClient(t *testing.T) {
	sessions := make(chan *ServerSession, 1)
	srv := NewServer(ServerOptions{Actor: "alice", Open: func(ctx context.Context, s *ServerSession) error {
		sessions <- s
		select {
		case <-ctx.Done():
		case <-s.done:
		}
		return nil
	}})
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.CloseClientConnections()
		srv.Close()
		hs.Close()
	})
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx, cut := context.WithCancel(t.Context())
	defer cut()
	done := make(chan struct{})
	go func() {
		defer close(done)
		body := `{"jsonrpc":"2.0","id":"a\/b","method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`
		req, _ := http.NewRequestWithContext(ctx, "POST", hs.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set(headerProtocolVersion, "2026-07-28")
		req.Header.Set(headerMcpMethod, "tools/list")
		req.Header.Set("traceparent", parent)
		// A client of its own: no connection of another test's.
		client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := client.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			t.Logf("the POST was answered: %s %s", resp.Status, b)
			resp.Body.Close()
		} else {
			t.Logf("the POST ended: %v", err)
		}
	}()
	ss := <-sessions
	waitFor(t, func() bool { return len(ss.in) == 1 })
	cut()
	<-done
	// The handler cancels the request (ss.cancel) once its client has
	// gone: the request's answer is no longer owed.
	waitFor(t, func() bool {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		return len(ss.pending) == 0
	})

	frame, err := ss.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	m, err := jsonrpc.Decode(frame)
	if err != nil {
		t.Fatal(err)
	}
	key := string(jsonrpc.IDKey(m.ID))
	if got := string(ss.ClientID(key)); got != `"a\/b"` {
		t.Errorf("the proxy reads the request under %s, and its client's id is %q; want \"a\\/b\" as the client sent it", m.ID, got)
	}
	if tp, _ := ss.TraceHeaders(key); tp != parent {
		t.Errorf("the request's traceparent reads %q; want the POST's", tp)
	}
	frame, err = ss.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(frame), `"notifications/cancelled"`) || !strings.Contains(string(frame), `"requestId":`+string(m.ID)) {
		t.Fatalf("the proxy read %s after the request; want its cancellation", frame)
	}
	if got := ss.ClientID(key); got != nil {
		t.Errorf("the lane keeps the client's id %s once the proxy has read the cancellation", got)
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.origIDs) != 0 || len(ss.leaving) != 0 {
		t.Errorf("the lane keeps %d client ids and %d requests given up on", len(ss.origIDs), len(ss.leaving))
	}
}

// TestLaneRenamesTokensInJSONMode: with JSON responses, where no
// progress reaches a client, the lane still renames the progress tokens
// of the requests it passes on: two clients that pick the same token at
// once would else give the upstream one token for two requests under
// way, which MCP forbids. The lane keeps nothing of them once answered.
func TestLaneRenamesTokensInJSONMode(t *testing.T) {
	srv, p, hs := newTestServer(t, ServerOptions{JSONResponse: true})
	hdr := map[string]string{headerProtocolVersion: "2026-07-28", headerMcpMethod: "slow"}
	body := `{"jsonrpc":"2.0","id":1,"method":"slow","params":{"_meta":{"progressToken":"tok","io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`
	answers := make(chan string, 2)
	for range 2 {
		go func() {
			resp := do(t, t.Context(), "POST", hs.URL, body, hdr)
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			answers <- string(b)
		}()
	}
	waitFor(t, func() bool { return p.seen(`"slow"`) == 2 })
	if n := p.seen(`"progressToken":"tok"`); n != 0 {
		t.Errorf("the upstream got %d requests under the clients' own token: %v", n, p.frames)
	}
	if p.seen(`"progressToken":"p1"`) != 1 || p.seen(`"progressToken":"p2"`) != 1 {
		t.Errorf("the upstream got %v; want the tokens p1 and p2", p.frames)
	}
	close(p.gate)
	for range 2 {
		if got := <-answers; !strings.HasPrefix(got, `{"jsonrpc":"2.0","id":1,"result":`) {
			t.Errorf("a client got %s; want its answer under id 1", got)
		}
	}
	srv.mu.Lock()
	ss := srv.lanes["alice"]
	srv.mu.Unlock()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.origTokens) != 0 || len(ss.progress) != 0 {
		t.Errorf("the lane keeps %d tokens and %d progress routes once its requests are answered", len(ss.origTokens), len(ss.progress))
	}
}
