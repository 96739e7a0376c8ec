package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/transport/stdio"
	"github.com/mcp-idempotent/mcp-idempotent/internal/transport/streamhttp"
)

// sseUpstream is a Streamable HTTP server that answers a tools/call as
// call writes it, and hands on the body of each POST carrying an answer
// (the proxy's to a request of the server's). A GET that resumes a stream
// is held open with nothing on it; one that does not is served by get,
// or refused (405) if get is nil.
type sseUpstream struct {
	call     func(w http.ResponseWriter, r *http.Request, id string)
	get      func(w http.ResponseWriter)
	answers  chan string
	answered chan struct{} // closed at the first answer
	once     sync.Once
	resumed  atomic.Int32 // GETs with Last-Event-ID
}

func newSSEUpstream(call func(u *sseUpstream, w http.ResponseWriter, r *http.Request, id string)) *sseUpstream {
	u := &sseUpstream{answers: make(chan string, 4), answered: make(chan struct{})}
	u.call = func(w http.ResponseWriter, r *http.Request, id string) { call(u, w, r, id) }
	return u
}

func (u *sseUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		resumed := r.Header.Get("Last-Event-ID") != ""
		if !resumed && u.get == nil {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		if resumed {
			u.resumed.Add(1)
		} else {
			u.get(w)
		}
		<-r.Context().Done()
		return
	}
	body, _ := io.ReadAll(r.Body)
	var m struct {
		ID     json.RawMessage
		Method string
	}
	json.Unmarshal(body, &m)
	result := func(res string) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, m.ID, res)
	}
	switch {
	case m.Method == "" && m.ID != nil:
		u.answers <- string(body)
		u.once.Do(func() { close(u.answered) })
		w.WriteHeader(http.StatusAccepted)
	case m.ID == nil:
		w.WriteHeader(http.StatusAccepted)
	case m.Method == "tools/list":
		result(`{"tools":[]}`)
	case m.Method == "tools/call":
		u.call(w, r, string(m.ID))
	default:
		result(`{}`)
	}
}

// sseEvent writes an event with data to w, after an id field if id is
// not empty.
func sseEvent(w http.ResponseWriter, id, data string) {
	if id != "" {
		fmt.Fprintf(w, "id: %s\n", id)
	}
	fmt.Fprintf(w, "event: message\ndata: %s\n\n", data)
	w.(http.Flusher).Flush()
}

// newHTTPUpstreamRig is a session whose client is a test peer and whose
// upstream is u, reached over Streamable HTTP with limit as
// --max-message-size.
func newHTTPUpstreamRig(t *testing.T, limit int, u *sseUpstream) *peer {
	t.Helper()
	ts := httptest.NewServer(u)
	t.Cleanup(ts.Close)
	up, err := streamhttp.Dial(context.Background(), ts.URL, streamhttp.Options{MaxMessage: limit})
	if err != nil {
		t.Fatal(err)
	}
	cr, cw := io.Pipe() // client -> proxy
	pr, pw := io.Pipe() // proxy -> client
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom()})
	s := New(stdio.NewConn(cr, pw, limit), up, Options{Interceptor: in, Actor: "alice", Scope: "session:test", UpstreamID: "http:test", ShutdownGrace: time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		s.Run(ctx)
		pw.Close()
		close(stopped)
	}()
	t.Cleanup(func() {
		cancel()
		cw.Close()
		ts.CloseClientConnections()
		<-stopped
	})
	return newPeer(stdio.NewConn(pr, cw, 0))
}

// nextAnswer returns the next answer the proxy POSTed to u.
func (u *sseUpstream) nextAnswer(t *testing.T) string {
	t.Helper()
	select {
	case a := <-u.answers:
		return a
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream got no answer within 5s")
	}
	return ""
}

