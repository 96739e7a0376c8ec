package streamhttp

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// TestLaneDropsCancelNotices: on a stateless lane the requests of many
// clients share one id space, the lane's ("h1", "h2"...). A
// notifications/cancelled a client posts there names no request of its
// own (a stateless client cancels by closing its request), and one
// naming a lane id would cancel another client's call: it is accepted
// and not passed on.
func TestLaneDropsCancelNotices(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{})
	slow := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":1,"method":"slow"}`,
		map[string]string{headerProtocolVersion: "2026-07-28", headerMcpMethod: "slow"})
	defer slow.Body.Close()
	waitFor(t, func() bool { return p.seen(`"id":"h1"`) == 1 })

	for _, requestID := range []string{`"h1"`, `1`} {
		resp := do(t, t.Context(), "POST", hs.URL,
			`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`+requestID+`,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`,
			map[string]string{headerProtocolVersion: "2026-07-28", headerMcpMethod: "notifications/cancelled"})
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("a cancel notice naming %s: %s; want 202", requestID, resp.Status)
		}
	}
	// A request after the notices: once it is answered, the proxy has
	// read everything posted before it.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	resp := do(t, ctx, "POST", hs.URL, `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`,
		map[string]string{headerProtocolVersion: "2026-07-28", headerMcpMethod: "tools/list"})
	msgs := readEvents(t, resp.Body)
	resp.Body.Close()
	if len(msgs) != 1 || !strings.Contains(msgs[0].data, `"id":2`) {
		t.Fatalf("the request after the notices was answered %v", msgs)
	}
	if n := p.seen(`notifications/cancelled`); n != 0 {
		t.Fatalf("the proxy got %d cancel notices posted on the lane: %v", n, p.frames)
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

// TestLaneIdleTimeout: a stateless lane that sits idle past the idle
// timeout ends, as a session does, and stops its upstream: an actor that
// has gone would keep one for as long as serve runs. The actor's next
// request opens a new lane.
func TestLaneIdleTimeout(t *testing.T) {
	clock, advance := fakeClock()
	srv, p, hs := newTestServer(t, ServerOptions{IdleTimeout: time.Minute, Now: clock})
	hdr := map[string]string{headerProtocolVersion: "2026-07-28", headerMcpMethod: "tools/list"}
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`
	list := func() {
		t.Helper()
		resp := do(t, t.Context(), "POST", hs.URL, body, hdr)
		defer resp.Body.Close()
		if msgs := readEvents(t, resp.Body); len(msgs) != 1 || !strings.HasPrefix(msgs[0].data, `{"jsonrpc":"2.0","id":1,"result":`) {
			t.Fatalf("a stateless request was answered %v", msgs)
		}
	}
	list()
	waitFor(t, func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		for _, ss := range srv.lanes {
			ss.mu.Lock()
			defer ss.mu.Unlock()
			return ss.active == 0
		}
		return false
	})
	advance(59 * time.Second)
	srv.Reap()
	if srv.Sessions() != 1 {
		t.Fatal("a lane idle for less than the timeout was reaped")
	}
	advance(2 * time.Second)
	srv.Reap()
	select {
	case ended := <-p.ended:
		if !strings.HasPrefix(ended.ID(), "stateless:") {
			t.Fatalf("session %s ended, want the lane", ended.ID())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the lane idle past the timeout did not end")
	}
	list()
	if srv.Sessions() != 1 {
		t.Fatalf("%d sessions after the actor's next request; want its new lane", srv.Sessions())
	}
}
