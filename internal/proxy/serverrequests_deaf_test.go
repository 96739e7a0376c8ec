package proxy

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

// TestDeafClientEndsServerRequests: a client that stops reading the
// proxy's output ends the session as one whose input ended: the
// upstream's request it has not answered (an elicitation within a call)
// gets an error at once, and so does one the upstream sends later, so
// the server answers the call and its outcome is recorded, rather than
// the call waiting out the grace and ending as outcome unknown.
func TestDeafClientEndsServerRequests(t *testing.T) {
	store := memstore.New(memstore.Options{})
	in := intercept.New(intercept.Options{Store: store, Hasher: fingerprint.NewRandom()})
	w := new(deafWriter)
	r := newRigWriting(t, context.Background(), 0, Options{Interceptor: in, ShutdownGrace: time.Minute}, func(c Conn) Conn { return c },
		func(pw io.WriteCloser) io.WriteCloser { w.WriteCloser = pw; return w }, nil)
	call := r.startCall(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{}}}`)
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"ask","method":"elicitation/create","params":{"message":"charge?","requestedSchema":{"type":"object"}}}`)
	r.client.next(t, "client")

	w.deaf.Store(true) // the client stops reading
	// A log line the proxy fails to write shows it the client has gone.
	r.upstream.send(t, `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}`)
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"id":"ask","error"`) || !strings.Contains(got, "stopped reading") {
		t.Fatalf("the upstream got %s; want its open request refused, saying the client stopped reading", got)
	}
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"later","method":"sampling/createMessage","params":{"messages":[],"maxTokens":1}}`)
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"id":"later","error"`) {
		t.Fatalf("the upstream got %s; want its later request refused", got)
	}
	r.upstream.answerCharged(t, call)
	if err := r.wait(t); !errors.Is(err, ErrClientStoppedReading) {
		t.Fatalf("Run = %v; want ErrClientStoppedReading", err)
	}
	recs, err := store.List(context.Background(), record.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].State != record.Completed {
		t.Errorf("the store holds %d records (%v); want the call completed, not delivered", len(recs), recs)
	}
}
