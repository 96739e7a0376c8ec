package streamhttp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// slowPost opens a connection to url and sends a POST of body in the
// session sid, all but its last byte. The returned function sends that
// byte and returns the response.
func slowPost(t *testing.T, url, sid, body string) func() *http.Response {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"+
		"%s: %s\r\n%s: %s\r\nContent-Length: %d\r\n\r\n%s", headerSessionID, sid, headerProtocolVersion, version, len(body), body[:len(body)-1])
	return func() *http.Response {
		t.Helper()
		io.WriteString(c, body[len(body)-1:])
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer once the body came: %v", err)
		}
		return resp
	}
}

// TestServerMaxBodyReads: past MaxBodyReads bodies being read, a request
// is refused unread with 503 and Retry-After, saying it did not run; a
// call in flight and the GET stream hold no place, and once the bodies
// are read, a request gets in.
func TestServerMaxBodyReads(t *testing.T) {
	srv, p, hs := newTestServer(t, ServerOptions{MaxBodyReads: 2})
	sid := start(t, hs.URL, nil)
	get := do(t, t.Context(), "GET", hs.URL, "", session(sid))
	defer get.Body.Close()
	if get.StatusCode != 200 {
		t.Fatalf("GET stream: %s", get.Status)
	}
	slow := make(chan []testEvent, 1)
	go func() {
		resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":2,"method":"slow"}`, session(sid))
		defer resp.Body.Close()
		slow <- readEvents(t, resp.Body)
	}()
	waitFor(t, func() bool { return p.seen(`"slow"`) == 1 })

	finish := []func() *http.Response{
		slowPost(t, hs.URL, sid, `{"jsonrpc":"2.0","id":10,"method":"ping"}`),
		slowPost(t, hs.URL, sid, `{"jsonrpc":"2.0","id":11,"method":"ping"}`),
	}
	waitFor(t, func() bool { return len(srv.bodyReads) == 2 })

	ping := `{"jsonrpc":"2.0","id":3,"method":"ping"}`
	resp := do(t, t.Context(), "POST", hs.URL, ping, session(sid))
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a third body while two are read: %s, Retry-After %q, %s; want 503 with Retry-After", resp.Status, resp.Header.Get("Retry-After"), b)
	}
	m, err := jsonrpc.Decode(b)
	if err != nil || m.Error == nil || jsonrpc.DecodeError(m.Error).Code != jsonrpc.CodeInternalError {
		t.Fatalf("refused with %s; want a JSON-RPC error", b)
	}
	for _, want := range []string{"--max-body-reads", "did not run"} {
		if msg := jsonrpc.DecodeError(m.Error).Message; !strings.Contains(msg, want) {
			t.Errorf("the refusal %q does not say %q", msg, want)
		}
	}
	if p.seen(`"id":3`) != 0 {
		t.Fatal("a refused request reached the proxy")
	}

	for i, f := range finish {
		resp := f()
		if events := readEvents(t, resp.Body); resp.StatusCode != 200 || len(events) != 1 || !strings.Contains(events[0].data, fmt.Sprintf(`"id":%d`, 10+i)) {
			t.Fatalf("slow body %d: %s %v; want its answer", i, resp.Status, events)
		}
		resp.Body.Close()
	}
	waitFor(t, func() bool { return len(srv.bodyReads) == 0 })
	resp = do(t, t.Context(), "POST", hs.URL, ping, session(sid))
	if events := readEvents(t, resp.Body); resp.StatusCode != 200 || len(events) != 1 || !strings.Contains(events[0].data, `"id":3`) {
		t.Fatalf("the request sent again once the bodies were read: %s %v; want its answer", resp.Status, events)
	}
	resp.Body.Close()

	close(p.gate)
	if events := <-slow; len(events) != 1 || !strings.Contains(events[0].data, `"id":2`) {
		t.Fatalf("the call in flight got %v; want its answer", events)
	}
}

