package intercept

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

// TestUnsentAttemptIsNotTimed: a send that never left (the write failed
// before a byte went) got no answer to time: the upstream's latency
// holds the one send that went, after its 250ms, not a second of none.
func TestUnsentAttemptIsNotTimed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &countingObserver{n: map[record.State]int{}}
		h := newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
			if n == 1 {
				return nil, &retry.NotSentError{Err: errors.New("broken pipe")}
			}
			time.Sleep(250 * time.Millisecond)
			return charged(ctx, n, p)
		})
		h.pol.Retry = retryRule(false)
		h.in = New(Options{Store: h.store, Hasher: fingerprint.NewRandom(), Observer: obs})
		if v := view(t, h.call(t.Context(), t, chargeCall).only(t)); v.Content[0].Text != "charge #2" {
			t.Fatalf("got %+v; want the second send's result", v)
		}
		h.in.Wait(t.Context())
		obs.mu.Lock()
		defer obs.mu.Unlock()
		if len(obs.retries) != 1 {
			t.Fatalf("observed %d retries; want 1", len(obs.retries))
		}
		if len(obs.upstream) != 1 || obs.upstream[0] != 250*time.Millisecond {
			t.Fatalf("observed upstream times %v; want one of 250ms", obs.upstream)
		}
	})
}

// TestLostAttemptIsTimed: a send whose answer never came (the upstream
// went away after 250ms) is observed, at the time the proxy learned so,
// as docs/operations.md says: a hung or dying upstream shows in the
// latency, not as fewer sends.
func TestLostAttemptIsTimed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &countingObserver{n: map[record.State]int{}}
		h := newHarness(func(context.Context, int, json.RawMessage) (json.RawMessage, error) {
			time.Sleep(250 * time.Millisecond)
			return nil, errors.New("the upstream exited before answering")
		})
		h.in = New(Options{Store: h.store, Hasher: fingerprint.NewRandom(), Observer: obs})
		h.call(t.Context(), t, chargeCall).only(t)
		h.in.Wait(t.Context())
		obs.mu.Lock()
		defer obs.mu.Unlock()
		if obs.n[record.Unknown] != 1 {
			t.Fatalf("observed %v; want one move to unknown", obs.n)
		}
		if len(obs.upstream) != 1 || obs.upstream[0] != 250*time.Millisecond {
			t.Fatalf("observed upstream times %v; want one of 250ms", obs.upstream)
		}
	})
}
