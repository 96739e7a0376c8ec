package streamhttp

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// A forgetfulUpstream is a 2025-11-25 server, answered in memory so that
// a test runs in a synctest bubble, that restarts and forgets the session
// while the Client uses it. gets answers the standing GET streams in
// turn (nil: the connection is refused); the last answer repeats.
type forgetfulUpstream struct {
	mu       sync.Mutex
	gets     []func(*http.Request) *http.Response
	getsSeen int                                // the GETs without Last-Event-ID so far
	call     func(*http.Request) *http.Response // answers the tools/call POST
	resume   func(*http.Request) *http.Response // answers a GET with Last-Event-ID; nil: forgotten
	lost     *atomic.Int32                      // counts the GETs a nil in gets refused
}

func (u *forgetfulUpstream) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
	}
	switch {
	case req.Method == http.MethodGet && req.Header.Get(headerLastEventID) == "":
		u.mu.Lock()
		u.getsSeen++
		next := u.gets[0]
		if len(u.gets) > 1 {
			u.gets = u.gets[1:]
		}
		u.mu.Unlock()
		if next == nil {
			u.lost.Add(1)
			return nil, errors.New("connection refused")
		}
		return next(req), nil
	case req.Method == http.MethodGet && u.resume != nil:
		return u.resume(req), nil
	case req.Method == http.MethodGet:
		return forgotten(req), nil
	case strings.Contains(string(body), `"initialize"`):
		resp := answer(req, http.StatusOK, "application/json", `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"u","version":"1"}}}`)
		resp.Header.Set("Mcp-Session-Id", "s1")
		return resp, nil
	case strings.Contains(string(body), `"tools/call"`):
		return u.call(req), nil
	}
	return answer(req, http.StatusAccepted, "", ""), nil
}

// forgotten is the answer of a server that does not know the session.
func forgotten(req *http.Request) *http.Response {
	return answer(req, http.StatusNotFound, "application/json", `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"unknown session"}}`)
}

func answer(req *http.Request, code int, contentType, body string) *http.Response {
	h := http.Header{}
	if contentType != "" {
		h.Set("Content-Type", contentType)
	}
	return &http.Response{StatusCode: code, Header: h, Body: io.NopCloser(strings.NewReader(body)), Request: req}
}

// quietStream is a GET stream that stays open, sending nothing, until the
// Client goes.
func quietStream(req *http.Request) *http.Response {
	resp := answer(req, http.StatusOK, "text/event-stream", "")
	resp.Body = ctxBody{req.Context()}
	return resp
}

type ctxBody struct{ ctx context.Context }

func (b ctxBody) Read([]byte) (int, error) { <-b.ctx.Done(); return 0, b.ctx.Err() }
func (b ctxBody) Close() error             { return nil }

// dialScripted returns a Client of an upstream that u plays, past the
// handshake.
func dialScripted(t *testing.T, u http.RoundTripper) *Client {
	t.Helper()
	c, err := Dial(context.Background(), "http://upstream.test/mcp", Options{HTTPClient: &http.Client{Transport: u}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	handshake(t, c)
	return c
}

// TestResumeMeetsForgottenSession: a call's stream breaks, and the server,
// restarted, answers the resumption 404. The call is answered, and the
// session ends at once, so that the proxy starts a new one before the
// next call meets the 404 too.
func TestResumeMeetsForgottenSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u := &forgetfulUpstream{
			gets: []func(*http.Request) *http.Response{quietStream},
			// A priming event, then the connection breaks.
			call: func(req *http.Request) *http.Response {
				return answer(req, http.StatusOK, "text/event-stream", "id: 1-0\ndata: \n\n")
			},
		}
		c := dialScripted(t, u)
		synctest.Wait() // the GET stream is open: the server serves GET
		write(t, c, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"x"}}`)
		na := readNoAnswer(t, c)
		if string(na.ID) != "3" || na.NotSent || !strings.Contains(na.Reason, "expired (HTTP 404)") {
			t.Fatalf("got %+v; want id 3 unanswered, saying the session expired", *na)
		}
		if _, err := c.ReadFrame(); !errors.Is(err, ErrSessionExpired) {
			t.Fatalf("ReadFrame = %v; want ErrSessionExpired", err)
		}
	})
}

// TestGETStreamMeetsForgottenSession: the standing GET stream ends, and
// the server, restarted, answers 404 for the session when it is opened
// again: the session ends without a call having to fail on it first.
func TestGETStreamMeetsForgottenSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		forgottenAfterAStream(t)
	})
}

// TestGETStreamOpenedAgain: the standing GET stream ends, and opening it
// again fails a while, as while the server restarts (a refused
// connection, 503): it is tried again, and so meets the restarted
// server's 404, which ends the session.
func TestGETStreamOpenedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lost atomic.Int32
		u := &forgetfulUpstream{gets: []func(*http.Request) *http.Response{
			func(req *http.Request) *http.Response {
				return answer(req, http.StatusOK, "text/event-stream", "retry: 10\n\n")
			},
			nil, // no answer: the connection is refused
			func(req *http.Request) *http.Response {
				return answer(req, http.StatusServiceUnavailable, "text/plain", "restarting")
			},
			forgotten,
		}}
		u.lost = &lost
		c := dialScripted(t, u)
		if _, err := c.ReadFrame(); !errors.Is(err, ErrSessionExpired) {
			t.Fatalf("ReadFrame = %v; want ErrSessionExpired", err)
		}
		if lost.Load() != 1 {
			t.Errorf("%d refused connections; want 1", lost.Load())
		}
	})
}

// TestGETStreamResumptionRefused: the standing GET stream ends after an
// event with an id, and the server can no longer resume after it (400:
// it dropped those events). The stream is opened afresh, and the
// server's later messages still come.
func TestGETStreamResumptionRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u := &forgetfulUpstream{
			gets: []func(*http.Request) *http.Response{
				func(req *http.Request) *http.Response {
					return answer(req, http.StatusOK, "text/event-stream", "id: 7\ndata: \n\n")
				},
				func(req *http.Request) *http.Response {
					resp := answer(req, http.StatusOK, "text/event-stream", "")
					resp.Body = streamThenWait(req, `{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)
					return resp
				},
			},
			resume: func(req *http.Request) *http.Response {
				return answer(req, http.StatusBadRequest, "text/plain", "failed to replay events")
			},
		}
		c := dialScripted(t, u)
		if m := read(t, c); m.Method != "notifications/tools/list_changed" {
			t.Fatalf("got %s; want the server's notification, on the stream opened afresh", m.Raw)
		}
	})
}

