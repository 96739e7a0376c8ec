package streamhttp

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// limitTestMax is the MaxMessage of the tests in this file.
const limitTestMax = 1000

// dialBody dials a server that answers every POST with body under the
// Content-Type ct, with a Client whose MaxMessage is max, if given, else
// limitTestMax.
func dialBody(t *testing.T, ct, body string, max ...int) *Client {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", ct)
		io.WriteString(w, body)
	}))
	t.Cleanup(ts.Close)
	opts := Options{MaxMessage: limitTestMax}
	if len(max) > 0 {
		opts.MaxMessage = max[0]
	}
	c, err := Dial(context.Background(), ts.URL, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// answerOfSize is an answer to the request with id 2 of n bytes.
func answerOfSize(n int) string {
	const head, tail = `{"jsonrpc":"2.0","id":2,"result":{"text":"`, `"}}`
	return head + strings.Repeat("x", n-len(head)-len(tail)) + tail
}

// TestAnswerAtTheLimit: the limit bounds the message, so an answer of
// exactly MaxMessage bytes comes through in an event stream as in a JSON
// body: the "data: " before it in its event is not counted.
func TestAnswerAtTheLimit(t *testing.T) {
	answer := answerOfSize(limitTestMax)
	// Two data lines are one message, joined with a newline.
	short := answerOfSize(limitTestMax - 1)
	i := strings.Index(short, `"result"`)
	for _, tc := range []struct{ name, ct, body string }{
		{"json", "application/json", answer},
		{"sse", "text/event-stream", "data: " + answer + "\n\n"},
		{"sse without a space", "text/event-stream", "data:" + answer + "\n\n"},
		{"sse over two lines", "text/event-stream", "data: " + short[:i] + "\ndata: " + short[i:] + "\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialBody(t, tc.ct, tc.body)
			write(t, c, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo"}}`)
			if m := read(t, c); string(m.ID) != "2" || m.Result == nil {
				t.Errorf("got %.80s; want the answer", m.Raw)
			}
		})
	}
}

// TestLongFieldKeepsItsEvent: a line of an event other than data over
// the limit is dropped, not the event: the answer in its data reaches
// its caller at once.
func TestLongFieldKeepsItsEvent(t *testing.T) {
	long := strings.Repeat("x", 2*limitTestMax)
	answer := `{"jsonrpc":"2.0","id":2,"result":{}}`
	for _, tc := range []struct{ name, body string }{
		{"event type", "event: " + long + "\ndata: " + answer + "\n\n"},
		{"event type after the data", "data: " + answer + "\nevent: " + long + "\n\n"},
		{"id", "id: " + long + "\ndata: " + answer + "\n\n"},
		{"retry", "retry: " + long + "\ndata: " + answer + "\n\n"},
		{"comment", ":" + long + "\ndata: " + answer + "\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialBody(t, "text/event-stream", tc.body)
			write(t, c, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo"}}`)
			if m := read(t, c); string(m.ID) != "2" || m.Result == nil {
				t.Errorf("got %s; want the answer", m.Raw)
			}
		})
	}
}

// TestDroppedAnswerStatus: an answer over the limit leaves its request
// answered with the HTTP status that came with it, in an event stream as
// in a JSON body, whether its id comes before the large result or after.
func TestDroppedAnswerStatus(t *testing.T) {
	over := answerOfSize(limitTestMax + 1)
	late := `{"jsonrpc":"2.0","result":{"text":"` + strings.Repeat("x", 2*headSize) + `"},"id":2}`
	for _, tc := range []struct{ name, ct, body string }{
		{"json", "application/json", over},
		{"json, id after", "application/json", late},
		{"sse", "text/event-stream", "data: " + over + "\n\n"},
		{"sse, id after", "text/event-stream", "data: " + late + "\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialBody(t, tc.ct, tc.body)
			write(t, c, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo"}}`)
			na := readNoAnswer(t, c)
			if want := tooLarge(limitTestMax); string(na.ID) != "2" || !strings.Contains(na.Reason, want) || na.Status != http.StatusOK {
				t.Errorf("got %+v; want HTTP 200 and a reason saying %q", *na, want)
			}
		})
	}
}

// TestCancelledCallToldOfDroppedAnswer: an answer over the limit that
// came to a stateless request cancelled meanwhile is the server's own
// answer, not the end of the stream that the cancellation closed: the
// request is told of it, from a JSON body as from an event stream, so
// that a record kept for it learns that its outcome was not observed.
func TestCancelledCallToldOfDroppedAnswer(t *testing.T) {
	over := answerOfSize(limitTestMax + 1)
	for _, tc := range []struct{ name, ct, body string }{
		{"json", "application/json", over},
		{"sse", "text/event-stream", "data: " + over + "\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialBody(t, tc.ct, "") // its server is not asked
			id := json.RawMessage("2")
			// The body came whole, and then the client cancelled.
			s := sent{ids: []json.RawMessage{id}, stateless: true, call: &statelessCall{method: "tools/call", cancel: func() {}, cancelled: true}}
			resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {tc.ct}}, Body: io.NopCloser(strings.NewReader(tc.body))}
			c.relayBody(resp, s, map[string]json.RawMessage{string(jsonrpc.IDKey(id)): id})
			c.expire() // ReadFrame returns what is queued, then no more
			na := readNoAnswer(t, c)
			if want := tooLarge(limitTestMax); string(na.ID) != "2" || !strings.Contains(na.Reason, want) {
				t.Errorf("got %+v; want a reason saying %q", *na, want)
			}
		})
	}
}

// TestAnswerUnderAnUnboundedLimit: a MaxMessage of math.MaxInt, no
// bound at all, lets an answer through in a JSON body as in an event
// stream, rather than read no byte of the body.
func TestAnswerUnderAnUnboundedLimit(t *testing.T) {
	answer := `{"jsonrpc":"2.0","id":2,"result":{}}`
	for _, tc := range []struct{ name, ct, body string }{
		{"json", "application/json", answer},
		{"sse", "text/event-stream", "data: " + answer + "\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialBody(t, tc.ct, tc.body, math.MaxInt)
			write(t, c, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo"}}`)
			if m := read(t, c); string(m.ID) != "2" || m.Result == nil {
				t.Errorf("got %s; want the answer", m.Raw)
			}
		})
	}
}
