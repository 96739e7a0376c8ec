package streamhttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// TestHTTPErrors checks that a POST refused with an HTTP error is answered
// with a JSON-RPC error under the request's id, carrying the status and
// Retry-After.
func TestHTTPErrors(t *testing.T) {
	_, rec, ts := newServer(t, nil)
	c := dial(t, ts.URL)
	handshake(t, c)
	rec.mu.Lock()
	rec.fail = func(w http.ResponseWriter, body string) bool {
		switch {
		case strings.Contains(body, `"unavailable"`):
			w.Header().Set("Retry-After", "2")
			http.Error(w, "busy", http.StatusServiceUnavailable)
		case strings.Contains(body, `"gone"`):
			http.Error(w, "no such session", http.StatusNotFound)
		case strings.Contains(body, `"accepted"`):
			w.WriteHeader(http.StatusAccepted)
		default:
			return false
		}
		return true
	}
	rec.mu.Unlock()

	for _, tc := range []struct {
		name, id, tool string
		want           jsonrpc.NoAnswer
	}{
		{"503", `"a"`, "unavailable", jsonrpc.NoAnswer{Status: 503, RetryAfter: "2", Reason: "upstream answered HTTP 503"}},
		// Accepted, and never answered: it may run, so the outcome is
		// unknown, never failed.
		{"202", `"b"`, "accepted", jsonrpc.NoAnswer{Status: 202, Reason: "upstream accepted the request without answering it (HTTP 202)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			write(t, c, `{"jsonrpc":"2.0","id":`+tc.id+`,"method":"tools/call","params":{"name":"`+tc.tool+`"}}`)
			na := readNoAnswer(t, c)
			want := tc.want
			want.ID = json.RawMessage(tc.id)
			if string(na.ID) != string(want.ID) || na.NotSent || na.Status != want.Status || na.RetryAfter != want.RetryAfter || na.Reason != want.Reason {
				t.Errorf("got %+v, want %+v", *na, want)
			}
		})
	}

	// A notification refused gets no answer: there is no one to answer.
	rec.mu.Lock()
	rec.fail = func(w http.ResponseWriter, body string) bool {
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return true
	}
	rec.mu.Unlock()
	write(t, c, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`)
	write(t, c, `{"jsonrpc":"2.0","id":99,"method":"ping"}`)
	if na := readNoAnswer(t, c); string(na.ID) != "99" {
		t.Errorf("got %+v, want the ping's account, the notification's none", *na)
	}
}

// TestAnswersOnTheirOwnPOST: a POST's answer stream answers that POST's
// requests only: an answer on it under another request's id, which would
// be taken for that request's, is dropped, as is a message that is
// neither a request nor an answer; the POST whose answer did not come is
// answered as unanswered.
func TestAnswersOnTheirOwnPOST(t *testing.T) {
	_, rec, ts := newServer(t, nil)
	c := dial(t, ts.URL)
	handshake(t, c)
	rec.mu.Lock()
	rec.fail = func(w http.ResponseWriter, body string) bool {
		if !strings.Contains(body, `"steal"`) {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `[{"foo":1},{"jsonrpc":"2.0","id":"other","result":{"content":[{"type":"text","text":"stolen"}]}}]`)
		return true
	}
	rec.mu.Unlock()
	write(t, c, `{"jsonrpc":"2.0","id":"steal-1","method":"tools/call","params":{"name":"steal"}}`)
	if na := readNoAnswer(t, c); string(na.ID) != `"steal-1"` || na.NotSent || !strings.Contains(na.Reason, "ended without an answer") {
		t.Fatalf("got %+v; want the request answered as unanswered, nothing else", *na)
	}
	write(t, c, `{"jsonrpc":"2.0","id":7,"method":"ping"}`)
	if m := read(t, c); string(m.ID) != "7" {
		t.Fatalf("got %s; want the ping's answer next, the stolen answer and the junk dropped", m.Raw)
	}
}

// TestSessionExpired: a 404 to a request carrying the session id answers
// that request, and then ReadFrame reports that the session is gone, so
// that the proxy starts a new one.
func TestSessionExpired(t *testing.T) {
	_, rec, ts := newServer(t, nil)
	c := dial(t, ts.URL)
	handshake(t, c)
	rec.mu.Lock()
	rec.fail = func(w http.ResponseWriter, body string) bool {
		if !strings.Contains(body, `"gone"`) {
			return false // the handshake's last notification may still be on its way
		}
		http.Error(w, "no such session", http.StatusNotFound)
		return true
	}
	rec.mu.Unlock()
	write(t, c, `{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"gone"}}`)
	if na := readNoAnswer(t, c); string(na.ID) != "17" || na.Reason != "upstream session expired (HTTP 404)" || na.Status != 404 {
		t.Fatalf("got %+v; want the session-expired account under id 17", *na)
	}
	if _, err := c.ReadFrame(); !errors.Is(err, ErrSessionExpired) {
		t.Fatalf("ReadFrame after the 404 = %v; want ErrSessionExpired", err)
	}
}

func TestUnreachable(t *testing.T) {
	ts := httptest.NewServer(http.NotFoundHandler())
	// A user and a query, either of which may be a credential, are never
	// shown: not in the error the client gets, nor in the log.
	url := strings.Replace(ts.URL, "//", "//token:pass@", 1) + "/mcp?key=querysecret"
	ts.Close()
	var log strings.Builder
	c, err := Dial(context.Background(), url, Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	write(t, c, initialize)
	e := readNoAnswer(t, c)
	if string(e.ID) != "1" || !e.NotSent {
		t.Fatalf("got %+v, want id 1, not sent (the dial failed)", *e)
	}
	if !strings.HasPrefix(e.Reason, "upstream unreachable") || !strings.Contains(e.Reason, "http://***@127.0.0.1") || !strings.Contains(e.Reason, "/mcp?***") {
		t.Errorf("message = %q; want it to name the upstream without its user or query", e.Reason)
	}
	for _, secret := range []string{"token", "pass", "querysecret"} {
		if strings.Contains(e.Reason, secret) || strings.Contains(log.String(), secret) {
			t.Errorf("%q shown: message %q, log %q", secret, e.Reason, log.String())
		}
	}
}

// TestBadCertificateNotSent: a server whose certificate does not verify
// fails the TLS handshake, before any byte of the POST is written. The
// call did not run, so it is not sent, not of unknown outcome, which
// would block its retries once the certificate is fixed.
func TestBadCertificateNotSent(t *testing.T) {
	var posts atomic.Int32
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { posts.Add(1) }))
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes that fail
	ts.StartTLS()
	t.Cleanup(ts.Close)
	c := dial(t, ts.URL+"/mcp") // net/http's default transport, which does not trust the test certificate
	write(t, c, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge","_meta":{"mcp-idempotent/execution-id":"exe_1"}}}`)
	na := readNoAnswer(t, c)
	if string(na.ID) != "2" || !na.NotSent || !strings.Contains(na.Reason, "certificate") {
		t.Fatalf("got %+v; want id 2 not sent, naming the certificate", *na)
	}
	if n := posts.Load(); n != 0 {
		t.Errorf("the server got %d requests; want none", n)
	}
}

