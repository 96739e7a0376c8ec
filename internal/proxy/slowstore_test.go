package proxy

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

// stuckStore is a memory store whose reservations wait until release is
// closed, as a store behind an unreachable server does until its timeout;
// each says so on entered first, if it is set.
type stuckStore struct {
	record.Store
	release chan struct{}
	entered chan struct{}
}

func (s stuckStore) Reserve(ctx context.Context, r *record.Record, opts record.ReserveOptions) (*record.Record, bool, error) {
	if s.entered != nil {
		s.entered <- struct{}{}
	}
	<-s.release
	return s.Store.Reserve(ctx, r, opts)
}

// TestSlowStoreHoldsOnlyItsCalls: with a store that waits on I/O, a
// reservation that hangs holds up its own call, not the client's other
// requests; the call goes on once the store answers.
func TestSlowStoreHoldsOnlyItsCalls(t *testing.T) {
	store := stuckStore{Store: memstore.New(memstore.Options{}), release: make(chan struct{})}
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

// TestSessionEndWhileReserving: a call still waiting for a slow store to
// reserve it when the session ends (the proxy told to stop, or the
// client gone and the grace over) is told at once that it did not run,
// not left without an answer. The reservation, once the store makes it,
// is failed, and the call never goes upstream.
func TestSessionEndWhileReserving(t *testing.T) {
	for _, end := range []string{"told to stop", "client gone"} {
		t.Run(end, func(t *testing.T) {
			mem := memstore.New(memstore.Options{})
			store := stuckStore{Store: mem, release: make(chan struct{}), entered: make(chan struct{}, 1)}
			release := sync.OnceFunc(func() { close(store.release) })
			t.Cleanup(release) // before the rig's: a failed test must not hang
			in := intercept.New(intercept.Options{Store: store, Hasher: fingerprint.NewRandom(), StoreWaits: true})
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			// The grace cannot be what ends the wait when told to stop.
			grace := time.Hour
			if end == "client gone" {
				grace = 50 * time.Millisecond
			}
			r := newRigRunning(t, ctx, 0, Options{Interceptor: in, ShutdownGrace: grace})
			listCharge(t, r)
			r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":1}}}`)
			select {
			case <-store.entered:
			case <-time.After(10 * time.Second):
				t.Fatal("the call never asked the store for its reservation")
			}
			if end == "told to stop" {
				stop()
			} else {
				r.clientW.Close()
			}
			if got := r.client.next(t, "client"); !strings.Contains(got, `"id":1,"error"`) || !strings.Contains(got, "it did not run") {
				t.Fatalf("the call got %s; want an error saying it did not run", got)
			}
			r.wait(t)
			release()
			wait, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := in.Wait(wait); err != nil {
				t.Fatalf("the reservation was not seen through: %v", err)
			}
			recs := mem.Records()
			if len(recs) != 1 || recs[0].State != record.Failed {
				t.Fatalf("the store holds %d records (the first %+v); want the reservation, failed", len(recs), recs)
			}
			<-r.upstream.closed
			r.upstream.nothingMore(t, "the call was answered that it did not run")
		})
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

// TestShadowRetryAfterTheAnswerIsAReplay: in shadow mode the client has
// the upstream's answer before the proxy has recorded it, which a store
// that waits on I/O does after. A call the client makes once it has that
// answer counts as the replay normal mode, which records the answer
// before the client gets it, would have made, not as an attach.
func TestShadowRetryAfterTheAnswerIsAReplay(t *testing.T) {
	store := newSettleStuckStore()
	d := &decisions{counted: map[string]int{}, shown: map[string]int{}, settled: make(chan record.State, 8)}
	in := intercept.New(intercept.Options{Store: store, Hasher: fingerprint.NewRandom(), StoreWaits: true, Shadow: true, Observer: d})
	r := newRigWith(t, 0, in)
	closeGate := sync.OnceFunc(func() { close(store.gate) })
	t.Cleanup(closeGate) // before the rig's: a failed test must not hang
	listCharge(t, r)
	const call = `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":1}}}`
	r.client.send(t, fmt.Sprintf(call, 1))
	store.reservations(t, 1)
	r.upstream.answerCharged(t, r.upstream.next(t, "upstream"))
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":1,`) {
		t.Fatalf("the client got %s; want the answer to its call", got)
	}
	// The answer's write to the store hangs: the retry reads the record
	// still dispatched.
	r.client.send(t, fmt.Sprintf(call, 2))
	store.reservations(t, 1)
	r.upstream.answerCharged(t, r.upstream.next(t, "upstream"))
	r.client.next(t, "client")
	closeGate()
	d.decided(t, 2)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.shown["replayed"] != 1 || d.shown["attached"] != 0 {
		t.Errorf("shadow decisions %v; want the retry replayed", d.shown)
	}
}
