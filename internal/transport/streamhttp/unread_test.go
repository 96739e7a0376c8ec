package streamhttp

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestServerAnswerEvictedIsLost: an answer the client dropped and did not
// resume is told lost once the session's buffer has evicted it, while the
// session goes on, not only at its end: a long session with a client that
// drops streams must not keep every such answer, and what waits on each,
// for as long as it lasts.
func TestServerAnswerEvictedIsLost(t *testing.T) {
	srv, p, hs := newTestServer(t, ServerOptions{EventBuffer: 4})
	ss := evictDropped(t, srv, p, hs)
	select {
	case id := <-p.lost:
		if id != `"dropped"` {
			t.Fatalf("lost %s; want \"dropped\"", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the evicted answer was not told lost while the session lasts")
	}
	ss.mu.Lock()
	unread := len(ss.unread)
	ss.mu.Unlock()
	if unread != 0 {
		t.Fatalf("%d answers still held as unread; want none", unread)
	}
}

// TestCloseWaitsForLostReports: Close returns only once the answers found
// lost have been reported, since a report may write a line of the
// journal that the proxy's shutdown would otherwise close first.
func TestCloseWaitsForLostReports(t *testing.T) {
	srv, p, hs := newTestServer(t, ServerOptions{EventBuffer: 4})
	reporting, release := make(chan struct{}), make(chan struct{})
	p.onLost = func() {
		close(reporting)
		<-release
	}
	evictDropped(t, srv, p, hs)
	<-reporting
	closed := make(chan struct{})
	go func() {
		srv.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while an answer's loss was still being reported")
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	<-closed
	if id := <-p.lost; id != `"dropped"` {
		t.Fatalf("lost %s; want \"dropped\"", id)
	}
}

// evictDropped opens a session of srv, whose buffer holds 4 events, and
// has a client drop a request's stream after its priming event and never
// resume it; once the request is answered, later requests push the
// answer's events out of the buffer. It returns the session.
func evictDropped(t *testing.T, srv *Server, p *fakeProxy, hs *httptest.Server) *ServerSession {
	t.Helper()
	sid := openSession(t, hs.URL)
	ss := func() *ServerSession {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return srv.sessions[sid]
	}()
	idle := func() bool {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		return ss.active == 0
	}

	// Dropped after its priming event, never resumed.
	ctx, cut := context.WithCancel(t.Context())
	primed := make(chan struct{})
	go func() {
		defer close(primed)
		req, _ := http.NewRequestWithContext(ctx, "POST", hs.URL, strings.NewReader(`{"jsonrpc":"2.0","id":"dropped","method":"slow"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set(headerProtocolVersion, version)
		req.Header.Set(headerSessionID, sid)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		newSSEReader(resp.Body, 1<<20).next()
	}()
	<-primed
	cut()
	waitFor(t, func() bool { return idle() })
	close(p.gate)
	for id := ""; id != `"dropped"`; {
		select {
		case id = <-p.routed:
		case <-time.After(10 * time.Second):
			t.Fatal("the dropped request was not answered")
		}
	}

	// Later requests push its events out of the buffer of 4.
	for i := range 4 {
		resp := do(t, t.Context(), "POST", hs.URL, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, i+10), session(sid))
		io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	return ss
}
