package intercept

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

// withAccount gives h an interceptor whose retry rule spends account a.
func (h *harness) withAccount(a policy.Account) {
	h.in = New(Options{Store: h.store, Hasher: fingerprint.NewRandom(), Accounts: map[string]policy.Account{a.Name: a}})
	if h.pol.Retry == nil {
		h.pol.Retry = &policy.RetryRule{MaxAttempts: 1, Base: time.Millisecond, Cap: time.Millisecond}
	}
	h.pol.Retry.Account = a.Name
}

// timedHarness is a harness whose upstream charges, and arrivals tells
// when each call reached it, from now.
func timedHarness() (h *harness, arrivals func() []time.Duration) {
	var mu sync.Mutex
	var at []time.Duration
	start := time.Now()
	h = newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
		mu.Lock()
		at = append(at, time.Since(start))
		mu.Unlock()
		return charged(ctx, n, p)
	})
	return h, func() []time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(at)
	}
}

func charge(n int) string {
	return fmt.Sprintf(`{"name":"charge_card","arguments":{"amount":%d}}`, n)
}

func TestAccountAllowancePacesCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, arrivals := timedHarness()
		h.withAccount(policy.Account{Name: "bank", Rate: 1, Burst: 1})
		var got []*answers
		for i := range 3 {
			got = append(got, h.call(t.Context(), t, charge(i)))
		}
		for _, a := range got {
			a.only(t)
		}
		if at := arrivals(); len(at) != 3 || at[0] != 0 || at[1] < time.Second || at[2] < 2*time.Second {
			t.Fatalf("three calls reached the upstream at %v; want 0s, 1s, 2s at 1 call a second", arrivals())
		}
	})
}

func TestAccountWithoutRoomBeforeTheDeadlineRefuses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(charged)
		h.pol.Retry = &policy.RetryRule{MaxAttempts: 1, Deadline: 500 * time.Millisecond}
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

// TestAccountWithoutRoomAfterApprovalSaysItIsAskedAgain: an approved
// execution the account had no room for failed unsent, so a call again is
// a new execution, asked about: the error must not promise it just runs.
func TestAccountWithoutRoomAfterApprovalSaysItIsAskedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := approving(policy.ApprovalEach, policy.ApproverClient)
		h.pol.Retry = &policy.RetryRule{MaxAttempts: 1, Deadline: 500 * time.Millisecond}
		h.withAccount(policy.Account{Name: "bank", Rate: 1.0 / 60, Burst: 1})
		first := newAsker(elicited("accept", ""))
		h.askingCall(t, first, "session:1", charge(1))
		first.only(t)
		second := newAsker(elicited("accept", ""))
		h.askingCall(t, second, "session:1", charge(2))
		e := jsonrpc.DecodeError(second.only(t).Error)
		if e == nil || !strings.Contains(e.Message, "account bank has no room") || !strings.Contains(e.Message, "calling again later runs it once approved") {
			t.Fatalf("an approved call with no room got %v; want an error saying a call again is asked about", e)
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

// TestUnknownOutcomeSaysWhatStoppedItsRetry: an idempotent tool's 503,
// which the rule would send again, ends unknown when the retry budget or
// the deadline stops the retry; the caller, told the outcome is unknown,
// is told what stopped it too.
func TestUnknownOutcomeSaysWhatStoppedItsRetry(t *testing.T) {
	for _, tt := range []struct {
		name       string
		retryAfter string
		budget     float64
		want       string
	}{
		{"the retry budget", "", 2, "the retry budget of account vendor is exhausted"},
		{"the deadline", "120", 10, "would pass the call's deadline"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(func(context.Context, int, json.RawMessage) (json.RawMessage, error) {
					return nil, httpError(http.StatusServiceUnavailable, tt.retryAfter)
				})
				h.pol = policy.FromAnnotations(&mcp.Annotations{IdempotentHint: ptr(true)})
				h.pol.Retry = retryRule(false)
				h.withAccount(policy.Account{Name: "vendor", Rate: 100, Burst: 100, MaxTokens: tt.budget, TokenRatio: 0.1})
				v := view(t, h.call(t.Context(), t, chargeCall).only(t))
				if text := v.Content[0].Text; !strings.HasPrefix(text, "Outcome unknown:") || !strings.Contains(text, "HTTP 503") || !strings.Contains(text, tt.want) {
					t.Fatalf("got %q; want outcome unknown after the 503, saying %q", text, tt.want)
				}
				if n := h.up.calls.Load(); n != 1 {
					t.Fatalf("upstream saw %d calls; want 1", n)
				}
			})
		})
	}
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