// TestAnsweredStreamLeftOpen: a server answers a call on an event stream
// and keeps the stream open (it only SHOULD close it), then restarts and
// answers the next call 404. The answered call's POST is not under way
// any more, so the session ends, and the proxy starts a new one, rather
// than every later call failing on the forgotten one.
func TestAnsweredStreamLeftOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		u := &forgetfulUpstream{
			gets: []func(*http.Request) *http.Response{quietStream},
			call: func(req *http.Request) *http.Response {
				if calls.Add(1) > 1 {
					return forgotten(req)
				}
				resp := answer(req, http.StatusOK, "text/event-stream", "")
				resp.Body = streamThenWait(req, `{"jsonrpc":"2.0","id":2,"result":{"content":[]}}`)
				return resp
			},
		}
		c := dialScripted(t, u)
		write(t, c, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x"}}`)
		if m := read(t, c); string(m.ID) != "2" || m.Result == nil {
			t.Fatalf("got %s; want the call's answer", m.Raw)
		}
		write(t, c, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"x"}}`)
		if na := readNoAnswer(t, c); string(na.ID) != "3" || na.Status != http.StatusNotFound {
			t.Fatalf("got %+v; want the 404 under id 3", *na)
		}
		if _, err := c.ReadFrame(); !errors.Is(err, ErrSessionExpired) {
			t.Fatalf("ReadFrame = %v; want ErrSessionExpired", err)
		}
	})
}

// streamThenWait is the body of an event stream that sends message, then
// stays open until the Client goes.
func streamThenWait(req *http.Request, message string) io.ReadCloser {
	return struct {
		io.Reader
		io.Closer
	}{io.MultiReader(strings.NewReader("id: 1\nevent: message\ndata: "+message+"\n\n"), ctxBody{req.Context()}), io.NopCloser(nil)}
}

// TestGETStreamNotRouted: a server that never served GET and answers it
// 404 keeps its session: the 404 may say only that GET is not routed.
func TestGETStreamNotRouted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u := &forgetfulUpstream{gets: []func(*http.Request) *http.Response{
			func(req *http.Request) *http.Response {
				return answer(req, http.StatusNotFound, "text/plain", "404 page not found")
			},
		}, call: func(req *http.Request) *http.Response {
			return answer(req, http.StatusOK, "application/json", `{"jsonrpc":"2.0","id":4,"result":{"content":[]}}`)
		}}
		c := dialScripted(t, u)
		synctest.Wait()
		write(t, c, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"x"}}`)
		if m := read(t, c); string(m.ID) != "4" || m.Error != nil {
			t.Fatalf("got %s; want the call's answer", m.Raw)
		}
	})
}

