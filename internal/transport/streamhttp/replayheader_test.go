package streamhttp

import (
	"context"
	"io"
	"log"
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
			c, err := Dial(context.Background(), ts.URL, Options{
				HTTPClient: &http.Client{Transport: tr},
				Header:     http.Header{name: {"k1"}},
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			write(t, c, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			write(t, c, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge"}}`)
			if na := readNoAnswer(t, c); string(na.ID) != "2" || na.NotSent {
				t.Fatalf("got %+v; want id 2 sent and not answered", *na)
			}
			if n := calls.Load(); n != 1 {
				t.Errorf("the server got the call %d times; want once", n)
			}
		})
	}
}
