package streamhttp

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestServerCancelInTheRequestsBatch: a batch that cancels one of its own
// requests after it is owed no answer for it, as a later POST's
// cancellation would be: its response ends rather than staying open for
// an answer the upstream need not send, and the session does not count
// it among the answers it owes. A cancellation before the request in the
// batch names no request yet sent, and cancels nothing.
func TestServerCancelInTheRequestsBatch(t *testing.T) {
	for _, jsonResponse := range []bool{false, true} {
		t.Run(fmt.Sprintf("json=%v", jsonResponse), func(t *testing.T) {
			srv, p, hs := newTestServer(t, ServerOptions{JSONResponse: jsonResponse})
			resp := do(t, t.Context(), "POST", hs.URL, batchInitBody, nil)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			sid := resp.Header.Get(headerSessionID)
			t.Cleanup(func() { close(p.gate) })

			type result struct {
				status int
				body   string
			}
			got := make(chan result, 1)
			go func() {
				resp := do(t, t.Context(), "POST", hs.URL, `[{"jsonrpc":"2.0","id":7,"method":"slow"},{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}]`, batchSession(sid))
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				got <- result{resp.StatusCode, string(b)}
			}()
			select {
			case r := <-got:
				if strings.Contains(r.body, `"id":7`) {
					t.Errorf("the cancelled request was answered: %s", r.body)
				}
				if jsonResponse && r.status != http.StatusAccepted {
					t.Errorf("the cancelled request's response: %d %q; want 202", r.status, r.body)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the response of a batch that cancels its request is still open 5s on")
			}
			srv.mu.Lock()
			ss := srv.sessions[sid]
			srv.mu.Unlock()
			ss.mu.Lock()
			owed := len(ss.pending)
			ss.mu.Unlock()
			if owed != 0 {
				t.Errorf("the session owes %d answers; want none", owed)
			}

			// Cancelled before it was sent: the request is answered.
			resp = do(t, t.Context(), "POST", hs.URL, `[{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":8}},{"jsonrpc":"2.0","id":8,"method":"a"}]`, batchSession(sid))
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.Contains(string(b), `"id":8`) {
				t.Errorf("a request after a cancellation naming its id answered %d %q; want its answer", resp.StatusCode, b)
			}
		})
	}
}

// TestServerCancelledStreamsGo: the stream of a request cancelled before
// anything was written on it holds no event a client could resume from;
// the session lets it go, so a client that cancels request after request
// does not grow it for as long as it lasts.
func TestServerCancelledStreamsGo(t *testing.T) {
	for _, jsonResponse := range []bool{false, true} {
		t.Run(fmt.Sprintf("json=%v", jsonResponse), func(t *testing.T) {
			srv, p, hs := newTestServer(t, ServerOptions{JSONResponse: jsonResponse})
			resp := do(t, t.Context(), "POST", hs.URL, batchInitBody, nil)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			sid := resp.Header.Get(headerSessionID)
			srv.mu.Lock()
			ss := srv.sessions[sid]
			srv.mu.Unlock()
			streams := func() int {
				ss.mu.Lock()
				defer ss.mu.Unlock()
				return len(ss.streams)
			}
			before := streams()
			for i := range 5 {
				done := make(chan struct{})
				go func() {
					defer close(done)
					resp := do(t, t.Context(), "POST", hs.URL, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"slow"}`, i), batchSession(sid))
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}()
				waitFor(t, func() bool { return p.seen(fmt.Sprintf(`"id":%d,"method":"slow"`, i)) == 1 })
				resp := do(t, t.Context(), "POST", hs.URL, fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d}}`, i), batchSession(sid))
				resp.Body.Close()
				<-done
			}
			if n := streams(); n != before {
				t.Errorf("the session holds %d streams after 5 cancelled requests, %d before", n, before)
			}
		})
	}
}
