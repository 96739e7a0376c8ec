package streamhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

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

// TestServerFailedInitializeEndsTheSession: MCP gives a session id with
// an InitializeResult. A session whose initialize the upstream answers
// with an error gets the error, without the id, then ends: its upstream
// stops, it holds no room among MaxSessions, and its id is unknown (404).
// Requests racing on the id as it ends get 404 or an answer, never a hang.
func TestServerFailedInitializeEndsTheSession(t *testing.T) {
	for _, jsonResponse := range []bool{false, true} {
		t.Run(fmt.Sprintf("json=%v", jsonResponse), func(t *testing.T) {
			srv, p, hs := newTestServer(t, ServerOptions{MaxSessions: 1, JSONResponse: jsonResponse})
			sent := make(chan *http.Response, 1)
			go func() {
				sent <- do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":1,"method":"initialize"}`, nil)
			}()
			// The client is not told the id: the requests that race
			// on it learn it from the session itself.
			sid := (<-p.started).ID()
			var racing sync.WaitGroup
			for i := range 8 {
				racing.Go(func() {
					r := do(t, t.Context(), "POST", hs.URL, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, 10+i), session(sid))
					io.Copy(io.Discard, r.Body)
					r.Body.Close()
					if r.StatusCode != 200 && r.StatusCode != 404 {
						t.Errorf("a request racing on the session: %s; want 200 or 404", r.Status)
					}
				})
			}
			resp := <-sent
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(string(b), `"id":1,"error"`) {
				t.Fatalf("initialize answered %s %s; want the upstream's error", resp.Status, b)
			}
			if got := resp.Header.Get(headerSessionID); got != "" {
				t.Errorf("a failed initialize gave the client session id %q", got)
			}
			racing.Wait()
			again := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":2,"method":"ping"}`, session(sid))
			again.Body.Close()
			if again.StatusCode != 404 {
				t.Fatalf("a request naming the session: %s; want 404", again.Status)
			}
			if ended := <-p.ended; ended.ID() != sid || ended.EndReason() != EndInitFailed {
				t.Fatalf("session %s ended (%q); want %s, %q", ended.ID(), ended.EndReason(), sid, EndInitFailed)
			}
			waitFor(t, func() bool {
				srv.mu.Lock()
				defer srv.mu.Unlock()
				return srv.running == 0
			})
			openSession(t, hs.URL) // the room it held
		})
	}
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

// TestServerSessionEndsWithRequestsUnread: a request still waiting for the
// proxy to read it when the session ends (a burst, then a shutdown) was
// never sent upstream. Its error says so, so that the client knows that
// sending it again does not run it twice.
func TestServerSessionEndsWithRequestsUnread(t *testing.T) {
	release := make(chan struct{})
	srv := NewServer(ServerOptions{Actor: "alice", Open: func(ctx context.Context, s *ServerSession) error {
		f, err := s.ReadFrame()
		if err != nil {
			return nil
		}
		m, _ := jsonrpc.Decode(f)
		s.WriteFrame(jsonrpc.NewResponse(m.ID, json.RawMessage(`{"protocolVersion":"`+version+`"}`)))
		<-release // reads nothing more: what comes waits
		return nil
	}})
	hs := httptest.NewServer(srv)
	defer func() { hs.CloseClientConnections(); srv.Close(); hs.Close() }()
	sid := openSession(t, hs.URL)
	got := make(chan string, 1)
	go func() {
		resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"charge"}}`, session(sid))
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got <- string(b)
	}()
	waitFor(t, func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		return len(srv.sessions[sid].in) == 1
	})
	close(release)
	select {
	case body := <-got:
		if !strings.Contains(body, `"id":7,"error"`) || !strings.Contains(body, "not sent upstream, and did not run") {
			t.Fatalf("the unread request got %q; want an error saying it did not run", body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no answer 5s after the session ended")
	}
}

// dropOwed posts a request that stays unanswered until the gate opens,
// then drops its connection, as a client that went away does. It
// returns the stream's priming event id, for resuming it.
func dropOwed(t *testing.T, srv *Server, url, sid, body string) string {
	t.Helper()
	ctx, drop := context.WithCancel(t.Context())
	resp := do(t, ctx, "POST", url, body, session(sid))
	priming, err := newSSEReader(resp.Body, 1<<20).next()
	if err != nil || priming.ID == "" {
		t.Fatalf("the stream opened with %+v, %v; want a priming event", priming, err)
	}
	drop()
	resp.Body.Close()
	srv.mu.Lock()
	ss := srv.sessions[sid]
	srv.mu.Unlock()
	waitFor(t, func() bool {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		return ss.active == 0 && len(ss.pending) == 1
	})
	return priming.ID
}

// TestServerIdleEndsSessionsOwedAnswers: a session whose client has gone
// (no request under way, no stream open) for longer than the idle timeout
// ends though the upstream never answered a request of its: else any
// client could keep sessions, and their upstreams, for as long as serve
// runs. The request gets the answer a session's end gives.
func TestServerIdleEndsSessionsOwedAnswers(t *testing.T) {
	clock, advance := fakeClock()
	srv, p, hs := newTestServer(t, ServerOptions{IdleTimeout: time.Minute, Now: clock})
	sid := start(t, hs.URL, nil)
	dropOwed(t, srv, hs.URL, sid, `{"jsonrpc":"2.0","id":7,"method":"slow"}`)

	advance(59 * time.Second)
	srv.Reap()
	if srv.Sessions() != 1 {
		t.Fatal("a session whose client left less than the idle timeout ago was reaped")
	}
	advance(2 * time.Second)
	srv.Reap()
	if srv.Sessions() != 0 {
		t.Fatal("a session owed an answer outlived the idle timeout with its client gone")
	}
	select {
	case ended := <-p.ended:
		if ended.ID() != sid || ended.EndReason() != EndIdle {
			t.Fatalf("session %s ended (%q); want %s, %q", ended.ID(), ended.EndReason(), sid, EndIdle)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the reaped session's upstream did not stop")
	}
}

// TestServerIdleKeepsAResumedStream: a client that dropped a request's
// stream and resumes it (Last-Event-ID) within the idle timeout keeps
// its session while the stream is open, however long the answer takes,
// and gets the answer on it.
func TestServerIdleKeepsAResumedStream(t *testing.T) {
	clock, advance := fakeClock()
	srv, p, hs := newTestServer(t, ServerOptions{IdleTimeout: time.Minute, Now: clock})
	sid := start(t, hs.URL, nil)
	last := dropOwed(t, srv, hs.URL, sid, `{"jsonrpc":"2.0","id":7,"method":"slow"}`)

	advance(30 * time.Second)
	hdr := session(sid)
	hdr[headerLastEventID] = last
	resp := do(t, t.Context(), "GET", hs.URL, "", hdr)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("resuming: %s", resp.Status)
	}
	advance(2 * time.Minute)
	srv.Reap()
	if srv.Sessions() != 1 {
		t.Fatal("a session with a resumed stream open was reaped")
	}
	close(p.gate)
	if msgs := readEvents(t, resp.Body); len(msgs) != 1 || !strings.Contains(msgs[0].data, `"id":7,"result"`) {
		t.Fatalf("the resumed stream held %v; want the answer to 7", msgs)
	}
}