// TestGETStreamForgottenDuringCall: the GET stream meets the 404 while a
// call's POST is under way. The call is answered first, from its own 404,
// as not run, and only then does the session end: ended first, the
// call would be taken for sent and unanswered, its outcome unknown.
func TestGETStreamForgottenDuringCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		endGET, release := make(chan struct{}), make(chan struct{})
		u := &forgetfulUpstream{
			gets: []func(*http.Request) *http.Response{
				func(req *http.Request) *http.Response {
					resp := answer(req, http.StatusOK, "text/event-stream", "")
					resp.Body = io.NopCloser(io.MultiReader(strings.NewReader("retry: 10\n\n"), waitReader(endGET)))
					return resp
				},
				forgotten,
			},
			call: func(req *http.Request) *http.Response {
				<-release
				return forgotten(req)
			},
		}
		c := dialScripted(t, u)
		got := make(chan error, 2)
		go func() {
			for range 2 {
				_, err := c.ReadFrame()
				got <- err
			}
		}()
		write(t, c, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"x"}}`)
		synctest.Wait()
		close(endGET)
		time.Sleep(time.Second) // fake time, past the retry: the GET stream meets the 404
		synctest.Wait()
		u.mu.Lock()
		seen := u.getsSeen
		u.mu.Unlock()
		if seen != 2 {
			t.Fatalf("%d GETs before the call's answer; want 2, the second meeting the 404", seen)
		}
		close(release)
		synctest.Wait()
		na, ok := errors.AsType[*jsonrpc.NoAnswer](<-got)
		if !ok || string(na.ID) != "3" || na.Status != http.StatusNotFound {
			t.Fatalf("first ReadFrame: %v; want id 3 answered from its own 404", na)
		}
		if err := <-got; !errors.Is(err, ErrSessionExpired) {
			t.Fatalf("second ReadFrame = %v; want ErrSessionExpired", err)
		}
	})
}

// forgottenAfterAStream dials an upstream whose GET stream ends at once
// and which, restarted, answers 404 for the session when the stream is
// opened again, and checks that the session ends.
func forgottenAfterAStream(t *testing.T) *Client {
	t.Helper()
	u := &forgetfulUpstream{gets: []func(*http.Request) *http.Response{
		func(req *http.Request) *http.Response {
			return answer(req, http.StatusOK, "text/event-stream", "retry: 10\n\n")
		},
		forgotten,
	}}
	c := dialScripted(t, u)
	if _, err := c.ReadFrame(); !errors.Is(err, ErrSessionExpired) {
		t.Fatalf("ReadFrame = %v; want ErrSessionExpired", err)
	}
	return c
}

// TestNothingPostedAfterForgotten: once the GET stream has ended the
// session, a frame written is refused, and so not taken for sent.
func TestNothingPostedAfterForgotten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := forgottenAfterAStream(t)
		if err := c.WriteFrame([]byte(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"x"}}`)); !errors.Is(err, ErrSessionExpired) {
			t.Fatalf("WriteFrame = %v; want ErrSessionExpired", err)
		}
	})
}

// waitReader reads nothing until done is closed, then ends.
type waitReader chan struct{}

func (w waitReader) Read([]byte) (int, error) { <-w; return 0, io.EOF }

