package proxy

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

// stuckStore is a memory store whose reservations wait until release is
// closed, as a store behind an unreachable server does until its timeout.
type stuckStore struct {
	record.Store
	release chan struct{}
}

func (s stuckStore) Reserve(ctx context.Context, r *record.Record, opts record.ReserveOptions) (*record.Record, bool, error) {
	<-s.release
	return s.Store.Reserve(ctx, r, opts)
}

// TestSlowStoreHoldsOnlyItsCalls: with a store that waits on I/O, a
// reservation that hangs holds up its own call, not the client's other
// requests; the call goes on once the store answers.
func TestSlowStoreHoldsOnlyItsCalls(t *testing.T) {
	store := stuckStore{memstore.New(memstore.Options{}), make(chan struct{})}
	in := intercept.New(intercept.Options{Store: store, Hasher: fingerprint.NewRandom(), StoreWaits: true})
	r := newRigWith(t, 0, in)
	var once sync.Once
	release := func() { once.Do(func() { close(store.release) }) }
	t.Cleanup(release) // before the rig's: a failed test must not hang
	listCharge(t, r)
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":1}}}`)
	// The write returns once the proxy reads it (the pipe holds nothing).
	go r.client.conn.WriteFrame([]byte(`{"jsonrpc":"2.0","id":2,"method":"ping"}`))
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"method":"ping"`) {
		t.Fatalf("while the reservation hangs, the upstream got %s; want the ping", got)
	}
	release()
	got := r.upstream.next(t, "upstream")
	if !strings.Contains(got, `"method":"tools/call"`) {
		t.Fatalf("once the store answers, the upstream got %s; want the call", got)
	}
	r.upstream.answerCharged(t, got)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":1,`) || !strings.Contains(got, "charged") {
		t.Fatalf("the caller got %s; want the answer", got)
	}
}

// outcomeStuckStore is a memory store whose writes of an outcome each
// wait for a value on gate, or for gate to be closed.
type outcomeStuckStore struct {
	record.Store
	gate chan struct{}
}

func (s outcomeStuckStore) Update(ctx context.Context, id string, c record.Change) (*record.Record, error) {
	if c.To == record.Completed {
		<-s.gate
	}
	return s.Store.Update(ctx, id, c)
}

// TestSlowOutcomeHoldsOnlyItsCall: with a store that waits on I/O, an
// outcome whose write hangs holds up its own caller, not the upstream's
// other answers, which the session reads on one goroutine; the caller gets
// its answer once the store answers.
func TestSlowOutcomeHoldsOnlyItsCall(t *testing.T) {
	store := outcomeStuckStore{memstore.New(memstore.Options{}), make(chan struct{})}
	in := intercept.New(intercept.Options{Store: store, Hasher: fingerprint.NewRandom(), StoreWaits: true})
	r := newRigWith(t, 0, in)
	t.Cleanup(func() { close(store.gate) }) // before the rig's: a failed test must not hang
	listCharge(t, r)
	// An answer that comes before the send that asked for it returns is
	// settled by the sender; rounds make it likely that at least one
	// comes after, as most do in use.
	for i := range 10 {
		r.client.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":%d}}}`, i, i))
		r.upstream.answerCharged(t, r.upstream.next(t, "upstream"))
		// The call's outcome is being written; a ping goes through
		// meanwhile.
		r.client.send(t, `{"jsonrpc":"2.0","id":"p","method":"ping"}`)
		if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"method":"ping"`) {
			t.Fatalf("the upstream got %s; want the ping", got)
		}
		// The write returns once the proxy reads it (the pipe holds
		// nothing).
		go r.upstream.conn.WriteFrame([]byte(`{"jsonrpc":"2.0","id":"p","result":{}}`))
		if got := r.client.next(t, "client"); !strings.Contains(got, `"id":"p","result"`) {
			t.Fatalf("while the outcome's write hangs, the client got %s; want the ping's answer", got)
		}
		store.gate <- struct{}{}
		if got := r.client.next(t, "client"); !strings.Contains(got, fmt.Sprintf(`"id":%d,`, i)) || !strings.Contains(got, "charged") {
			t.Fatalf("the caller got %s; want the answer", got)
		}
	}
}
