package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// TestReplayedHandshakeMeetsAGateway: the HTTP upstream forgets the
// session, and the handshake replayed for a new one meets a gateway's
// 503, as while a server restarts behind it. That is one more restart,
// counted against --max-restarts, not the end of the proxy: the next
// handshake opens a session, and the client's requests go on.
func TestReplayedHandshakeMeetsAGateway(t *testing.T) {
	var inits atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		m, err := jsonrpc.Decode(body)
		switch {
		case r.Method != http.MethodPost || err != nil:
			w.WriteHeader(http.StatusMethodNotAllowed)
		case m.Method == "initialize":
			n := inits.Add(1)
			if n == 2 {
				http.Error(w, "no healthy upstream", http.StatusServiceUnavailable)
				return
			}
			w.Header().Set("Mcp-Session-Id", fmt.Sprint("s", n))
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"s","version":"1"}}}`, m.ID)
		case r.Header.Get("Mcp-Session-Id") == "s1" && m.Method == "ping":
			http.Error(w, "unknown session", http.StatusNotFound) // restarted
		case m.ID == nil:
			w.WriteHeader(http.StatusAccepted)
		default:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{}}`, m.ID)
		}
	}))
	t.Cleanup(ts.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"--upstream", ts.URL}, stdinR, stdoutW, io.Discard)
		stdoutW.Close()
	}()
	out := bufio.NewScanner(stdoutR)
	exchange := func(id int, frame string) (result, error json.RawMessage) {
		t.Helper()
		if _, err := io.WriteString(stdinW, frame+"\n"); err != nil {
			t.Fatalf("writing to the proxy: %v", err)
		}
		for out.Scan() {
			var m struct {
				ID            int
				Result, Error json.RawMessage
			}
			if json.Unmarshal(out.Bytes(), &m) == nil && m.ID == id && (m.Result != nil || m.Error != nil) {
				return m.Result, m.Error
			}
		}
		t.Fatalf("the proxy ended before answering request %d: %v", id, <-done)
		return nil, nil
	}
	if _, e := exchange(1, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`); e != nil {
		t.Fatalf("initialize: %s", e)
	}
	io.WriteString(stdinW, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	// The first ping meets the 404; those sent while the session is
	// replaced may get errors; one then reaches the third session.
	for id := 2; ; id++ {
		if r, _ := exchange(id, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, id)); r != nil {
			break
		}
		if ctx.Err() != nil {
			// Not a count of pings: under load the session is replaced
			// after more of them are refused.
			t.Fatal("no ping answered after the session was lost")
		}
	}
	if n := inits.Load(); n != 3 {
		t.Errorf("the upstream got %d initialize requests; want 3 (the first, the one refused, the one that opened a session)", n)
	}
	stdinW.Close()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
}
