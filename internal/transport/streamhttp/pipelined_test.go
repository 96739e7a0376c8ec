package streamhttp

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestPingBeforeTheInitializeResult: a ping written right after
// initialize, before its answer, as MCP allows (basic/lifecycle,
// "Initialization"), waits for the session id the answer carries: sent
// without one, a server may answer it with 400, as a request of no
// session (the TypeScript SDK's does, as here).
func TestPingBeforeTheInitializeResult(t *testing.T) {
	_, rec, ts := newServer(t, nil)
	next := rec.next
	rec.next = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if r.Header.Get(headerSessionID) == "" && !strings.Contains(string(body), `"initialize"`) {
			http.Error(w, "Bad Request: Mcp-Session-Id header is required", http.StatusBadRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
	c := dial(t, ts.URL)
	write(t, c, initialize)
	write(t, c, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	for range 2 {
		f, err := c.ReadFrame()
		if err != nil {
			t.Fatalf("got %s, %v; want the answers to initialize and the ping", f, err)
		}
	}
}