// sharedAllowances is an Allowances kept in memory, shared by every
// Interceptor given it, as a store shares it between processes.
type sharedAllowances struct {
	mu   sync.Mutex
	full map[string]time.Time // protected by mu
	err  error                // what every call fails with, if set
}

func (s *sharedAllowances) TakeAllowance(_ context.Context, account string, a retry.Allowance, now time.Time) (bool, time.Duration, error) {
	if s.err != nil {
		return false, 0, s.err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	next, ok, wait := a.TakeAt(s.full[account], now)
	s.full[account] = next
	return ok, wait, nil
}

func (s *sharedAllowances) AllowanceTokens(_ context.Context, account string, a retry.Allowance, now time.Time) (float64, error) {
	if s.err != nil {
		return 0, s.err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return a.TokensAt(s.full[account], now), nil
}

// withSharedAccount is withAccount for an Interceptor whose allowances are
// shared.
func (h *harness) withSharedAccount(a policy.Account, shared Allowances) {
	h.withAccount(a)
	h.in = New(Options{Store: h.store, Hasher: fingerprint.NewRandom(), Accounts: map[string]policy.Account{a.Name: a}, Allowances: shared})
}

func TestSharedAllowanceIsOneAcrossProcesses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared := &sharedAllowances{full: map[string]time.Time{}}
		bank := policy.Account{Name: "bank", Rate: 1.0 / 60, Burst: 2}
		// Two proxy processes, each with its own store and upstream.
		p1, p2 := newHarness(charged), newHarness(charged)
		for _, h := range []*harness{p1, p2} {
			h.pol.Retry = &policy.RetryRule{MaxAttempts: 1, Deadline: time.Second}
			h.withSharedAccount(bank, shared)
		}
		p1.call(t.Context(), t, charge(1)).only(t)
		p2.call(t.Context(), t, charge(2)).only(t)
		a := p1.call(t.Context(), t, charge(3)).only(t)
		if e := jsonrpc.DecodeError(a.Error); a.Error == nil || !strings.Contains(e.Message, "account bank has no room") {
			t.Fatalf("the third call got %+v; the two processes share a burst of 2", a)
		}
		if n := p1.up.calls.Load() + p2.up.calls.Load(); n != 2 {
			t.Fatalf("the upstreams saw %d calls; want 2", n)
		}
		for i, h := range []*harness{p1, p2} {
			if l := h.in.AccountLevels(); len(l) != 1 || l[0].Tokens != 0 {
				t.Fatalf("process %d reports levels %+v; want the shared allowance, empty", i+1, l)
			}
		}
	})
}

func TestSharedAllowanceUnreachableFailsClosed(t *testing.T) {
	h := newHarness(charged)
	shared := &sharedAllowances{err: errors.New("dial tcp 127.0.0.1:6379: connection refused")}
	h.withSharedAccount(policy.Account{Name: "bank", Rate: 1, Burst: 1}, shared)
	a := h.call(t.Context(), t, chargeCall).only(t)
	e := jsonrpc.DecodeError(a.Error)
	if a.Error == nil || e.Code != jsonrpc.CodeInternalError ||
		!strings.Contains(e.Message, "account bank's allowance could not be read, so the proxy fails closed") ||
		!strings.Contains(e.Message, "connection refused") || !strings.Contains(e.Message, "nothing ran") {
		t.Fatalf("got %+v; want an error saying the allowance could not be read and nothing ran", a)
	}
	if n := h.up.calls.Load(); n != 0 {
		t.Fatalf("the upstream saw %d calls; want none", n)
	}
	h.in.Wait(t.Context())
	if rec := h.onlyRecord(t); rec.State != record.Failed {
		t.Fatalf("record %s; want failed, so that the next call runs", rec.State)
	}
	if l := h.in.AccountLevels(); len(l) != 1 || !math.IsNaN(l[0].Tokens) {
		t.Fatalf("levels %+v; want NaN tokens when the store cannot say", l)
	}
}

// TestSlotWaitEndsAtTheDeadline: a call waiting for a slot under an
// account's concurrency cap is refused at its deadline, not left waiting
// for as long as the calls ahead of it take; nothing of it runs.
func TestSlotWaitEndsAtTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, release := newHeldHarness()
		h.withAccount(policy.Account{Name: "bank", Rate: 100, Burst: 100, MaxConcurrency: 1})
		first := h.call(t.Context(), t, charge(1))
		start := time.Now()
		second := h.call(t.Context(), t, withDeadline(charge(2), 100))
		a := second.only(t)
		if e := jsonrpc.DecodeError(a.Error); a.Error == nil || !strings.Contains(e.Message, "as many calls in flight as it allows") {
			t.Fatalf("the call waiting for a slot got %s %s; want refused at its deadline", a.Result, a.Error)
		}
		if waited := time.Since(start); waited != 100*time.Millisecond {
			t.Fatalf("refused after %v; want at the 100ms deadline", waited)
		}
		close(release)
		first.only(t)
		h.in.Wait(t.Context())
		if n := h.up.calls.Load(); n != 1 {
			t.Fatalf("the upstream saw %d calls; want 1", n)
		}
	})
}

