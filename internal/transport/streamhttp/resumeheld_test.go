package streamhttp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A headHeldWriter is a heldWriter whose status line waits too: a
// resume accepted, whose response has not started.
type headHeldWriter struct {
	*heldWriter
	heading chan struct{} // closed as the status is written
}

func (w *headHeldWriter) WriteHeader(code int) {
	close(w.heading)
	<-w.release
	w.heldWriter.WriteHeader(code)
}

// TestServerResumeKeepsItsAnswersBeforeItWrites: a stream the client
// dropped and resumes keeps the answers that come between the resume's
// start and its first write, though other requests fill the session's
// buffer meanwhile: the resumed stream carries them.
func TestServerResumeKeepsItsAnswersBeforeItWrites(t *testing.T) {
	srv, p, hs := newTestServer(t, ServerOptions{EventBuffer: 2, KeepAlive: -1})
	sid := start(t, hs.URL, nil)
	ctx, cut := context.WithCancel(t.Context())
	resp := do(t, ctx, "POST", hs.URL, `{"jsonrpc":"2.0","id":7,"method":"slow"}`, session(sid))
	priming, err := newSSEReader(resp.Body, 1<<20).next()
	if err != nil {
		t.Fatal(err)
	}
	cut() // the connection breaks
	resp.Body.Close()
	num, _, _ := parseEventID(priming.ID)
	srv.mu.Lock()
	ss := srv.sessions[sid]
	srv.mu.Unlock()
	waitFor(t, func() bool { // the POST's handler has let go of it
		ss.mu.Lock()
		defer ss.mu.Unlock()
		st := ss.streams[num]
		return st != nil && !st.attended && st.writer == 0
	})

	w := &headHeldWriter{heldWriter: newHeldWriter(), heading: make(chan struct{})}
	r := httptest.NewRequest("GET", "/mcp", nil)
	r.Host = "127.0.0.1"
	r.Header.Set("Accept", "text/event-stream")
	for k, v := range session(sid) {
		r.Header.Set(k, v)
	}
	r.Header.Set(headerLastEventID, priming.ID)
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.ServeHTTP(w, r)
	}()
	<-w.heading // the resume is accepted, and has not taken the stream yet

	close(p.gate) // the answer comes
	awaitRouted(p, "7")
	for _, id := range []string{"81", "82"} { // and fills the buffer
		resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":`+id+`,"method":"x"}`, session(sid))
		msgs := readEvents(t, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || len(msgs) != 1 {
			t.Fatalf("request %s: %s, %v; want its answer", id, resp.Status, msgs)
		}
	}
	close(w.release)
	<-served
	msgs := readEvents(t, &w.body)
	if w.code != http.StatusOK || len(msgs) != 1 || !strings.Contains(msgs[0].data, `"id":7`) {
		t.Fatalf("the resumed stream: %d, %v; want the answer to 7", w.code, msgs)
	}
}
