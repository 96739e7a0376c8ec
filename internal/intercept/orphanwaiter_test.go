package intercept

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

// TestWaiterOnAnOrphanFollowsOnUnknown: a call that waits on an execution
// whose process went away, and finds it unknown once its lease lapses, is
// the next call that meets that unknown outcome, so its tool's on_unknown
// decides what it gets (docs/stores.md): "retry" sends it again under the
// same execution id, "block" tells the caller the outcome is unknown.
// Before, the waiter was told unknown whatever the policy, and only a
// call made after that was sent again.
func TestWaiterOnAnOrphanFollowsOnUnknown(t *testing.T) {
	for _, tc := range []struct {
		on   policy.OnUnknown
		want string // what B's caller reads
		sent int32  // B's sends
	}{
		{policy.Retry, "charge #1", 1},
		{policy.Block, "Outcome unknown", 0},
	} {
		t.Run(string(tc.on), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := memstore.New(memstore.Options{})
				hasher := fingerprint.NewRandom()
				// Process A sends the call and goes away before any
				// answer: its upstream never answers, and its lease is
				// never renewed.
				gone := make(chan struct{})
				a := newHarness(func(ctx context.Context, _ int, _ json.RawMessage) (json.RawMessage, error) {
					<-gone
					return nil, context.Canceled
				})
				a.store, a.in = store, New(Options{Store: store, Hasher: hasher, Owner: "proxy-A", Lease: time.Second})
				b := newHarness(charged)
				b.store, b.in = store, New(Options{Store: store, Hasher: hasher, Owner: "proxy-B", Lease: time.Minute})
				a.pol.OnUnknown, b.pol.OnUnknown = tc.on, tc.on
				aCtx, aGone := context.WithCancel(t.Context())
				defer func() { close(gone); aGone(); synctest.Wait() }()
				a.call(aCtx, t, chargeCall)
				synctest.Wait()
				if rec := b.onlyRecord(t); rec.State != record.Dispatched || rec.Owner != "proxy-A" {
					t.Fatalf("A's execution is %s, owned by %q; want it dispatched by proxy-A", rec.State, rec.Owner)
				}
				// B's caller makes the same call while A's lease holds,
				// and waits on A's execution until it lapses.
				got := b.call(t.Context(), t, chargeCall).only(t)
				text := string(got.Result) + string(got.Error)
				if !strings.Contains(text, tc.want) || b.up.calls.Load() != tc.sent {
					t.Errorf("B's caller got %s after %d sends of B's; want %q after %d", text, b.up.calls.Load(), tc.want, tc.sent)
				}
			})
		})
	}
}
