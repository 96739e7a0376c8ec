package intercept

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
)

// withAccount gives h an interceptor whose retry rule spends account a.
func (h *harness) withAccount(a policy.Account) {
	h.in = New(Options{Store: h.store, Hasher: fingerprint.NewRandom(), Accounts: map[string]policy.Account{a.Name: a}})
	if h.pol.Retry == nil {
		h.pol.Retry = &policy.RetryRule{MaxAttempts: 1, Base: time.Millisecond, Cap: time.Millisecond}
	}
	h.pol.Retry.Account = a.Name
}

func charge(n int) string {
	return fmt.Sprintf(`{"name":"charge_card","arguments":{"amount":%d}}`, n)
}

func TestAccountAllowancePacesCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var at []time.Duration
		start := time.Now()
		h := newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
			mu.Lock()
			at = append(at, time.Since(start))
			mu.Unlock()
			return charged(ctx, n, p)
		})
		h.withAccount(policy.Account{Name: "bank", Rate: 1, Burst: 1})
		var got []*answers
		for i := range 3 {
			got = append(got, h.call(t.Context(), t, charge(i)))
		}
		for _, a := range got {
			a.only(t)
		}
		if len(at) != 3 || at[0] != 0 || at[1] < time.Second || at[2] < 2*time.Second {
			t.Fatalf("three calls reached the upstream at %v; want 0s, 1s, 2s at 1 call a second", at)
		}
	})
}

func TestAccountWithoutRoomBeforeTheDeadlineRefuses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(charged)
		h.pol.AttachWindow = 500 * time.Millisecond
		h.withAccount(policy.Account{Name: "bank", Rate: 1.0 / 60, Burst: 1})
		h.call(t.Context(), t, charge(1)).only(t)
		a := h.call(t.Context(), t, charge(2)).only(t)
		if e := jsonrpc.DecodeError(a.Error); a.Error == nil || !strings.Contains(e.Message, "account bank has no room") || !strings.Contains(e.Message, "nothing ran") {
			t.Fatalf("a call with no room before its deadline got %+v; want an error saying the account has no room", a)
		}
		if n := h.up.calls.Load(); n != 1 {
			t.Fatalf("upstream saw %d calls; want 1", n)
		}
	})
}

func TestRetryBudgetStopsRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(busyThen(100))
		h.pol.Retry = retryRule(true)
		h.withAccount(policy.Account{Name: "vendor", Rate: 100, Burst: 100, MaxTokens: 2, TokenRatio: 0.1})
		v := view(t, h.call(t.Context(), t, chargeCall).only(t))
		last := v.Content[len(v.Content)-1].Text
		if !strings.Contains(last, "retry budget of account vendor is exhausted") || !strings.Contains(v.Content[0].Text, "429") {
			t.Fatalf("got %+v; want the last 429 with a note that the retry budget is exhausted", v)
		}
		if n := h.up.calls.Load(); n != 1 {
			t.Fatalf("upstream saw %d calls; the empty budget allows no retry", n)
		}
	})
}

func TestAccountConcurrencyCap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var inFlight, most atomic.Int32
		release := make(chan struct{})
		h := newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
			now := inFlight.Add(1)
			for old := most.Load(); now > old && !most.CompareAndSwap(old, now); old = most.Load() {
			}
			<-release
			inFlight.Add(-1)
			return charged(ctx, n, p)
		})
		h.withAccount(policy.Account{Name: "bank", Rate: 100, Burst: 100, MaxConcurrency: 1})
		var got []*answers
		for i := range 3 {
			got = append(got, h.call(t.Context(), t, charge(i)))
		}
		synctest.Wait()
		close(release)
		for _, a := range got {
			a.only(t)
		}
		if m := most.Load(); m != 1 {
			t.Fatalf("%d calls were in flight at once; the account allows 1", m)
		}
	})
}