// TestServerBodyReadWaits: a request that finds every place taken waits a
// moment for one, so a burst of bodies that come at once is read, not
// refused.
func TestServerBodyReadWaits(t *testing.T) {
	// A wait far longer than the test takes: the request must get in
	// by waiting, whatever the machine's pace.
	srv, _, hs := newTestServer(t, ServerOptions{MaxBodyReads: 1, bodyReadWait: time.Hour})
	sid := start(t, hs.URL, nil)
	finish := slowPost(t, hs.URL, sid, `{"jsonrpc":"2.0","id":10,"method":"ping"}`)
	waitFor(t, func() bool { return len(srv.bodyReads) == 1 })

	answered := make(chan *http.Response, 1)
	go func() {
		answered <- do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":3,"method":"ping"}`, session(sid))
	}()
	waitFor(t, func() bool { return srv.bodyWaits.Load() == 1 })
	finish().Body.Close()
	resp := <-answered
	defer resp.Body.Close()
	if events := readEvents(t, resp.Body); resp.StatusCode != 200 || len(events) != 1 || !strings.Contains(events[0].data, `"id":3`) {
		t.Fatalf("a request that waited for a place: %s %v; want its answer", resp.Status, events)
	}
}

// endlessBody opens a connection to url and sends a request of method in
// the session sid, with a chunked body whose first chunk is n bytes and
// whose end never comes. It returns the response, and a reader of what
// the connection carries after it.
func endlessBody(t *testing.T, url, method, sid string, n int) (*http.Response, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "%s / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"+
		"%s: %s\r\n%s: %s\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", method, headerSessionID, sid, headerProtocolVersion, version, n, strings.Repeat(" ", n))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer 10s after the headers, the body still coming: %v", err)
	}
	return resp, br
}

// closes reports whether the server closes the connection br reads
// within the 10s endlessBody gave it: only a server that waits for the
// rest of the body leaves it open that long.
func closes(br *bufio.Reader) bool {
	_, err := br.ReadByte()
	return !errors.Is(err, os.ErrDeadlineExceeded)
}

// TestServerEndlessBodyOverTheLimit: a body of unknown length that passes
// MaxMessage and never ends gets 413 at once, and its connection closes
// soon after, rather than once BodyTimeout has passed or net/http has
// read 256 KiB more of it.
func TestServerEndlessBodyOverTheLimit(t *testing.T) {
	_, _, hs := newTestServer(t, ServerOptions{MaxMessage: 1024, BodyTimeout: time.Hour})
	sid := start(t, hs.URL, nil)
	resp, br := endlessBody(t, hs.URL, "POST", sid, 4096)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !resp.Close || !strings.Contains(string(b), "--max-message-size") {
		t.Errorf("answered %s, closing %v, %s; want 413 naming the limit, and the connection closed", resp.Status, resp.Close, b)
	}
	if !closes(br) {
		t.Error("the connection is still open 10s after the headers, the body still coming")
	}
}

// TestServerEndlessBodyOfAGet: the body of a GET or DELETE, which the
// server never reads, does not hold back the answer, however long it
// goes on: net/http would read up to 256 KiB of it first, with no time
// limit. The connection closes after the answer.
func TestServerEndlessBodyOfAGet(t *testing.T) {
	_, _, hs := newTestServer(t, ServerOptions{BodyTimeout: time.Hour})
	sid := start(t, hs.URL, nil)
	for _, tt := range []struct {
		method string
		status int
	}{
		{"GET", http.StatusOK},
		{"GET", http.StatusConflict}, // the first holds the stream
		{"DELETE", http.StatusNoContent},
	} {
		resp, br := endlessBody(t, hs.URL, tt.method, sid, 16)
		if resp.StatusCode != tt.status || !resp.Close {
			t.Errorf("%s: answered %s, closing %v; want %d, and the connection closed", tt.method, resp.Status, resp.Close, tt.status)
		}
		if tt.status == http.StatusOK {
			continue // a stream: it stays open
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if !closes(br) {
			t.Errorf("%s: the connection is still open 10s after the headers, the body still coming", tt.method)
		}
	}
}
