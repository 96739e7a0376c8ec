package streamhttp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// TestServerResentWhileQueuedKeepsItsAnswer: a request sent again (same
// id, same bytes) while the first POST of it still waits for the proxy
// to take it attaches to it, and is not passed on twice. The first
// client going before the proxy took the request must not take the
// request with it: the second still waits on its answer.
func TestServerResentWhileQueuedKeepsItsAnswer(t *testing.T) {
	release := make(chan struct{})
	var sess chan *ServerSession = make(chan *ServerSession, 1)
	open := func(ctx context.Context, s *ServerSession) error {
		sess <- s
		f, err := s.ReadFrame() // initialize
		if err != nil {
			return nil
		}
		m, _ := jsonrpc.Decode(f)
		s.WriteFrame(jsonrpc.NewResponse(m.ID, json.RawMessage(`{"protocolVersion":"2025-11-25"}`)))
		select { // a proxy that is slow to read the client's frames
		case <-release:
		case <-s.done:
			return nil
		}
		for {
			f, err := s.ReadFrame()
			if err != nil {
				return nil
			}
			if m, err := jsonrpc.Decode(f); err == nil && m.IsRequest() {
				s.WriteFrame(jsonrpc.NewResponse(m.ID, json.RawMessage(`{"n":1}`)))
			}
		}
	}
	srv := NewServer(ServerOptions{Open: open, Actor: "alice"})
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		hs.CloseClientConnections()
		srv.Close()
		hs.Close()
	})
	sid := openSession(t, hs.URL)
	ss := <-sess
	// Fill the queue of frames the proxy has not read.
	for i := range cap(ss.in) {
		resp := do(t, t.Context(), "POST", hs.URL, fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/n%d"}`, i), session(sid))
		resp.Body.Close()
	}
	owed := func(streams int) func() bool {
		return func() bool {
			ss.mu.Lock()
			defer ss.mu.Unlock()
			p := ss.pending[string(jsonrpc.IDKey([]byte("9")))]
			return p != nil && len(p.streams) == streams
		}
	}
	const call = `{"jsonrpc":"2.0","id":9,"method":"work"}`
	firstCtx, leave := context.WithCancel(t.Context())
	firstDone := make(chan struct{})
	go func() {
		defer close(firstDone)
		req, _ := http.NewRequestWithContext(firstCtx, "POST", hs.URL, strings.NewReader(call))
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
	waitFor(t, owed(1))
	second := make(chan string, 1)
	go func() {
		resp := do(t, t.Context(), "POST", hs.URL, call, session(sid))
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		second <- string(b)
	}()
	waitFor(t, owed(2))
	leave()
	<-firstDone
	close(release)
	select {
	case body := <-second:
		if !strings.Contains(body, `"n":1`) {
			t.Fatalf("the request sent again got %q; want its answer", body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the request sent again has no answer 5s after the proxy read on")
	}
}
