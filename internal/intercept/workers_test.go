package intercept

import (
	"fmt"
	"runtime/metrics"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/workers"
)

// TestWorkersRunTheCallsOfAStoreThatWaits: with a store that waits on I/O,
// a call's work and its outcome's go on goroutines of their own, recorded
// or not (a read-only tool with a retry rule, whose account may be in the
// store); with Options.Workers, on workers kept from one call to the next,
// whose stacks a store's client grew already. Calls one after the other
// then start two goroutines fewer each (the scripted upstream starts one
// for each answer either way, and Wait one).
func TestWorkersRunTheCallsOfAStoreThatWaits(t *testing.T) {
	const n = 100
	for _, recorded := range []bool{true, false} {
		started := func(pooled bool) (made int64) {
			synctest.Test(t, func(t *testing.T) {
				var pool *workers.Pool
				if pooled {
					pool = workers.New(time.Minute)
				}
				h := newHarness(charged)
				if !recorded {
					h = busyReadOnly(0)
				}
				h.in = New(Options{Store: h.store, Hasher: fingerprint.NewRandom(), StoreWaits: true, Workers: pool})
				call := func(i int) {
					params := fmt.Sprintf(`{"name":"charge_card","arguments":{"card":"4242","amount":%d}}`, i)
					a := h.call
					if !recorded {
						a = h.callUnrecorded
					}
					if ans := a(t.Context(), t, params).only(t); ans.Error != nil {
						t.Fatalf("call %d: %s", i, ans.Error)
					}
					if err := h.in.Wait(t.Context()); err != nil {
						t.Fatal(err)
					}
					synctest.Wait() // the workers wait for the next
				}
				call(0)
				before := goroutinesCreated()
				for i := 1; i <= n; i++ {
					call(i)
				}
				made = int64(goroutinesCreated() - before)
				time.Sleep(2 * time.Minute) // the workers end, idle
			})
			return made
		}
		each, pooled := started(false), started(true)
		if each-pooled < 3*n/2 {
			t.Errorf("recorded=%v: %d calls one after the other started %d goroutines with workers, %d without; want about 2 fewer a call", recorded, n, pooled, each)
		}
	}
}

func goroutinesCreated() uint64 {
	m := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(m)
	return m[0].Value.Uint64()
}
