package streamhttp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

// closingWriter is a ResponseWriter whose client closes its connection as
// soon as it has the whole body, as a client of Connection: close does:
// the request's context ends while the handler still runs.
type closingWriter struct {
	*httptest.ResponseRecorder
	cancel context.CancelFunc
}

func (w closingWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseRecorder.Write(b)
	w.cancel()
	return n, err
}

// An answer written whole as a JSON body is written, even if the client
// closes its connection the moment it has read it.
func TestJSONAnswerReadThenClosedIsWritten(t *testing.T) {
	s, _, _ := newTestServer(t, ServerOptions{JSONResponse: true})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	r := httptest.NewRequestWithContext(ctx, "POST", "/mcp", http.NoBody)
	w := closingWriter{httptest.NewRecorder(), cancel}
	written := false
	frames := [][]byte{[]byte(`{"jsonrpc":"2.0","id":1,"result":{}}`)}
	ok := s.writeJSON(w, r, frames, []func(){func() { written = true }}, 1, false)
	if !ok || !written {
		t.Fatalf("writeJSON = %v, written %v; want the answer the client read counted as written", ok, written)
	}
	if got := w.Body.String(); got != string(frames[0]) {
		t.Fatalf("body %q, want %q", got, frames[0])
	}
}

// An answer whose client went before it was written is not counted.
func TestJSONAnswerClientGoneIsNotWritten(t *testing.T) {
	s, _, _ := newTestServer(t, ServerOptions{JSONResponse: true})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	r := httptest.NewRequestWithContext(ctx, "POST", "/mcp", http.NoBody)
	written := false
	frames := [][]byte{[]byte(`{"jsonrpc":"2.0","id":1,"result":{}}`)}
	if s.writeJSON(httptest.NewRecorder(), r, frames, []func(){func() { written = true }}, 1, false) || written {
		t.Fatal("an answer written after its client went was counted as written")
	}
}

// An answer's event written on an SSE stream is written, even if the
// client closes its connection the moment it has read it.
func TestSSEAnswerReadThenClosedIsWritten(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	r := httptest.NewRequestWithContext(ctx, "POST", "/mcp", http.NoBody)
	written := false
	b := batch{buf: appendEvent(nil, "1-1", []byte(`{"jsonrpc":"2.0","id":1,"result":{}}`)), written: []func(){func() { written = true }}}
	if !b.send(closingWriter{httptest.NewRecorder(), cancel}, r) || !written {
		t.Fatal("the event the client read was not counted as written")
	}
}

// An event whose client went before it was written is not counted.
func TestSSEAnswerClientGoneIsNotWritten(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	r := httptest.NewRequestWithContext(ctx, "POST", "/mcp", http.NoBody)
	written := false
	b := batch{buf: appendEvent(nil, "1-1", []byte(`{"jsonrpc":"2.0","id":1,"result":{}}`)), written: []func(){func() { written = true }}}
	if b.send(httptest.NewRecorder(), r) || written {
		t.Fatal("an event written after its client went was counted as written")
	}
}
