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

// resumeHeld has srv take a resume of session sid from event last, and
// returns once the resume is accepted and its response waits to start:
// w.release lets it go on, and served is closed once it has ended.
func resumeHeld(srv *Server, sid, last string) (w *headHeldWriter, served chan struct{}) {
	w = &headHeldWriter{heldWriter: newHeldWriter(), heading: make(chan struct{})}
	r := httptest.NewRequest("GET", "/mcp", nil)
	r.Host = "127.0.0.1"
	r.Header.Set("Accept", "text/event-stream")
	for k, v := range session(sid) {
		r.Header.Set(k, v)
	}
	r.Header.Set(headerLastEventID, last)
	served = make(chan struct{})
	go func() {
		defer close(served)
		srv.ServeHTTP(w, r)
	}()
	<-w.heading
	return w, served
}

// answerAndFill lets the answer to 7 come, then has two more requests
// answered and read, which fill a buffer of two events; then lets the
// resume w go on, and checks that it carried the answer to 7.
func answerAndFill(t *testing.T, p *fakeProxy, url, sid string, w *headHeldWriter, served chan struct{}) {
	t.Helper()
	close(p.gate)
	awaitRouted(p, "7")
	for _, id := range []string{"81", "82"} {
		resp := do(t, t.Context(), "POST", url, `{"jsonrpc":"2.0","id":`+id+`,"method":"x"}`, session(sid))
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
	w, served := resumeHeld(srv, sid, priming.ID)
	answerAndFill(t, p, hs.URL, sid, w, served)
}

// TestServerResumeKeepsItsAnswersAsTheOldWriterGoes: so too when the
// request that made the stream still writes it as the resume starts (its
// client's connection died unseen), and lets go of it before the resume
// writes.
func TestServerResumeKeepsItsAnswersAsTheOldWriterGoes(t *testing.T) {
	srv, p, hs := newTestServer(t, ServerOptions{EventBuffer: 2, KeepAlive: -1})
	sid := start(t, hs.URL, nil)
	ctx, cut := context.WithCancel(t.Context())
	r := httptest.NewRequest("POST", "/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"slow"}`)).WithContext(ctx)
	r.Host = "127.0.0.1"
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range session(sid) {
		r.Header.Set(k, v)
	}
	posted := make(chan struct{})
	go func() {
		defer close(posted)
		srv.ServeHTTP(httptest.NewRecorder(), r)
	}()
	srv.mu.Lock()
	ss := srv.sessions[sid]
	srv.mu.Unlock()
	var num int64
	waitFor(t, func() bool { // the POST writes its stream
		ss.mu.Lock()
		defer ss.mu.Unlock()
		for n, st := range ss.streams {
			if st != ss.get && st.writer != 0 && st.want > 0 {
				num = n
				return true
			}
		}
		return false
	})
	w, served := resumeHeld(srv, sid, eventID(num, 0))
	cut() // the POST's handler notices its client has gone
	<-posted
	answerAndFill(t, p, hs.URL, sid, w, served)
}
