package streamhttp

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
)

// A heldWriter is an http.ResponseWriter whose body writes wait until
// release is closed: a client that reads slowly, for as long as a test
// decides. writing is closed at the first write.
type heldWriter struct {
	header           http.Header
	writing, release chan struct{}
	once             sync.Once

	mu   sync.Mutex
	code int
	body bytes.Buffer
}

func newHeldWriter() *heldWriter {
	return &heldWriter{header: make(http.Header), writing: make(chan struct{}), release: make(chan struct{})}
}

func (w *heldWriter) Header() http.Header { return w.header }

func (w *heldWriter) WriteHeader(code int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.code = code
}

func (w *heldWriter) Write(b []byte) (int, error) {
	w.once.Do(func() { close(w.writing) })
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.body.Write(b)
}

func (w *heldWriter) Flush() {}

// serveHeld has srv answer a POST of body with hdr on w, on a goroutine,
// and returns a channel closed once it has.
func serveHeld(srv *Server, w *heldWriter, body string, hdr map[string]string) chan struct{} {
	r := httptest.NewRequest("POST", "/mcp", strings.NewReader(body))
	r.Host = "127.0.0.1"
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.ServeHTTP(w, r)
	}()
	return done
}

// postAsync posts body with hdr on a goroutine (a test's helpers may not
// fail the test from there), and returns its status and body once read.
func postAsync(ctx context.Context, url, body string, hdr map[string]string) chan string {
	out := make(chan string, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out <- resp.Status + " " + string(b)
	}()
	return out
}

// awaitRouted waits until the fake proxy has handed the answers to ids
// to their session.
func awaitRouted(p *fakeProxy, ids ...string) {
	for n := 0; n < len(ids); {
		if slices.Contains(ids, <-p.routed) {
			n++
		}
	}
}

