package intercept

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

// readOnly makes h's tool read-only, as its annotations would.
func (h *harness) readOnly() *harness {
	retry := h.pol.Retry
	h.pol = policy.FromAnnotations(&mcp.Annotations{ReadOnlyHint: ptr(true)})
	h.pol.Retry = retry
	return h
}

// sentOnly waits for the work under way and checks that the upstream saw
// n calls.
func (h *harness) sentOnly(t *testing.T, n int32) {
	t.Helper()
	if err := h.in.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := h.up.calls.Load(); got != n {
		t.Fatalf("upstream saw %d calls; want %d", got, n)
	}
}

// unanswered checks that a caller who left got no answer.
func unanswered(t *testing.T, a *answers) {
	t.Helper()
	if n := a.count(); n != 0 {
		t.Fatalf("the caller who left got %d answers", n)
	}
}

// busyReadOnly is a harness whose tool is read-only, with a retry rule,
// and whose upstream answers "429" busy times before it answers.
func busyReadOnly(busy int) *harness {
	h := newHarness(busyThen(busy))
	h.pol.Retry = retryRule(false)
	return h.readOnly()
}

// callUnrecorded makes one unrecorded tools/call, as the session does for
// a read-only tool with a retry rule, and returns what its caller was told.
func (h *harness) callUnrecorded(ctx context.Context, t *testing.T, params string) *answers {
	t.Helper()
	req, a := h.request(t, params)
	h.in.Unrecorded(ctx, req)
	return a
}

// TestUnrecordedTransientIsSentAgain: a read-only tool's transient answer
// is sent again under its retry rule (a read may be retried freely, the
// rule's safe_to_resend aside), and nothing is recorded.
func TestUnrecordedTransientIsSentAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := busyReadOnly(2)
		v := view(t, h.callUnrecorded(t.Context(), t, chargeCall).only(t))
		if v.IsError || v.Content[0].Text != "charge #3" || v.Meta.Replayed || v.Meta.Execution.ID != "" {
			t.Fatalf("the caller got %+v; want the third attempt's answer as it came", v)
		}
		if n := h.up.calls.Load(); n != 3 {
			t.Fatalf("upstream saw %d calls; want 3", n)
		}
		if err := h.in.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
		if recs := h.store.Records(); len(recs) != 0 {
			t.Fatalf("store holds %d records; a read-only call is never recorded", len(recs))
		}
		// And the same call again runs again: nothing is replayed.
		if v := view(t, h.callUnrecorded(t.Context(), t, chargeCall).only(t)); v.Content[0].Text != "charge #4" {
			t.Fatalf("the same call again got %+v; want a fresh answer", v)
		}
	})
}

// TestUnrecordedLastTransientAnswerComes: when the attempts run out, the
// caller gets the last answer.
func TestUnrecordedLastTransientAnswerComes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := busyReadOnly(100)
		v := view(t, h.callUnrecorded(t.Context(), t, chargeCall).only(t))
		if !v.IsError || !strings.Contains(v.Content[0].Text, "429") || h.up.calls.Load() != 4 {
			t.Fatalf("got %+v after %d calls; want the last 429 after 4 attempts", v, h.up.calls.Load())
		}
	})
}

// TestUnrecordedTakesFromTheAccount: a read-only call spends its account's
// allowance like any other, and one with no room before its deadline is
// not sent.
func TestUnrecordedTakesFromTheAccount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(charged)
		h.pol.Retry = &policy.RetryRule{MaxAttempts: 1, Deadline: 500 * time.Millisecond}
		h.withAccount(policy.Account{Name: "vendor", Rate: 1.0 / 60, Burst: 1})
		h.readOnly()
		if v := view(t, h.callUnrecorded(t.Context(), t, charge(1)).only(t)); v.Content[0].Text != "charge #1" {
			t.Fatalf("the first call got %+v", v)
		}
		a := h.callUnrecorded(t.Context(), t, charge(2)).only(t)
		if e := jsonrpc.DecodeError(a.Error); a.Error == nil || !strings.Contains(e.Message, "account vendor has no room") || !strings.Contains(e.Message, "nothing ran") {
			t.Fatalf("a call with no room before its deadline got %+v; want an error saying the account has no room", a)
		}
		if n := h.up.calls.Load(); n != 1 {
			t.Fatalf("upstream saw %d calls; want 1", n)
		}
	})
}

