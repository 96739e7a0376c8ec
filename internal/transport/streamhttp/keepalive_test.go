package streamhttp

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// A bubbleRecorder is an http.ResponseWriter for a request served inside
// a synctest bubble, where there is no network: fake time then runs
// whenever every goroutine waits.
type bubbleRecorder struct {
	header http.Header // the handler's, until it writes them

	mu   sync.Mutex // guards code, sent and body
	code int
	sent http.Header
	body bytes.Buffer
}

func (w *bubbleRecorder) Header() http.Header { return w.header }

func (w *bubbleRecorder) WriteHeader(code int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.code == 0 {
		w.code, w.sent = code, w.header.Clone()
	}
}

func (w *bubbleRecorder) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.body.Write(b)
}

func (w *bubbleRecorder) Flush() {}

func (w *bubbleRecorder) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.body.String()
}

// A bubbleRequest is one request being served in a bubble.
type bubbleRequest struct {
	w    *bubbleRecorder
	drop context.CancelFunc // the client goes
	done chan struct{}      // closed when the handler returns
}

// serveInBubble serves one request to srv on its own goroutine.
func serveInBubble(srv *Server, method, body string, hdr map[string]string) *bubbleRequest {
	ctx, drop := context.WithCancel(context.Background())
	r := httptest.NewRequestWithContext(ctx, method, "http://127.0.0.1/mcp", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	br := &bubbleRequest{w: &bubbleRecorder{header: http.Header{}}, drop: drop, done: make(chan struct{})}
	go func() {
		defer close(br.done)
		srv.ServeHTTP(br.w, r)
	}()
	return br
}

// after lets fake time run for d, and returns once every goroutine of
// the bubble waits again.
func after(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// lastEventID returns the id a client that read stream would resume from.
func lastEventID(stream string) string {
	r := newSSEReader(strings.NewReader(stream), 1<<20)
	for {
		if _, err := r.next(); err != nil {
			return r.lastID
		}
	}
}

// TestServerKeepAlive: an SSE stream that writes nothing for KeepAlive
// writes a comment: a request's stream while its call runs, the standing
// GET stream, and a resumed stream. The comment carries no id, so the
// client resumes from the last event all the same; a parser skips it.
// Every stream's writer ends with its stream (synctest.Test waits for
// every goroutine of the bubble).
func TestServerKeepAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const every = 20 * time.Second
		p := newFakeProxy()
		srv := NewServer(ServerOptions{Open: p.open, Actor: "alice", KeepAlive: every})
		defer srv.Close()
		init := serveInBubble(srv, "POST", initBody, nil)
		<-init.done
		sid := init.w.sent.Get(headerSessionID)
		if sid == "" {
			t.Fatalf("initialize: %d %s", init.w.code, init.w)
		}

		call := serveInBubble(srv, "POST", `{"jsonrpc":"2.0","id":7,"method":"slow"}`, session(sid))
		synctest.Wait()
		primed := call.w.String()
		primingID := lastEventID(primed)
		if primingID == "" || readEvents(t, strings.NewReader(primed)) != nil {
			t.Fatalf("the call's stream opened with %q; want a priming event alone", primed)
		}
		after(every - time.Second)
		if got := call.w.String(); got != primed {
			t.Fatalf("before %v of silence the stream wrote %q", every, strings.TrimPrefix(got, primed))
		}
		after(time.Second)
		after(every)
		if got, want := call.w.String(), primed+": keep-alive\n\n: keep-alive\n\n"; got != want {
			t.Fatalf("after %v of silence the stream holds %q; want %q", 2*every, got, want)
		}
		// The comments are no event: the client still resumes from the
		// priming event.
		if got := call.w.String(); readEvents(t, strings.NewReader(got)) != nil || lastEventID(got) != primingID {
			t.Fatalf("a parser read events %v, last id %q, from the stream; want none, and %q", readEvents(t, strings.NewReader(got)), lastEventID(got), primingID)
		}

		// The standing GET stream: the clock restarts with each event.
		get := serveInBubble(srv, "GET", "", session(sid))
		after(every / 2)
		progress := serveInBubble(srv, "POST", `{"jsonrpc":"2.0","id":8,"method":"progress","params":{"_meta":{"progressToken":"tok"}}}`, session(sid))
		<-progress.done
		synctest.Wait()
		told := get.w.String()
		if !strings.Contains(told, "notifications/message") || strings.Contains(told, "keep-alive") {
			t.Fatalf("the GET stream holds %q; want the server's message and no comment yet", told)
		}
		after(every - time.Second)
		if got := get.w.String(); got != told {
			t.Fatalf("%v after its last event the GET stream wrote %q", every-time.Second, strings.TrimPrefix(got, told))
		}
		after(time.Second)
		if got := get.w.String(); got != told+": keep-alive\n\n" {
			t.Fatalf("%v after its last event the GET stream wrote %q; want one comment", every, strings.TrimPrefix(got, told))
		}

		// The client loses the call's stream and resumes it.
		call.drop()
		<-call.done
		hdr := session(sid)
		hdr[headerLastEventID] = primingID
		resumed := serveInBubble(srv, "GET", "", hdr)
		after(every)
		if got := resumed.w.String(); got != ": keep-alive\n\n" {
			t.Fatalf("the resumed stream wrote %q after %v of silence; want one comment", got, every)
		}
		close(p.gate)
		<-resumed.done
		if msgs := readEvents(t, strings.NewReader(resumed.w.String())); len(msgs) != 1 || !strings.Contains(msgs[0].data, `"id":7`) {
			t.Fatalf("the resumed stream held %v; want the answer to 7", msgs)
		}
		get.drop()
		<-get.done
	})
}

// TestServerKeepAliveOff: a negative KeepAlive sends no comment.
func TestServerKeepAliveOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newFakeProxy()
		srv := NewServer(ServerOptions{Open: p.open, Actor: "alice", KeepAlive: -1})
		defer srv.Close()
		init := serveInBubble(srv, "POST", initBody, nil)
		<-init.done
		sid := init.w.sent.Get(headerSessionID)
		call := serveInBubble(srv, "POST", `{"jsonrpc":"2.0","id":7,"method":"slow"}`, session(sid))
		after(time.Hour)
		if got := call.w.String(); strings.Contains(got, "keep-alive") {
			t.Fatalf("the stream wrote %q with keep-alives off", got)
		}
		close(p.gate)
		<-call.done
	})
}

// TestServerKeepAliveDefault: zero means DefaultKeepAlive.
func TestServerKeepAliveDefault(t *testing.T) {
	srv := NewServer(ServerOptions{})
	defer srv.Close()
	if got := srv.opts.KeepAlive; got != DefaultKeepAlive {
		t.Fatalf("KeepAlive 0 became %v; want %v", got, DefaultKeepAlive)
	}
}