// TestServerSlowStreamKeepsItsAnswers: the answers of a batch whose
// stream is written slower than they come are not evicted by what other
// requests add to the session's buffer meanwhile, by count or by bytes:
// its client reads every one.
func TestServerSlowStreamKeepsItsAnswers(t *testing.T) {
	for name, opts := range map[string]ServerOptions{
		"events": {EventBuffer: 4},
		"bytes":  {EventBufferBytes: 200},
	} {
		t.Run(name, func(t *testing.T) {
			opts.KeepAlive = -1 // the first write must be an answer's
			srv, p, hs := newTestServer(t, opts)
			sid := startWith(t, hs.URL, batchInitBody, nil)
			// a1 is answered at once, and its writer blocks writing it;
			// a2 and a3 come while it is blocked.
			w := newHeldWriter()
			served := serveHeld(srv, w, `[{"jsonrpc":"2.0","id":"a1","method":"batched"},{"jsonrpc":"2.0","id":"a2","method":"slow"},{"jsonrpc":"2.0","id":"a3","method":"slow"}]`, batchSession(sid))
			<-w.writing
			close(p.gate)
			awaitRouted(p, `"a2"`, `"a3"`)
			// Two notifications and an answer, read at once.
			resp := do(t, t.Context(), "POST", hs.URL, `[{"jsonrpc":"2.0","id":"b1","method":"progress","params":{"_meta":{"progressToken":"t"}}}]`, batchSession(sid))
			msgs := readEvents(t, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || len(msgs) != 3 {
				t.Fatalf("the other batch: %s, %v; want its answer and two notifications", resp.Status, msgs)
			}
			close(w.release)
			<-served
			got := readEvents(t, &w.body)
			var ids []string
			for _, m := range got {
				for _, id := range []string{"a1", "a2", "a3"} {
					if strings.Contains(m.data, `"id":"`+id+`","result"`) {
						ids = append(ids, id)
					}
				}
			}
			if len(ids) != 3 {
				t.Fatalf("the slow stream carried the answers to %v, of %v; want a1, a2 and a3", ids, got)
			}
		})
	}
}

// TestServerRefusesWhatASessionCannotOwe: a POST whose requests would
// make the session owe more answers than it holds is refused, retryable,
// before anything in it is sent; once the answers owed are read, it is
// taken.
func TestServerRefusesWhatASessionCannotOwe(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{EventBuffer: 4})
	sid := startWith(t, hs.URL, batchInitBody, nil)
	first := postAsync(t.Context(), hs.URL, `[{"jsonrpc":"2.0","id":"s1","method":"slow"},{"jsonrpc":"2.0","id":"s2","method":"slow"},{"jsonrpc":"2.0","id":"s3","method":"slow"}]`, batchSession(sid))
	waitFor(t, func() bool { return p.seen(`"s3"`) > 0 })

	batch := `[{"jsonrpc":"2.0","id":"x1","method":"batched"},{"jsonrpc":"2.0","id":"x2","method":"batched"}]`
	resp := do(t, t.Context(), "POST", hs.URL, batch, batchSession(sid))
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(b), "owes 3 answers not yet read") || !strings.Contains(string(b), "were not sent") {
		t.Fatalf("a batch of 2 while 3 of 4 answers are owed: %s %s; want 503 with Retry-After, saying the requests were not sent", resp.Status, b)
	}
	if n := p.seen(`"x1"`); n != 0 {
		t.Fatalf("the proxy read %d frames of the refused batch", n)
	}
	// One more fits.
	resp = do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":"x3","method":"batched"}`, batchSession(sid))
	msgs := readEvents(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(msgs) != 1 {
		t.Fatalf("one request while 3 of 4 answers are owed: %s %v; want it answered", resp.Status, msgs)
	}

	close(p.gate)
	if got := <-first; !strings.HasPrefix(got, "200") || strings.Count(got, `"result"`) != 3 {
		t.Fatalf("the first batch: %s; want its 3 answers", got)
	}
	resp = do(t, t.Context(), "POST", hs.URL, batch, batchSession(sid))
	msgs = readEvents(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(msgs) != 2 {
		t.Fatalf("the batch once the answers were read: %s %v; want its 2 answers", resp.Status, msgs)
	}
}

// TestServerRefusesWhileUnreadAnswersPassTheBytes: while the answers a
// session holds for a slow stream pass EventBufferBytes, a request is
// refused before it is sent; once they are written, it is taken.
func TestServerRefusesWhileUnreadAnswersPassTheBytes(t *testing.T) {
	srv, p, hs := newTestServer(t, ServerOptions{EventBufferBytes: 100, KeepAlive: -1})
	sid := startWith(t, hs.URL, batchInitBody, nil)
	w := newHeldWriter()
	served := serveHeld(srv, w, `[{"jsonrpc":"2.0","id":"a1","method":"batched"},{"jsonrpc":"2.0","id":"a2","method":"slow"},{"jsonrpc":"2.0","id":"a3","method":"slow"}]`, batchSession(sid))
	<-w.writing
	close(p.gate)
	awaitRouted(p, `"a2"`, `"a3"`)
	ping := `{"jsonrpc":"2.0","id":"x","method":"batched"}`
	resp := do(t, t.Context(), "POST", hs.URL, ping, batchSession(sid))
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(b), "more than 100") {
		t.Fatalf("a request while the unread answers pass 100 bytes: %s %s; want 503", resp.Status, b)
	}
	if n := p.seen(`"x"`); n != 0 {
		t.Fatalf("the proxy read %d frames of the refused request", n)
	}
	close(w.release)
	<-served
	if got := readEvents(t, &w.body); len(got) != 3 {
		t.Fatalf("the slow stream carried %v; want 3 answers", got)
	}
	resp = do(t, t.Context(), "POST", hs.URL, ping, batchSession(sid))
	msgs := readEvents(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(msgs) != 1 {
		t.Fatalf("the request once the answers were written: %s %v; want it answered", resp.Status, msgs)
	}
}

// TestServerCountsAnswersBeingWritten: an answer a writer took, whose
// client does not read it, still counts among those the session holds
// unread, by count and by bytes: else a client that reads none of its
// streams could have the session hold any number of them, each as large
// as a message may be. Once it is written, a request is taken again.
func TestServerCountsAnswersBeingWritten(t *testing.T) {
	for name, opts := range map[string]ServerOptions{
		"events": {EventBuffer: 1},
		"bytes":  {EventBufferBytes: 10},
		"json":   {EventBufferBytes: 10, JSONResponse: true},
	} {
		t.Run(name, func(t *testing.T) {
			opts.KeepAlive = -1 // the first write must be the answer's
			srv, p, hs := newTestServer(t, opts)
			sid := openSessionWith(t, hs.URL, batchInitBody)
			// The client may read the initialize answer before its
			// writer has finished, and it counts until then.
			ss := <-p.started
			waitFor(t, func() bool {
				ss.mu.Lock()
				defer ss.mu.Unlock()
				return ss.writing == 0
			})
			w := newHeldWriter()
			served := serveHeld(srv, w, `{"jsonrpc":"2.0","id":"a1","method":"batched"}`, batchSession(sid))
			<-w.writing
			ping := `{"jsonrpc":"2.0","id":"x","method":"batched"}`
			resp := do(t, t.Context(), "POST", hs.URL, ping, batchSession(sid))
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 503 || !strings.Contains(string(b), "not yet read") {
				t.Fatalf("a request while an answer is being written to a client that does not read it: %s %s; want 503", resp.Status, b)
			}
			if n := p.seen(`"x"`); n != 0 {
				t.Fatalf("the proxy read %d frames of the refused request", n)
			}
			close(w.release)
			<-served
			if got := w.body.String(); !strings.Contains(got, `"id":"a1","result"`) {
				t.Fatalf("the slow response carried %q; want the answer", got)
			}
			resp = do(t, t.Context(), "POST", hs.URL, ping, batchSession(sid))
			b, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(string(b), `"id":"x","result"`) {
				t.Fatalf("the request once the answer was written: %s %s; want it answered", resp.Status, b)
			}
		})
	}
}