// TestSessionForgottenWhileACallRuns: the server answers one call's POST
// 404 for the session while another call's POST is under way. The call
// under way keeps its own outcome, here its answer, and the session ends
// only after it. A call written after the 404 is not POSTed into the
// forgotten session: it would be taken for sent and unanswered when the
// session ends, though it cannot have run.
func TestSessionForgottenWhileACallRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var calls atomic.Int32
		u := &forgetfulUpstream{
			gets: []func(*http.Request) *http.Response{quietStream},
			call: func(req *http.Request) *http.Response {
				if calls.Add(1) == 1 {
					select {
					case <-release:
					case <-req.Context().Done(): // the test failed, and closes the Client
					}
					return answer(req, http.StatusOK, "application/json", `{"jsonrpc":"2.0","id":3,"result":{"content":[]}}`)
				}
				return forgotten(req)
			},
		}
		c := dialScripted(t, u)
		write(t, c, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"x"}}`)
		synctest.Wait() // call 3 is under way
		write(t, c, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"y"}}`)
		if na := readNoAnswer(t, c); string(na.ID) != "4" || !strings.Contains(na.Reason, "expired (HTTP 404)") {
			t.Fatalf("got %+v; want id 4 unanswered, saying the session expired", *na)
		}
		if err := c.WriteFrame([]byte(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"z"}}`)); !errors.Is(err, ErrSessionExpired) {
			t.Fatalf("WriteFrame after the 404 = %v; want ErrSessionExpired", err)
		}
		close(release)
		if m := read(t, c); string(m.ID) != "3" || m.Result == nil {
			t.Fatalf("got %s; want call 3's answer before the session ends", m.Raw)
		}
		if _, err := c.ReadFrame(); !errors.Is(err, ErrSessionExpired) {
			t.Fatalf("ReadFrame = %v; want ErrSessionExpired", err)
		}
		if n := calls.Load(); n != 2 {
			t.Errorf("the server got %d tools/call POSTs; want 2", n)
		}
	})
}

// A badRequestUpstream answers 400, as servers built from the TypeScript
// SDK's examples do, to a POST whose session it does not know: once
// forgot is set, as after a restart. A tools/call named "bad" gets 400
// in a session it knows too, as a request at fault does.
type badRequestUpstream struct {
	forgot atomic.Bool
	pings  atomic.Int32
	// hangPing makes pings go unanswered until the Client gives up.
	hangPing bool
	// pingRefused answers a ping in a session it knows with a JSON-RPC
	// error under the ping's id, and status 400: a server that gives
	// its JSON-RPC errors that status, and takes no ping.
	pingRefused bool
}

func (u *badRequestUpstream) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
	}
	refused := answer(req, http.StatusBadRequest, "application/json", `{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}`)
	switch {
	case req.Method == http.MethodGet:
		return quietStream(req), nil
	case strings.Contains(string(body), `"initialize"`):
		resp := answer(req, http.StatusOK, "application/json", `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"u","version":"1"}}}`)
		resp.Header.Set("Mcp-Session-Id", "s1")
		return resp, nil
	case strings.Contains(string(body), `"ping"`):
		u.pings.Add(1)
		if u.hangPing {
			<-req.Context().Done()
			return nil, req.Context().Err()
		}
		if u.forgot.Load() {
			return refused, nil
		}
		if u.pingRefused {
			return answer(req, http.StatusBadRequest, "application/json", `{"jsonrpc":"2.0","id":"mcp-idempotent/session-check","error":{"code":-32601,"message":"Method not found"}}`), nil
		}
		return answer(req, http.StatusOK, "application/json", `{"jsonrpc":"2.0","id":"mcp-idempotent/session-check","result":{}}`), nil
	case u.forgot.Load() || strings.Contains(string(body), `"bad"`):
		return refused, nil
	case strings.Contains(string(body), `"tools/call"`):
		m, _ := jsonrpc.Decode(body)
		return answer(req, http.StatusOK, "application/json", `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"content":[]}}`), nil
	}
	return answer(req, http.StatusAccepted, "", ""), nil
}

// TestSessionForgottenWith400: a restarted server that answers 400, not
// 404, to the session it forgot. The call gets the 400 (it did not run),
// and the ping in the session that follows is refused too: the session
// ends, so that the proxy starts a new one rather than see every later
// request refused.
func TestSessionForgottenWith400(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u := &badRequestUpstream{}
		c := dialScripted(t, u)
		u.forgot.Store(true)
		write(t, c, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"x"}}`)
		if na := readNoAnswer(t, c); string(na.ID) != "3" || na.NotSent || na.Status != http.StatusBadRequest || !strings.Contains(na.Reason, "session expired") {
			t.Fatalf("got %+v; want id 3 refused with 400, saying the session expired", *na)
		}
		if _, err := c.ReadFrame(); !errors.Is(err, ErrSessionExpired) {
			t.Fatalf("ReadFrame = %v; want ErrSessionExpired", err)
		}
	})
}

// TestBadRequestInALiveSession: a 400 that is the request's own, in a
// session the server still knows, ends nothing: the call gets the 400,
// and the next call is answered in the same session. The server knows
// it when it answers the ping in it; when it answers the ping with a
// JSON-RPC error under its id, though with status 400, as a server that
// gives its errors that status and takes no ping does; and when it does
// not answer the ping at all, whose wait is bounded.
func TestBadRequestInALiveSession(t *testing.T) {
	for name, u := range map[string]*badRequestUpstream{
		"ping answered":             {},
		"ping refused under its id": {pingRefused: true},
		"ping never answered":       {hangPing: true},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := dialScripted(t, u)
				write(t, c, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"bad"}}`)
				if na := readNoAnswer(t, c); string(na.ID) != "3" || na.Reason != "upstream answered HTTP 400" {
					t.Fatalf("got %+v; want id 3 refused with 400", *na)
				}
				if n := u.pings.Load(); n != 1 {
					t.Errorf("the server got %d pings; want 1", n)
				}
				write(t, c, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"good"}}`)
				if m := read(t, c); string(m.ID) != "4" || m.Result == nil {
					t.Fatalf("got %s; want call 4 answered in the same session", m.Raw)
				}
			})
		})
	}
}