// TestBrokenHTTP2CallSent: over HTTP/2, where net/http hands the
// connection to its HTTP/2 side, a call whose stream the server resets
// once it read the call may have run: its outcome is unknown, not "not
// sent".
func TestBrokenHTTP2CallSent(t *testing.T) {
	var calls atomic.Int32
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !strings.Contains(string(body), "tools/call") || r.ProtoMajor != 2 {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		calls.Add(1)
		panic(http.ErrAbortHandler) // resets the stream
	}))
	ts.EnableHTTP2 = true
	ts.StartTLS()
	t.Cleanup(ts.Close)
	c, err := Dial(context.Background(), ts.URL, Options{HTTPClient: ts.Client()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	write(t, c, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge","_meta":{"mcp-idempotent/execution-id":"exe_1"}}}`)
	if na := readNoAnswer(t, c); string(na.ID) != "2" || na.NotSent || na.Status != 0 {
		t.Fatalf("got %+v; want id 2 sent and not answered", *na)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the server got the call %d times over HTTP/2; want once", n)
	}
}

func TestDialRejectsBadURL(t *testing.T) {
	for _, u := range []string{"", "ftp://host/mcp", "http://", "://x", "http://user:secret@h:x/mcp", "ftp://user:secret@h/?secret"} {
		_, err := Dial(context.Background(), u, Options{})
		switch {
		case err == nil:
			t.Errorf("Dial(%q) succeeded", u)
		case strings.Contains(err.Error(), "secret"):
			t.Errorf("Dial(%q) = %v, which shows the credential", u, err)
		}
	}
}

// TestRedirects: a redirect is followed within the upstream's origin and
// method only. One to another host would hand it the headers given for the
// upstream (a credential) and the call; one that turns the POST into a GET
// would lose the message. Either is answered as the HTTP error it is,
// naming the redirect.
func TestRedirects(t *testing.T) {
	_, rec, ts := newServer(t, nil)
	mux := http.NewServeMux()
	mux.HandleFunc("/old", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/new", http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("/found", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/new", http.StatusFound)
	})
	mux.HandleFunc("/away", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, ts.URL+"/?key=secret", http.StatusTemporaryRedirect)
	})
	mux.Handle("/new", rec)
	front := httptest.NewServer(mux)
	t.Cleanup(front.Close)

	handshake(t, dial(t, front.URL+"/old"))
	// redirected counts the requests that reached the server through a
	// redirect from path: net/http names the URL it left in Referer.
	redirected := func(path string) int {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		n := 0
		for _, s := range rec.seen {
			if strings.HasSuffix(s.header.Get("Referer"), path) {
				n++
			}
		}
		return n
	}

	for _, tc := range []struct{ path, want string }{
		{"/found", "upstream answered HTTP 302, a redirect to " + front.URL + "/new that is not followed"},
		{"/away", "upstream answered HTTP 307, a redirect to " + ts.URL + "/?*** that is not followed"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			c := dial(t, front.URL+tc.path)
			write(t, c, initialize)
			na := readNoAnswer(t, c)
			if !strings.HasPrefix(na.Reason, tc.want) || na.NotSent {
				t.Errorf("got %+v, want a reason starting %q", *na, tc.want)
			}
			if n := redirected(tc.path); n != 0 {
				t.Errorf("the server behind the redirect saw %d requests, want none", n)
			}
		})
	}
}