// TestUnrecordedErrorComesAsItCame: the upstream's JSON-RPC error is the
// caller's answer, unchanged.
func TestUnrecordedErrorComesAsItCame(t *testing.T) {
	h := newHarness(func(context.Context, int, json.RawMessage) (json.RawMessage, error) {
		return nil, &jsonrpc.Error{Code: -32602, Message: "unknown card", Data: json.RawMessage(`{"card":"1"}`)}
	})
	h.pol.Retry = retryRule(false)
	h.readOnly()
	a := h.callUnrecorded(t.Context(), t, chargeCall).only(t)
	if string(a.Error) != `{"code":-32602,"message":"unknown card","data":{"card":"1"}}` || a.Result != nil {
		t.Fatalf("got %+v; want the upstream's error as it came", a)
	}
}

// TestUnrecordedStopsWhenTheCallerLeaves: a caller that cancels after a
// transient answer is not sent again for: nobody would read the answer.
func TestUnrecordedStopsWhenTheCallerLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := busyReadOnly(100)
		ctx := newEndable(t.Context())
		a := h.callUnrecorded(ctx, t, chargeCall)
		synctest.Wait() // the first answer came: a backoff is under way
		ctx.end(context.Canceled)
		h.sentOnly(t, 1)
		unanswered(t, a)
	})
}

// keylessKeyScoped makes h's tool a side effect matched by client key
// only, whose upstream dedupes on the execution id (on_unknown: retry),
// with a retry rule spending account vendor; its calls here carry no key.
func (h *harness) keylessKeyScoped() *harness {
	h.pol.Scope = policy.ScopeKey
	h.pol.OnUnknown = policy.Retry
	h.pol.Retry = &policy.RetryRule{MaxAttempts: 3, Base: time.Millisecond, Cap: time.Millisecond, Deadline: 500 * time.Millisecond}
	return h
}

// TestUnrecordedSideEffectIsNotSentBlind: a keyless call to a key-scoped
// side effect goes without an execution id, so a status that may follow a
// run (502) is not sent again, though the tool's upstream dedupes on the
// id when it has one; a 429, which proves nothing ran, is.
func TestUnrecordedSideEffectIsNotSentBlind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(statusThen(httpError(http.StatusBadGateway, ""))).keylessKeyScoped()
		a := h.callUnrecorded(t.Context(), t, chargeCall).only(t)
		if e := jsonrpc.DecodeError(a.Error); a.Error == nil || !strings.Contains(e.Message, "HTTP 502") || h.up.calls.Load() != 1 {
			t.Fatalf("got %+v after %d sends; want the 502, sent once", a, h.up.calls.Load())
		}
		h = newHarness(statusThen(httpError(http.StatusTooManyRequests, ""))).keylessKeyScoped()
		if v := view(t, h.callUnrecorded(t.Context(), t, chargeCall).only(t)); v.Content[0].Text != "charge #2" {
			t.Fatalf("after a 429 got %+v; want the second send's answer", v)
		}
	})
}

// TestUnrecordedKeylessTakesFromTheAccount: a keyless call to a key-scoped
// tool spends its account's allowance like any call.
func TestUnrecordedKeylessTakesFromTheAccount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(charged).keylessKeyScoped()
		h.withAccount(policy.Account{Name: "vendor", Rate: 1.0 / 60, Burst: 1})
		h.callUnrecorded(t.Context(), t, charge(1)).only(t)
		a := h.callUnrecorded(t.Context(), t, charge(2)).only(t)
		if e := jsonrpc.DecodeError(a.Error); a.Error == nil || !strings.Contains(e.Message, "account vendor has no room") {
			t.Fatalf("a second call with no room got %+v; want it refused", a)
		}
	})
}

