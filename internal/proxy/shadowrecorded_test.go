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

// settleStuckStore is a memory store whose writes of a settled outcome
// wait for gate to be closed, and which tells reserved of each
// reservation it made or refused.
type settleStuckStore struct {
	record.Store
	gate     chan struct{}
	reserved chan struct{}
}

func newSettleStuckStore() settleStuckStore {
	return settleStuckStore{memstore.New(memstore.Options{}), make(chan struct{}), make(chan struct{}, 8)}
}

func (s settleStuckStore) Reserve(ctx context.Context, r *record.Record, opts record.ReserveOptions) (*record.Record, bool, error) {
	defer func() { s.reserved <- struct{}{} }()
	return s.Store.Reserve(ctx, r, opts)
}

// reservations waits for n reservations of s.
func (s settleStuckStore) reservations(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-s.reserved:
		case <-time.After(10 * time.Second):
			t.Fatal("a call was never reserved")
		}
	}
}

// decided waits for d to count n decisions.
func (d *decisions) decided(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); d.total() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("decisions %v; want %d", d.shown, n)
		}
	}
}

func (s settleStuckStore) Update(ctx context.Context, id string, c record.Change) (*record.Record, error) {
	if c.To.Settled() && c.To != record.Delivered {
		<-s.gate
	}
	return s.Store.Update(ctx, id, c)
}

// TestShadowRetryAfterTheAnswerRunsAnew: in shadow mode the client has
// the upstream's answer before a store that waits on I/O has recorded
// it. A call made once the client has it is judged on the record as it
// settles, as normal mode, which records the answer first, would judge
// it: an idempotent tool's completed execution, or any execution that
// failed, is run again (new), not replayed.
func TestShadowRetryAfterTheAnswerRunsAnew(t *testing.T) {
	for _, tc := range []struct {
		name, annotations, answer string
	}{
		{"idempotent completed", `{"idempotentHint":true}`, `"result":{"content":[{"type":"text","text":"charged"}]}`},
		{"failed", `{}`, `"error":{"code":-32603,"message":"declined"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := newSettleStuckStore()
			d := &decisions{counted: map[string]int{}, shown: map[string]int{}, settled: make(chan record.State, 8)}
			in := intercept.New(intercept.Options{Store: store, Hasher: fingerprint.NewRandom(), StoreWaits: true, Shadow: true, Observer: d})
			r := newRigWith(t, 0, in)
			closeGate := sync.OnceFunc(func() { close(store.gate) })
			t.Cleanup(closeGate) // before the rig's: a failed test must not hang
			r.client.send(t, `{"jsonrpc":"2.0","id":"l","method":"tools/list"}`)
			r.upstream.next(t, "upstream")
			r.upstream.send(t, `{"jsonrpc":"2.0","id":"l","result":{"tools":[{"name":"charge_card","inputSchema":{"type":"object"},"annotations":`+tc.annotations+`}]}}`)
			r.client.next(t, "client")
			const call = `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":1}}}`
			for id := 1; id <= 2; id++ {
				r.client.send(t, fmt.Sprintf(call, id))
				// The first answer's write to the store hangs: the
				// retry reads the record still dispatched.
				store.reservations(t, 1)
				r.upstream.next(t, "upstream")
				r.upstream.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,%s}`, id, tc.answer))
				if got := r.client.next(t, "client"); !strings.Contains(got, fmt.Sprintf(`"id":%d,`, id)) {
					t.Fatalf("the client got %s; want the answer to its call %d", got, id)
				}
			}
			closeGate()
			d.decided(t, 2)
			d.mu.Lock()
			defer d.mu.Unlock()
			if d.shown["new"] != 2 || d.shown["replayed"] != 0 {
				t.Errorf("shadow decisions %v; want the retry new, as in normal mode", d.shown)
			}
		})
	}
}