// TestSlotWaitTakesNoRoom: a call refused because the account's
// concurrency cap stayed full until its deadline sent nothing, so it
// spends none of the allowance: the next call, once a slot is free,
// finds the room the refused one would have taken.
func TestSlotWaitTakesNoRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, release := newHeldHarness()
		h.pol.Retry = &policy.RetryRule{MaxAttempts: 1, Deadline: time.Second}
		h.withAccount(policy.Account{Name: "bank", Rate: 1.0 / 60, Burst: 2, MaxConcurrency: 1})
		first := h.call(t.Context(), t, charge(1))
		if a := h.call(t.Context(), t, charge(2)).only(t); a.Error == nil {
			t.Fatalf("the call waiting for a slot got %s; want refused at its deadline", a.Result)
		}
		close(release)
		first.only(t)
		a := h.call(t.Context(), t, charge(3)).only(t)
		if e := jsonrpc.DecodeError(a.Error); a.Error != nil {
			t.Fatalf("the third call got %q; want it sent: one send in the minute leaves room for another under a burst of 2", e.Message)
		}
		h.sentOnly(t, 2)
	})
}

// TestSessionEndWhileWaitingForTheAccount: a call waiting for its
// account's room when its session ends is not sent later, for no one: the
// caller is told it was not sent, and the record says so.
func TestSessionEndWhileWaitingForTheAccount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(charged)
		h.pol.Retry = &policy.RetryRule{MaxAttempts: 1, Deadline: 5 * time.Minute}
		h.withAccount(policy.Account{Name: "bank", Rate: 1.0 / 60, Burst: 1})
		h.call(t.Context(), t, charge(1)).only(t)
		ctx := newEndable(t.Context())
		a := h.call(ctx, t, charge(2))
		synctest.Wait() // waiting a minute for room
		ctx.end(ErrSessionEnded)
		ans := a.only(t)
		if e := jsonrpc.DecodeError(ans.Error); ans.Error == nil || !strings.Contains(e.Message, "the session ended while it waited for account bank") || !strings.Contains(e.Message, "was not sent") {
			t.Fatalf("got %+v; want an error saying it was not sent", ans)
		}
		h.sentOnly(t, 1)
	})
}

// TestSessionEndDuringABackoff: a call waiting to be sent again when its
// session ends gets its last answer at once, with why it was not retried.
func TestSessionEndDuringABackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(busyThen(100))
		h.pol.Retry = retryRule(true)
		h.pol.Retry.Base, h.pol.Retry.Cap = time.Minute, time.Minute
		ctx := newEndable(t.Context())
		a := h.call(ctx, t, chargeCall)
		synctest.Wait() // the first answer was transient: a backoff of up to a minute
		ctx.end(ErrSessionEnded)
		v := view(t, a.only(t))
		if last := v.Content[len(v.Content)-1].Text; !strings.Contains(v.Content[0].Text, "429") || !strings.Contains(last, "not retried: the session ended during the backoff") {
			t.Fatalf("got %+v; want the last 429 with why it was not retried", v)
		}
		if n := h.up.calls.Load(); n != 1 {
			t.Fatalf("upstream saw %d calls; want 1", n)
		}
	})
}

// TestLeftCallTakesNoRoom: a read-only call whose caller left while it
// waited for the account's room takes none of it when the room comes: the
// next call finds it there.
func TestLeftCallTakesNoRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, arrivals := timedHarness()
		h.pol.Retry = &policy.RetryRule{MaxAttempts: 1, Deadline: time.Minute}
		h.withAccount(policy.Account{Name: "vendor", Rate: 1.0 / 3, Burst: 1})
		h.readOnly()
		h.callUnrecorded(t.Context(), t, charge(1)).only(t)
		ctx := newEndable(t.Context())
		left := h.callUnrecorded(ctx, t, charge(2)) // waits 3s for room
		time.Sleep(300 * time.Millisecond)
		ctx.end(context.Canceled)
		time.Sleep(3200 * time.Millisecond) // past the moment the room came back
		h.callUnrecorded(t.Context(), t, charge(3)).only(t)
		if at := arrivals(); left.count() != 0 || len(at) != 2 || at[1] != 3500*time.Millisecond {
			t.Fatalf("calls reached the upstream at %v, the one that left got %d answers; want 0s and 3.5s, none", at, left.count())
		}
	})
}
