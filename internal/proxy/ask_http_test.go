package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/transport/stdio"
	"github.com/mcp-idempotent/mcp-idempotent/internal/transport/streamhttp"
)

// heldUpstream is an upstream that answers initialize and tools/list at
// once, and every tools/call once release is closed; it tells calls of
// each tools/call it reads.
func heldUpstream(conn *stdio.Conn, release chan struct{}, calls chan<- struct{}) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		f, err := conn.ReadFrame()
		if err != nil {
			conn.Close()
			return
		}
		var m struct {
			ID     json.RawMessage
			Method string
		}
		json.Unmarshal(f, &m)
		switch m.Method {
		case "initialize":
			conn.WriteFrame([]byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"u","version":"1"}}}`))
		case "tools/list":
			conn.WriteFrame([]byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"tools":[]}}`))
		case "tools/call":
			calls <- struct{}{}
			wg.Go(func() {
				<-release
				conn.WriteFrame([]byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"content":[{"type":"text","text":"charged"}]}}`))
			})
		}
	}
}

// sseEvents sends the data of each SSE event of body on the channel it
// returns, which is closed when the stream ends.
func sseEvents(body io.Reader) <-chan string {
	ch := make(chan string, 16)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(body)
		var data strings.Builder
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "data:"):
				data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
			case line == "" && data.Len() > 0:
				ch <- data.String()
				data.Reset()
			}
		}
	}()
	return ch
}

func nextData(t *testing.T, ch <-chan string, what string) string {
	t.Helper()
	select {
	case d, ok := <-ch:
		if !ok {
			t.Fatalf("%s: the stream ended", what)
		}
		return d
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: nothing within 5s", what)
	}
	return ""
}

// httpFront is a proxy session behind the Streamable HTTP front, with a
// heldUpstream, initialised by a client that declared form elicitation.
type httpFront struct {
	s       *Session
	calls   chan struct{} // one for each tools/call the upstream reads
	url     string
	sid     string
	release func() // lets the upstream answer its tools/calls
}

func newHTTPFront(t *testing.T) *httpFront {
	t.Helper()
	sessions := make(chan *Session, 1)
	release := make(chan struct{})
	calls := make(chan struct{}, 16)
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom()})
	srv := streamhttp.NewServer(streamhttp.ServerOptions{
		Actor: "alice",
		Open: func(ctx context.Context, ss *streamhttp.ServerSession) error {
			ur, uw := io.Pipe() // upstream -> proxy
			qr, qw := io.Pipe() // proxy -> upstream
			go heldUpstream(stdio.NewConn(qr, uw, 0), release, calls)
			s := New(ss, stdio.NewConn(ur, qw, 0), Options{Interceptor: in, Actor: "alice", Scope: "session:" + ss.ID(), UpstreamID: "stdio:test", ShutdownGrace: time.Second})
			sessions <- s
			return s.Run(ctx)
		},
	})
	hs := httptest.NewServer(srv)
	var once sync.Once
	f := &httpFront{calls: calls, url: hs.URL, release: func() { once.Do(func() { close(release) }) }}
	t.Cleanup(func() {
		f.release()
		hs.CloseClientConnections()
		srv.Close()
		hs.Close()
	})
	resp := f.post(t, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{"form":{}}},"clientInfo":{"name":"t","version":"1"}}}`)
	f.sid = resp.Header.Get("Mcp-Session-Id")
	nextData(t, sseEvents(resp.Body), "initialize")
	resp.Body.Close()
	f.s = <-sessions
	f.post(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`).Body.Close()
	return f
}

// post POSTs body in the session.
func (f *httpFront) post(t *testing.T, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "POST", f.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	if f.sid != "" {
		req.Header.Set("Mcp-Session-Id", f.sid)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// call returns the session's tools/call under key once the upstream has
// it (so its Request is set), which must be the next one it gets.
func (f *httpFront) call(t *testing.T, key string) *clientCall {
	t.Helper()
	select {
	case <-f.calls:
	case <-time.After(5 * time.Second):
		t.Fatalf("the upstream got no tools/call %s within 5s", key)
	}
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	c := f.s.calls[key]
	if c == nil {
		t.Fatalf("tools/call %s is not among the session's calls", key)
	}
	return c
}

// TestAskOverStreamableHTTP: on the HTTP front, the question and the
// progress of a tools/call go on that call's own SSE stream, not the
// newest one, and the client's POSTed answer reaches done.
func TestAskOverStreamableHTTP(t *testing.T) {
	f := newHTTPFront(t)
	call := f.post(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"charge_card","arguments":{"n":1},"_meta":{"progressToken":"tok"}}}`)
	defer call.Body.Close()
	c := f.call(t, "7")
	// A later call's stream is the newest, where the server's own
	// messages would go.
	other := f.post(t, `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"charge_card","arguments":{"n":2}}}`)
	defer other.Body.Close()
	f.call(t, "8")

	a := c.req.Reply.(intercept.Asker)
	if !a.CanAsk() {
		t.Fatal("CanAsk = false for a client that declared form elicitation")
	}
	o := newOutcomes()
	a.Progress("asking")
	a.Ask(t.Context(), json.RawMessage(`{"mode":"form","message":"Charge?","requestedSchema":{"type":"object","properties":{}}}`), o.done)
	events := sseEvents(call.Body)
	if got := nextData(t, events, "the call's stream"); !strings.Contains(got, `"method":"notifications/progress"`) || !strings.Contains(got, `"progressToken":"tok","progress":0,"message":"asking"`) {
		t.Fatalf("the call's stream got %s; want its progress", got)
	}
	if got := nextData(t, events, "the call's stream"); !strings.Contains(got, `"id":"mcp-idempotent:ask:1","method":"elicitation/create"`) {
		t.Fatalf("the call's stream got %s; want the question", got)
	}

	answer := f.post(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:ask:1","result":{"action":"accept","content":{}}}`)
	io.Copy(io.Discard, answer.Body)
	answer.Body.Close()
	if answer.StatusCode != http.StatusAccepted {
		t.Fatalf("the answer was met with %s; want 202", answer.Status)
	}
	if got := o.next(t); got.err != nil || string(got.result) != `{"action":"accept","content":{}}` {
		t.Fatalf("done got %s, %v; want the client's result", got.result, got.err)
	}
	f.release()
	if got := nextData(t, events, "the call's stream"); !strings.Contains(got, `"id":7`) || !strings.Contains(got, "charged") {
		t.Fatalf("the call's stream got %s; want its answer", got)
	}
	if got := nextData(t, sseEvents(other.Body), "the other call's stream"); !strings.Contains(got, `"id":8`) {
		t.Fatalf("the other call's stream got %s before its answer", got)
	}
}
