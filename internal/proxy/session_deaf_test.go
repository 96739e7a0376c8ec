package proxy

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

// deafWriter fails every write once deaf is set, as a pipe whose reader
// closed it does.
type deafWriter struct {
	io.WriteCloser
	deaf atomic.Bool
}

func (w *deafWriter) Write(p []byte) (int, error) {
	if w.deaf.Load() {
		return 0, syscall.EPIPE
	}
	return w.WriteCloser.Write(p)
}

// TestClientStopsReading: once an answer to the client cannot be
// written, the session takes no more calls from it, though it still
// writes: the call under way is recorded as completed, a later one is
// not reserved, and Run ends with ErrClientStoppedReading.
func TestClientStopsReading(t *testing.T) {
	store := memstore.New(memstore.Options{})
	in := intercept.New(intercept.Options{Store: store, Hasher: fingerprint.NewRandom()})
	w := new(deafWriter)
	r := newRigWriting(t, context.Background(), 0, Options{Interceptor: in}, func(c Conn) Conn { return c },
		func(pw io.WriteCloser) io.WriteCloser { w.WriteCloser = pw; return w }, nil)
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":100}}}`)
	r.upstream.next(t, "upstream") // the proxy's own tools/list
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[{"name":"charge_card","inputSchema":{"type":"object"}}]}}`)
	call := r.upstream.next(t, "upstream")

	w.deaf.Store(true) // the client stops reading
	r.upstream.answerCharged(t, call)
	if err := r.wait(t); !errors.Is(err, ErrClientStoppedReading) {
		t.Fatalf("Run = %v; want ErrClientStoppedReading", err)
	}
	// The client goes on writing; the proxy reads on until stdin closes.
	r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":200}}}`)
	// Read once the pump is done with the call before it.
	r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"x","progress":1}}`)
	recs, err := store.List(context.Background(), record.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].State != record.Completed {
		t.Errorf("the store holds %d records (%v); want the one call under way, completed and not delivered", len(recs), recs)
	}
}

// TestShadowClientStopsReading: in shadow mode too, an execution whose
// answer the client's transport did not take is recorded completed, not
// delivered, as in normal mode (TestClientStopsReading).
func TestShadowClientStopsReading(t *testing.T) {
	store := memstore.New(memstore.Options{})
	in := intercept.New(intercept.Options{Store: store, Hasher: fingerprint.NewRandom(), Shadow: true})
	w := new(deafWriter)
	r := newRigWriting(t, context.Background(), 0, Options{Interceptor: in}, func(c Conn) Conn { return c },
		func(pw io.WriteCloser) io.WriteCloser { w.WriteCloser = pw; return w }, nil)
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":100}}}`)
	r.upstream.next(t, "upstream") // the proxy's own tools/list
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[{"name":"charge_card","inputSchema":{"type":"object"}}]}}`)
	call := r.upstream.next(t, "upstream")

	w.deaf.Store(true) // the client stops reading
	r.upstream.answerCharged(t, call)
	if err := r.wait(t); !errors.Is(err, ErrClientStoppedReading) {
		t.Fatalf("Run = %v; want ErrClientStoppedReading", err)
	}
	in.Wait(context.Background())
	recs, err := store.List(context.Background(), record.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].State != record.Completed {
		t.Errorf("the store holds %d records (%v); want the one call, completed and not delivered", len(recs), recs)
	}
}

// deafSink is a sink that reports its writes failed, as a stdio Conn
// whose reader closed the pipe does, though it still keeps what it is
// given.
type deafSink struct{ sink }

var errDeaf = errors.New("broken pipe")

func (k *deafSink) WriteFailed() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

func (k *deafSink) WriteErr() error { return errDeaf }

// TestNoCallOnceTheClientStoppedReading: a tools/call that comes once a
// write to the client has failed is not run, nor reserved, whether or
// not Run has seen the failure yet: its answer could not be written.
func TestNoCallOnceTheClientStoppedReading(t *testing.T) {
	store := memstore.New(memstore.Options{})
	in := intercept.New(intercept.Options{Store: store, Hasher: fingerprint.NewRandom()})
	client, upstream := &deafSink{}, &sink{}
	s := New(client, upstream, Options{Interceptor: in, Actor: "a", Scope: "s", UpstreamID: "u"})
	ctx := context.Background()
	s.fromClient(ctx, []byte(`{"jsonrpc":"2.0","id":"l","method":"tools/list","params":{}}`))
	s.fromUpstream(s.up, []byte(`{"jsonrpc":"2.0","id":"l","result":{"tools":[{"name":"charge_card","inputSchema":{"type":"object"}}]}}`))
	client.take()
	upstream.take()

	s.fromClient(ctx, []byte(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":200}}}`))
	if sent := upstream.take(); sent != nil {
		t.Errorf("sent upstream: %s; want nothing", sent)
	}
	if got := client.take(); !strings.Contains(string(got), `"id":2`) || !strings.Contains(string(got), "not run") {
		t.Errorf("the client was written %s; want call 2 answered that it did not run", got)
	}
	if recs, err := store.List(ctx, record.Filter{}); err != nil || len(recs) != 0 {
		t.Errorf("the store holds %v (%v); want nothing reserved", recs, err)
	}
}
