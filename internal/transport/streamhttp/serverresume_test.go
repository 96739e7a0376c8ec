package streamhttp

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

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

// TestServerResumePastTheEnd: a Last-Event-ID the server never sent (past
// the end of its stream, of a stream it never opened, or no event id) is
// refused, saying so, rather than resuming the stream after events that
// do not exist yet and skipping them when they come; the stream can still
// be resumed from an event it did send.
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

	for _, last := range []string{eventID(num, 1), eventID(num, 1000), eventID(num+5, 0), "abc"} {
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
		if e := jsonrpc.DecodeError(m.Error); e.Code != jsonrpc.CodeInvalidRequest || !strings.Contains(e.Message, "is not one this session sent") {
			t.Fatalf("resuming after %s: error %+v; want %d saying the session never sent it", last, e, jsonrpc.CodeInvalidRequest)
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
	srv, p, hs := newTestServer(t, ServerOptions{})
	sid := start(t, hs.URL, nil)
	ctx, cut := context.WithCancel(t.Context())
	resp := do(t, ctx, "POST", hs.URL, `{"jsonrpc":"2.0","id":7,"method":"linger"}`, session(sid))
	priming, err := newSSEReader(resp.Body, 1<<20).next()
	if err != nil || priming.ID == "" {
		t.Fatalf("the stream opened with %+v, %v; want a priming event", priming, err)
	}
	cut() // the connection breaks
	resp.Body.Close()
	// The proxy has the call: one it never read is answered at once as the
	// session ends, and the session goes with nothing left to resume.
	waitFor(t, func() bool { return p.seen(`"linger"`) == 1 })

	closed := make(chan struct{})
	go func() { srv.Close(); close(closed) }() // serve stops
	waitFor(t, func() bool {
		srv.mu.Lock()
		defer srv.mu.Unlock()
		ss := srv.sessions[sid]
		return ss != nil && ss.closed()
	})
	hdr := session(sid)
	hdr[headerLastEventID] = priming.ID
	resp = do(t, t.Context(), "GET", hs.URL, "", hdr)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("resuming while serve stops: %s; want 200", resp.Status)
	}
	close(p.gate) // the call is answered in the wind-down
	if msgs := readEvents(t, resp.Body); len(msgs) != 1 || !strings.Contains(msgs[0].data, `"id":7`) {
		t.Fatalf("the resumed stream held %v; want the answer to 7", msgs)
	}
	<-closed
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

// TestServerGetAgainSendsOnlyWhatIsNew: a client that opens the GET
// stream again without Last-Event-ID gets the messages held for it since
// its last GET ended, then new ones; not again those its last GET was
// sent, among which a request of the server's it would answer twice.
func TestServerGetAgainSendsOnlyWhatIsNew(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{})
	sid := start(t, hs.URL, nil)
	ss := <-p.started
	message := func(n int) []byte {
		return []byte(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":` + strconv.Itoa(n) + `}}`)
	}
	ctx, cut := context.WithCancel(t.Context())
	resp := do(t, ctx, "GET", hs.URL, "", session(sid))
	ss.WriteFrame(message(1))
	if ev, err := nextMessage(newSSEReader(resp.Body, 1<<20)); err != nil || !strings.Contains(string(ev.Data), `"data":1`) {
		t.Fatalf("the GET stream sent %q, %v; want message 1", ev.Data, err)
	}
	// The server counts message 1 as sent once its write returned with
	// the client still there; a client gone by then may not have had it.
	waitFor(t, func() bool {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		return ss.get.sent == ss.get.next
	})
	cut() // the client closes its GET stream
	resp.Body.Close()
	waitFor(t, func() bool {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		return ss.get.writer == 0
	})
	ss.WriteFrame(message(2)) // held for the next GET

	resp = do(t, t.Context(), "GET", hs.URL, "", session(sid))
	defer resp.Body.Close()
	r := newSSEReader(resp.Body, 1<<20)
	ss.WriteFrame(message(3))
	for _, want := range []string{`"data":2`, `"data":3`} {
		if ev, err := nextMessage(r); err != nil || !strings.Contains(string(ev.Data), want) {
			t.Fatalf("the GET stream opened again sent %q, %v; want the message with %s", ev.Data, err, want)
		}
	}
}

// nextMessage reads r's next event that carries a message, passing over
// priming events.
func nextMessage(r *sseReader) (event, error) {
	for {
		ev, err := r.next()
		if err != nil || len(ev.Data) > 0 {
			return ev, err
		}
	}
}

// TestServerGetStreamPrimed: the GET stream of a 2025-11-25 client opens
// with a priming event, as a POST's stream does, though no message comes
// on it. A client whose GET connection died without this server seeing it
// (a network gone, no FIN) gets 409 for another GET, as the stream seems
// open still; with the priming event's id it takes the stream over, and
// the server's messages go to it.
func TestServerGetStreamPrimed(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{})
	sid := start(t, hs.URL, nil)
	ss := <-p.started
	message := func(data string) []byte {
		return []byte(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"` + data + `"}}`)
	}
	stale := do(t, t.Context(), "GET", hs.URL, "", session(sid))
	defer stale.Body.Close()
	waitFor(t, func() bool {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		return ss.get != nil && ss.get.writer != 0
	})
	ss.WriteFrame(message("first"))
	priming, err := newSSEReader(stale.Body, 1<<20).next()
	if err != nil || len(priming.Data) != 0 || priming.ID == "" {
		t.Fatalf("the GET stream opened with %+v, %v; want a priming event with an id and no data", priming, err)
	}
	again := do(t, t.Context(), "GET", hs.URL, "", session(sid))
	again.Body.Close()
	if again.StatusCode != http.StatusConflict {
		t.Fatalf("a second GET without Last-Event-ID: %s; want 409", again.Status)
	}
	hdr := session(sid)
	hdr[headerLastEventID] = priming.ID
	resumed := do(t, t.Context(), "GET", hs.URL, "", hdr)
	defer resumed.Body.Close()
	if resumed.StatusCode != 200 {
		t.Fatalf("a GET resuming from the priming event: %s; want 200", resumed.Status)
	}
	ss.WriteFrame(message("second"))
	r := newSSEReader(resumed.Body, 1<<20)
	for _, want := range []string{`"first"`, `"second"`} {
		if ev, err := nextMessage(r); err != nil || !strings.Contains(string(ev.Data), want) {
			t.Fatalf("the GET stream taken over sent %q, %v; want the message %s", ev.Data, err, want)
		}
	}
}

// TestServerGetStreamOnce: two GETs without Last-Event-ID that come at
// once open the session's GET stream once between them. One gets it; the
// other is refused with 409, as a GET that comes while it is open is,
// rather than both getting 200 and the later taking the stream over.
func TestServerGetStreamOnce(t *testing.T) {
	srv, _, hs := newTestServer(t, ServerOptions{})
	sid := start(t, hs.URL, nil)
	ss := srv.sessions[sid]
	for round := range 20 {
		ready := make(chan struct{})
		got := make(chan *http.Response, 2)
		for range 2 {
			req, err := http.NewRequestWithContext(t.Context(), "GET", hs.URL, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Accept", "text/event-stream")
			for k, v := range session(sid) {
				req.Header.Set(k, v)
			}
			go func() {
				<-ready
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
				}
				got <- resp
			}()
		}
		close(ready)
		a, b := <-got, <-got
		if a == nil || b == nil {
			t.FailNow()
		}
		if a.StatusCode != 200 {
			a, b = b, a
		}
		b.Body.Close()
		if a.StatusCode != 200 || b.StatusCode != http.StatusConflict {
			a.Body.Close()
			t.Fatalf("round %d: two GETs at once got %s and %s; want 200 and 409", round, a.Status, b.Status)
		}
		a.Body.Close()
		waitFor(t, func() bool {
			ss.mu.Lock()
			defer ss.mu.Unlock()
			return ss.get.writer == 0
		})
	}
}
