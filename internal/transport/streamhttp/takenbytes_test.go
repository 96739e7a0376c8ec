package streamhttp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// A stalledWriter is an http.ResponseWriter whose first body write waits
// for first, and every later one for later: a client that reads a
// little, then nothing. writes receives the length of each write as it
// starts.
type stalledWriter struct {
	header       http.Header
	first, later chan struct{}
	writes       chan int
	mu           sync.Mutex
	n            int
}

func (w *stalledWriter) Header() http.Header { return w.header }
func (w *stalledWriter) WriteHeader(int)     {}
func (w *stalledWriter) Flush()              {}

func (w *stalledWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	w.n++
	gate := w.later
	if w.n == 1 {
		gate = w.first
	}
	w.mu.Unlock()
	w.writes <- len(b)
	<-gate
	return len(b), nil
}

// TestServerUnreadStreamHoldsWithinTheBytes: what a session holds for a
// GET stream its client does not read, the events it holds and the
// bytes its writer took and waits to write, stays within
// EventBufferBytes however many notifications come: the writer's copy
// counts against the bound.
func TestServerUnreadStreamHoldsWithinTheBytes(t *testing.T) {
	const bound = 1000
	srv, p, hs := newTestServer(t, ServerOptions{EventBufferBytes: bound, KeepAlive: -1})
	sid := startWith(t, hs.URL, batchInitBody, nil)
	ss := <-p.started
	w := &stalledWriter{header: make(http.Header), first: make(chan struct{}), later: make(chan struct{}), writes: make(chan int, 1024)}
	ctx, cancel := context.WithCancel(t.Context())
	r := httptest.NewRequest("GET", "/mcp", nil).WithContext(ctx)
	r.Host = "127.0.0.1"
	r.Header.Set("Accept", "text/event-stream")
	for k, v := range batchSession(sid) {
		r.Header.Set(k, v)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.ServeHTTP(w, r)
	}()
	defer func() {
		cancel()
		close(w.later)
		<-served
	}()

	note := []byte(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"` + strings.Repeat("x", 30) + `"}}`)
	flood := func() {
		for range 3 * bound / len(note) {
			if err := ss.WriteFrame(note); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := ss.WriteFrame(note); err != nil {
		t.Fatal(err)
	}
	<-w.writes // the writer waits on its first write
	flood()
	close(w.first)
	pending := <-w.writes // and now on its second, for good
	flood()
	ss.mu.Lock()
	held := ss.heldBytes
	ss.mu.Unlock()
	if held+pending > bound {
		t.Fatalf("the session holds %d bytes of events and its writer %d waiting to be written: %d, more than the bound of %d", held, pending, held+pending, bound)
	}
}