// TestOversizedRequestFromHTTPUpstreamIsAnswered: a request of the
// server's over the limit (a sampling/createMessage, say) on the event
// stream of a tools/call, on the GET stream, or as a JSON body, is not
// passed on to the client, and the server is POSTed an error naming the
// limit under the request's id as it was written, wherever the id comes,
// as over stdio: else it would wait for ever. A notification over the
// limit is only dropped; the stream goes on and the call gets its answer.
func TestOversizedRequestFromHTTPUpstreamIsAnswered(t *testing.T) {
	const limit = 1500
	big := `"` + strings.Repeat("x", 2*limit) + `"`
	for _, tt := range []struct{ name, frame, id string }{
		{"id in the head", `{"jsonrpc":"2.0","id":"s\u00e9-9","method":"sampling/createMessage","params":{"p":` + big + `}}`, `"s\u00e9-9"`},
		{"id after the params", `{"jsonrpc":"2.0","method":"roots/list","params":{"p":` + big + `},"id":"r\u00e9-7"}`, `"r\u00e9-7"`},
		{"method after the params", `{"jsonrpc":"2.0","id":1.0,"params":{"p":` + big + `},"method":"roots/list"}`, `1.0`},
	} {
		want := `{"jsonrpc":"2.0","id":` + tt.id + `,"error":{"code":-32603,"message":"mcp-idempotent: the request was not passed on to the client: message larger than the 1500-byte limit (--max-message-size)"}}`
		t.Run(tt.name+", event stream", func(t *testing.T) {
			u := newSSEUpstream(func(u *sseUpstream, w http.ResponseWriter, r *http.Request, id string) {
				w.Header().Set("Content-Type", "text/event-stream")
				sseEvent(w, "", `{"jsonrpc":"2.0","method":"notifications/message","params":{"p":`+big+`}}`)
				sseEvent(w, "", tt.frame)
				select { // the answer comes on a POST of its own
				case <-u.answered:
				case <-r.Context().Done():
					return
				}
				sseEvent(w, "", `{"jsonrpc":"2.0","id":`+id+`,"result":{"content":[{"type":"text","text":"charged"}]}}`)
			})
			client := newHTTPUpstreamRig(t, limit, u)
			client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{}}}`)
			if got := u.nextAnswer(t); got != want {
				t.Fatalf("upstream got %.400s; want %s", got, want)
			}
			if got := client.next(t, "client"); !strings.Contains(got, `"id":1,"result"`) || !strings.Contains(got, "charged") {
				t.Fatalf("client got %.400s; want the call's result, and nothing for the server's messages", got)
			}
		})
		t.Run(tt.name+", GET stream", func(t *testing.T) {
			u := newSSEUpstream(nil)
			u.get = func(w http.ResponseWriter) { sseEvent(w, "", tt.frame) }
			client := newHTTPUpstreamRig(t, limit, u)
			client.send(t, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
			client.next(t, "client") // which opens the GET stream
			if got := u.nextAnswer(t); got != want {
				t.Fatalf("upstream got %.400s; want %s", got, want)
			}
		})
		t.Run(tt.name+", JSON body", func(t *testing.T) {
			u := newSSEUpstream(func(_ *sseUpstream, w http.ResponseWriter, r *http.Request, id string) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, tt.frame)
			})
			client := newHTTPUpstreamRig(t, limit, u)
			client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{}}}`)
			if got := u.nextAnswer(t); got != want {
				t.Fatalf("upstream got %.400s; want %s", got, want)
			}
			if got := client.next(t, "client"); !strings.Contains(got, `"id":1,`) || !strings.Contains(got, "Outcome unknown:") {
				t.Fatalf("client got %.400s; want outcome unknown for the call", got)
			}
		})
	}
}

// TestOversizedAnswerOnHTTPStreamIsAnswered: the answer to a tools/call
// over the limit, on its event stream, answers the call once its event
// has ended, wherever its id comes, though the server holds the stream
// open: outcome unknown, naming the limit. The stream is not resumed
// from the event id the answer's event gave: the server, which sent the
// answer, may hold a resumed stream open with nothing on it, and the call
// would wait for ever.
func TestOversizedAnswerOnHTTPStreamIsAnswered(t *testing.T) {
	const limit = 1500
	big := `{"content":[{"type":"text","text":"` + strings.Repeat("x", 2*limit) + `"}]}`
	for _, tt := range []struct {
		name   string
		answer func(id string) string
	}{
		{"id first", func(id string) string { return `{"jsonrpc":"2.0","id":` + id + `,"result":` + big + `}` }},
		{"id after the result", func(id string) string { return `{"jsonrpc":"2.0","result":` + big + `,"id":` + id + `}` }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u := newSSEUpstream(func(_ *sseUpstream, w http.ResponseWriter, r *http.Request, id string) {
				w.Header().Set("Content-Type", "text/event-stream")
				sseEvent(w, "ev-1", tt.answer(id))
				<-r.Context().Done()
			})
			client := newHTTPUpstreamRig(t, limit, u)
			client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{}}}`)
			got := client.next(t, "client")
			if !strings.Contains(got, `"id":1,`) || !strings.Contains(got, "Outcome unknown:") || !strings.Contains(got, "1500-byte limit (--max-message-size)") {
				t.Fatalf("the tools/call got %.400s; want outcome unknown, naming the limit", got)
			}
			if n := u.resumed.Load(); n != 0 {
				t.Fatalf("the stream was resumed %d times after the answer", n)
			}
		})
	}
}

// TestOverlongSSELineFromHTTPUpstreamIsDropped: a line over the limit
// on a tools/call's event stream other than data (a comment, an event
// type, an id) is read to its end and dropped, and the stream goes on
// to the call's answer. Breaking the stream there would resume it from
// the priming event's id, and a server that holds the resumed stream
// open would leave the call waiting for ever.
func TestOverlongSSELineFromHTTPUpstreamIsDropped(t *testing.T) {
	const limit = 1500
	long := strings.Repeat("x", 2*limit)
	for name, line := range map[string]string{
		"comment":    ":" + long + "\n",
		"event type": "event: " + long + "\ndata: {}\n\n",
		"id":         "id: " + long + "\ndata: {}\n\n",
	} {
		t.Run(name, func(t *testing.T) {
			u := newSSEUpstream(func(_ *sseUpstream, w http.ResponseWriter, r *http.Request, id string) {
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, "id: ev-0\ndata:\n\n"+line)
				sseEvent(w, "", `{"jsonrpc":"2.0","id":`+id+`,"result":{"content":[{"type":"text","text":"charged"}]}}`)
				<-r.Context().Done()
			})
			client := newHTTPUpstreamRig(t, limit, u)
			client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{}}}`)
			if got := client.next(t, "client"); !strings.Contains(got, `"id":1,"result"`) || !strings.Contains(got, "charged") {
				t.Fatalf("client got %.400s; want the call's result", got)
			}
			if n := u.resumed.Load(); n != 0 {
				t.Fatalf("the stream was resumed %d times", n)
			}
		})
	}
}