// TestUnrecordedStopsWhileWaitingForRoom: a caller that leaves while its
// retry waits for the account's room is not sent for.
func TestUnrecordedStopsWhileWaitingForRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := busyReadOnly(100)
		h.pol.Retry.Deadline = time.Minute
		h.withAccount(policy.Account{Name: "vendor", Rate: 0.1, Burst: 1})
		ctx := newEndable(t.Context())
		a := h.callUnrecorded(ctx, t, chargeCall)
		time.Sleep(time.Second) // the backoff has passed; the account has no room for 10s
		synctest.Wait()
		ctx.end(context.Canceled)
		h.sentOnly(t, 1)
		unanswered(t, a)
	})
}

// TestUnrecordedNotSentWhenLeftWaitingForASlot: a first send that waits
// for a slot of its account's concurrency cap is not made once its caller
// has left.
func TestUnrecordedNotSentWhenLeftWaitingForASlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		h := newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
			<-release
			return charged(ctx, n, p)
		})
		h.pol.Retry = &policy.RetryRule{MaxAttempts: 1, Deadline: time.Minute}
		h.withAccount(policy.Account{Name: "vendor", Rate: 100, Burst: 100, MaxConcurrency: 1})
		h.readOnly()
		first := h.callUnrecorded(t.Context(), t, charge(1))
		ctx := newEndable(t.Context())
		second := h.callUnrecorded(ctx, t, charge(2))
		synctest.Wait() // the second waits for the slot the first holds
		ctx.end(context.Canceled)
		close(release)
		first.only(t)
		h.sentOnly(t, 1)
		unanswered(t, second)
	})
}

// TestUnrecordedSessionEndWhileWaitingForTheAccount: an unrecorded call
// waiting for its account's room when its session ends is told, as
// docs/errors.md says, that the session ended before it ran; nothing is
// sent later.
func TestUnrecordedSessionEndWhileWaitingForTheAccount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(charged)
		h.pol.Retry = &policy.RetryRule{MaxAttempts: 1, Deadline: 5 * time.Minute}
		h.withAccount(policy.Account{Name: "vendor", Rate: 1.0 / 60, Burst: 1})
		h.readOnly()
		h.callUnrecorded(t.Context(), t, charge(1)).only(t)
		ctx := newEndable(t.Context())
		a := h.callUnrecorded(ctx, t, charge(2))
		synctest.Wait() // waiting a minute for room
		ctx.end(ErrSessionEnded)
		ans := a.only(t)
		if e := jsonrpc.DecodeError(ans.Error); ans.Error == nil || e.Message != NotRunAtSessionEnd("charge_card").Message {
			t.Fatalf("got %+v; want the error saying the session ended before it ran", ans)
		}
		h.sentOnly(t, 1)
	})
}

// TestUnrecordedMalformedAnswerIsLoud: a malformed answer to an
// unrecorded call is a bug upstream, as it is for a recorded one: it is
// not sent again, and it is logged at error level.
func TestUnrecordedMalformedAnswerIsLoud(t *testing.T) {
	for _, tt := range []struct {
		name   string
		result json.RawMessage
		err    error
	}{
		{"a result that is not an object", json.RawMessage(`[1,2]`), nil},
		{"an answer with neither result nor error", nil, retry.Malformed("a response with neither result nor error", []byte(`{"jsonrpc":"2.0","id":1}`))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(func(context.Context, int, json.RawMessage) (json.RawMessage, error) { return tt.result, tt.err })
				var logs lockedBuffer
				h.in = New(Options{Store: h.store, Hasher: fingerprint.NewRandom(),
					Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
				h.pol.Retry = retryRule(true)
				h.readOnly()
				h.callUnrecorded(t.Context(), t, chargeCall).only(t)
				h.sentOnly(t, 1)
				if out := logs.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "malformed") {
					t.Fatalf("logs %q; want the malformed answer at error level", out)
				}
			})
		})
	}
}