// TestAnswerOverTheLimit: an answer over MaxMessage, in a JSON body or an
// event stream, leaves its request answered with a reason naming the
// limit, as over stdio, so that the caller knows to raise it.
func TestAnswerOverTheLimit(t *testing.T) {
	for _, jsonResponse := range []bool{true, false} {
		t.Run(fmt.Sprint("json=", jsonResponse), func(t *testing.T) {
			_, _, ts := newServer(t, &mcp.StreamableHTTPOptions{JSONResponse: jsonResponse})
			c, err := Dial(context.Background(), ts.URL, Options{MaxMessage: 1000})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			handshake(t, c)
			write(t, c, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"`+strings.Repeat("x", 2000)+`"}}}`)
			na := readNoAnswer(t, c)
			if want := "message larger than the 1000-byte limit (--max-message-size)"; string(na.ID) != "2" || !strings.Contains(na.Reason, want) {
				t.Errorf("got %+v, want a reason saying %q", *na, want)
			}
		})
	}
}

// TestUnreadableAnswers: a 200 whose body is no answer, such as a
// gateway's page, leaves its request answered with a reason saying what
// came, not only that no answer did.
func TestUnreadableAnswers(t *testing.T) {
	for _, tc := range []struct{ contentType, want string }{
		{"application/json", "the upstream's answer is not JSON"},
		{"text/html", `the upstream answered with Content-Type "text/html", not JSON or an event stream`},
	} {
		t.Run(tc.contentType, func(t *testing.T) {
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.contentType)
				io.WriteString(w, "<html>sign in</html>")
			}))
			t.Cleanup(ts.Close)
			c := dial(t, ts.URL)
			write(t, c, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo"}}`)
			if na := readNoAnswer(t, c); string(na.ID) != "3" || na.Reason != tc.want || na.Status != 200 {
				t.Errorf("got %+v, want the reason %q", *na, tc.want)
			}
		})
	}
}

// TestCallNotSentAgainOnABrokenConnection: a tools/call whose reused
// connection breaks after the server read it, before any answer, is not
// sent again by net/http on a new connection (it would be for a POST it
// takes for idempotent, one with an Idempotency-Key): the tool may have
// run, so its outcome is unknown, and it ran once.
func TestCallNotSentAgainOnABrokenConnection(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		m, _ := jsonrpc.Decode(body)
		switch {
		case m.Method == "tools/call":
			mu.Lock()
			calls++
			first := calls == 1
			mu.Unlock()
			if first { // the server dies while the tool runs
				conn, _, _ := w.(http.Hijacker).Hijack()
				conn.Close()
				return
			}
		case m.ID == nil:
			w.WriteHeader(http.StatusAccepted)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"protocolVersion":"2025-11-25","content":[]}}`)
	}))
	t.Cleanup(ts.Close)
	c := dial(t, ts.URL)
	handshake(t, c) // so that the call goes on a reused connection
	write(t, c, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","_meta":{"mcp-idempotent/execution-id":"exe_1"}}}`)
	f, err := c.ReadFrame()
	mu.Lock()
	defer mu.Unlock()
	if calls != 1 {
		t.Errorf("the server got the tools/call %d times, want once", calls)
	}
	if na, ok := errors.AsType[*jsonrpc.NoAnswer](err); !ok || na.NotSent {
		t.Errorf("ReadFrame = %s, %v; want the account of a call sent and not answered", f, err)
	}
}

// TestAnswerWithLineBreaks: an answer whose JSON holds raw line breaks
// between its tokens (pretty-printed, with either ending, or with a bare
// carriage return) is handed on as one line: a frame holds none.
func TestAnswerWithLineBreaks(t *testing.T) {
	_, rec, ts := newServer(t, &mcp.StreamableHTTPOptions{JSONResponse: true})
	c := dial(t, ts.URL)
	handshake(t, c)
	breaks := map[string]string{`"lf"`: "\n", `"crlf"`: "\r\n", `"cr"`: "\r"}
	rec.mu.Lock()
	rec.fail = func(w http.ResponseWriter, body string) bool {
		for id, br := range breaks {
			if strings.Contains(body, `"id":`+id) {
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"jsonrpc":"2.0",%s"id":%s,%s"result":{"tools":[]}}`, br, id, br)
				return true
			}
		}
		return false
	}
	rec.mu.Unlock()
	for id := range breaks {
		write(t, c, `{"jsonrpc":"2.0","id":`+id+`,"method":"tools/list"}`)
		if m, _ := readResponse(t, c, id); string(m.Result) != `{"tools":[]}` {
			t.Errorf("answer %s: result %s", id, m.Result)
		}
	}
}
