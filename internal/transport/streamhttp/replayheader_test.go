package streamhttp

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestUserIdempotencyHeaderNotReplayable: an Idempotency-Key or
// X-Idempotency-Key given in Options.Header must not make net/http take
// every POST for one it may send again itself. A call whose reused
// connection breaks after the server read it would then run twice, the
// proxy none the wiser.
func TestUserIdempotencyHeaderNotReplayable(t *testing.T) {
	for _, name := range []string{"Idempotency-Key", "X-Idempotency-Key"} {
		t.Run(name, func(t *testing.T) {
			var calls atomic.Int32
			ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				if !strings.Contains(string(body), "tools/call") {
					w.WriteHeader(http.StatusAccepted)
					return
				}
				calls.Add(1)
				panic(http.ErrAbortHandler) // closes the connection, unanswered
			}))
			ts.Config.ErrorLog = log.New(io.Discard, "", 0)
			ts.Start()
			t.Cleanup(ts.Close)
			// One connection: the call goes on the one the notification
			// used, a reused one.
			tr := &http.Transport{MaxConnsPerHost: 1}
			t.Cleanup(tr.CloseIdleConnections)
			c := dialURL(t, ts.URL, Options{HTTPClient: &http.Client{Transport: tr}, Header: http.Header{name: {"k1"}}})
			write(t, c, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			callSentOnce(t, c, &calls)
		})
	}
}

// retryingTransport sends each request with net/http's transport and,
// when that fails, tries once more on a connection it cannot dial: as a
// transport that retries by itself does when the server went away.
type retryingTransport struct{ inner *http.Transport }

func (rt retryingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := rt.inner.RoundTrip(req)
	if err == nil {
		return resp, nil
	}
	return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
}

// TestDialFailureAfterSendSent: a POST that got a connection, was read by
// the server and then failed on a dial (a retry on a new connection)
// may have run: the failed dial is not the whole story.
func TestDialFailureAfterSendSent(t *testing.T) {
	var calls atomic.Int32
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		calls.Add(1)
		panic(http.ErrAbortHandler)
	}))
	ts.Config.ErrorLog = log.New(io.Discard, "", 0)
	ts.Start()
	t.Cleanup(ts.Close)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	c := dialURL(t, ts.URL, Options{HTTPClient: &http.Client{Transport: retryingTransport{tr}}})
	callSentOnce(t, c, &calls)
}

// untracedTransport sends each request on a context of its own, as a
// transport that reports no connection to httptrace, and fails.
type untracedTransport struct{ inner *http.Transport }

func (rt untracedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := rt.inner.RoundTrip(req.WithContext(context.Background()))
	if err == nil {
		resp.Body.Close()
	}
	return nil, errors.New("the connection broke")
}

// TestReplacedDefaultTransportSent: with no HTTPClient, the requests go
// through http.DefaultTransport, which a program may have replaced with
// one that reports no connection: a failure is then no proof that
// nothing was sent.
func TestReplacedDefaultTransportSent(t *testing.T) {
	var calls atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
	}))
	t.Cleanup(ts.Close)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	saved := http.DefaultTransport
	http.DefaultTransport = untracedTransport{tr}
	t.Cleanup(func() { http.DefaultTransport = saved })
	c := dialURL(t, ts.URL, Options{})
	callSentOnce(t, c, &calls)
}

// writeOnce is a connection whose writes after the first fail with
// nothing written, as one the server closed while it was idle.
type writeOnce struct {
	net.Conn
	writes atomic.Int32
}

func (w *writeOnce) Write(b []byte) (int, error) {
	if w.writes.Add(1) > 1 {
		return 0, errors.New("broken pipe")
	}
	return w.Conn.Write(b)
}

// TestStaleConnectionThenRefusedNotSent: a call that net/http wrote
// nothing of on a reused connection, then could not dial a new one for
// (a server restarting), did not run: not sent, though a connection was
// reported first.
func TestStaleConnectionThenRefusedNotSent(t *testing.T) {
	var calls atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), "tools/call") {
			calls.Add(1)
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(ts.Close)
	var dials atomic.Int32
	tr := &http.Transport{
		MaxConnsPerHost: 1, // the call waits for the notification's connection
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if dials.Add(1) > 1 {
				return nil, &net.OpError{Op: "dial", Net: network, Err: errors.New("connection refused")}
			}
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &writeOnce{Conn: c}, nil
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	c := dialURL(t, ts.URL, Options{HTTPClient: &http.Client{Transport: tr}})
	write(t, c, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	write(t, c, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge"}}`)
	if na := readNoAnswer(t, c); string(na.ID) != "2" || !na.NotSent {
		t.Fatalf("got %+v; want id 2 not sent", *na)
	}
	if n := calls.Load(); n != 0 || dials.Load() != 2 {
		t.Errorf("the server got the call %d times after %d dials; want none after 2", n, dials.Load())
	}
}

// TestCallKeyReplacesConfiguredKey: a call with an execution id sends
// that id as its only Idempotency-Key, not beside one configured.
func TestCallKeyReplacesConfiguredKey(t *testing.T) {
	got := make(chan []string, 1)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Values("Idempotency-Key")
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"jsonrpc":"2.0","id":2,"result":{"content":[]}}`)
	}))
	t.Cleanup(ts.Close)
	c, err := Dial(context.Background(), ts.URL, Options{Header: http.Header{"Idempotency-Key": {"configured"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	write(t, c, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge","_meta":{"mcp-idempotent/execution-id":"exe_1"}}}`)
	read(t, c)
	if v := <-got; len(v) != 1 || v[0] != `"exe_1"` {
		t.Errorf("the server got Idempotency-Key %q; want only the call's", v)
	}
}

// dialURL returns a Client of the server at url, closed when t ends.
func dialURL(t *testing.T, url string, opts Options) *Client {
	t.Helper()
	c, err := Dial(context.Background(), url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// callSentOnce writes a tools/call to c and checks that it is answered as
// sent and unanswered (its outcome unknown, never "not sent"), and that
// the server, which counts calls, got it once.
func callSentOnce(t *testing.T, c *Client, calls *atomic.Int32) {
	t.Helper()
	write(t, c, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge"}}`)
	if na := readNoAnswer(t, c); string(na.ID) != "2" || na.NotSent {
		t.Fatalf("got %+v; want id 2 sent and not answered", *na)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the server got the call %d times; want once", n)
	}
}
