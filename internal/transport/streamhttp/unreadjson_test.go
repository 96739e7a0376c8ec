package streamhttp

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// An answer the client reads as a JSON body must not be told lost because
// the buffer evicted its event while the body was being written.
func TestJSONAnswerReadIsNotLost(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{JSONResponse: true, EventBuffer: 1})
	sid := openSession(t, hs.URL)
	req, _ := http.NewRequestWithContext(t.Context(), "POST", hs.URL, strings.NewReader(`{"jsonrpc":"2.0","id":"big","method":"big"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(headerProtocolVersion, version)
	req.Header.Set(headerSessionID, sid)
	resp, err := http.DefaultClient.Do(req) // headers in: the body is being written
	if err != nil {
		t.Fatal(err)
	}
	// A message the server starts evicts big's event while its body is
	// still written. (A request would be refused: big counts among the
	// answers not yet read until it is.)
	ss := <-p.started
	if err := ss.WriteFrame([]byte(`{"jsonrpc":"2.0","method":"notifications/message","params":{}}`)); err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	t.Logf("client read %d bytes of big", n)
	for {
		select {
		case id := <-p.written:
			if id == `"big"` {
				return
			}
		case id := <-p.lost:
			t.Fatalf("the client read all %d bytes of %s, yet it was told lost", n, id)
		case <-time.After(10 * time.Second):
			t.Fatal("big was never reported")
		}
	}
}
