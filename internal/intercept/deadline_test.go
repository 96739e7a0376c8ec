package intercept

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// withDeadline returns a tools/call whose _meta sets the client's
// deadline to ms milliseconds.
func withDeadline(params string, ms int) string {
	return strings.TrimSuffix(params, "}") + `,"_meta":{"mcp-idempotent/deadline_ms":` + strconv.Itoa(ms) + `}}`
}

func TestFirstAttemptWaitsForRoomUpToItsDeadline(t *testing.T) {
	// The account lets one call go a minute; the second call arrives at
	// once and needs to wait 60s for room.
	for _, tt := range []struct {
		name       string
		deadline   time.Duration // the policy's retry.deadline; 0 for the default
		clientMS   int           // the client's deadline_ms; 0 for none
		wantSentAt time.Duration // when the second call reaches the upstream; -1: never
	}{
		{"the policy deadline allows the wait", 2 * time.Minute, 0, time.Minute},
		{"the default deadline refuses a wait that ends exactly at it", 0, 0, -1},
		{"a policy deadline before the room comes refuses", 30 * time.Second, 0, -1},
		{"the client shortens the deadline", 2 * time.Minute, 30_000, -1},
		{"a client deadline past the policy's does not lengthen it", 30 * time.Second, 120_000, -1},
		{"a client deadline after the room comes allows the wait", 10 * time.Minute, 61_000, time.Minute},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, arrivals := timedHarness()
				h.pol.Retry = &policy.RetryRule{MaxAttempts: 1, Deadline: tt.deadline}
				h.withAccount(policy.Account{Name: "bank", Rate: 1.0 / 60, Burst: 1})
				h.call(t.Context(), t, charge(1)).only(t)
				second := charge(2)
				if tt.clientMS > 0 {
					second = withDeadline(second, tt.clientMS)
				}
				a := <-h.call(t.Context(), t, second).got // after a minute, maybe
				h.in.Wait(t.Context())
				at := arrivals()
				if tt.wantSentAt < 0 {
					e := jsonrpc.DecodeError(a.Error)
					if a.Error == nil || !strings.Contains(e.Message, "account bank has no room for another call for 1m0s, which would pass the call's deadline") ||
						!strings.Contains(e.Message, "nothing ran") {
						t.Fatalf("got %+v; want an error saying the wait for room would pass the deadline", a)
					}
					if len(at) != 1 {
						t.Fatalf("the upstream saw calls at %v; want only the first", at)
					}
					return
				}
				if v := view(t, a); v.Content[0].Text != "charge #2" || len(at) != 2 || at[1] != tt.wantSentAt {
					t.Fatalf("got %+v, with calls at %v; want the second call sent after %v", v, at, tt.wantSentAt)
				}
			})
		})
	}
}

func TestBackoffPastTheDeadlineEndsTheCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(busyThen(100)) // each 429 asks for 2s
		h.pol.Retry = retryRule(true)
		h.pol.Retry.RetryAfterPath = "retry_after_seconds"
		h.pol.Retry.Deadline = 3 * time.Second
		start := time.Now()
		v := view(t, h.call(t.Context(), t, chargeCall).only(t))
		// The second attempt goes at 2s; a third would wait 2s more,
		// past the deadline at 3s, so the call ends at 2s with the 429.
		if n := h.up.calls.Load(); n != 2 || time.Since(start) != 2*time.Second {
			t.Fatalf("upstream saw %d calls, answered after %v; want 2, after 2s", n, time.Since(start))
		}
		last := v.Content[len(v.Content)-1].Text
		if !strings.Contains(v.Content[0].Text, "429") || !strings.Contains(last, "would pass the call's deadline") {
			t.Fatalf("got %+v; want the last 429 with a note that a wait would pass the deadline", v)
		}
		h.in.Wait(t.Context())
		rec := h.onlyRecord(t)
		if rec.State != record.Failed || rec.Attempts != 2 {
			t.Fatalf("record %s after %d attempts; want failed after 2 (a transient result is not replayed)", rec.State, rec.Attempts)
		}
		// The rule allowed 4 attempts: the record says what ended them at
		// 2, as the caller was told, not that the last one was made.
		if note := rec.History[len(rec.History)-1].Note; !strings.Contains(note, "would pass the call's deadline") {
			t.Fatalf("the failure is noted %q; want the deadline that ended the attempts", note)
		}
	})
}

// TestHugeRetryAfterIsAFloor: a retry_after too long for a Duration is
// still a floor on the wait, not a wait that wrapped around to nothing.
func TestHugeRetryAfterIsAFloor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
			return json.RawMessage(`{"content":[{"type":"text","text":"429: later"}],"isError":true,"structuredContent":{"retry_after_seconds":1e12}}`), nil
		})
		h.pol.Retry = retryRule(true)
		h.pol.Retry.RetryAfterPath = "retry_after_seconds"
		v := view(t, h.call(t.Context(), t, chargeCall).only(t))
		if n := h.up.calls.Load(); n != 1 || !strings.Contains(v.Content[len(v.Content)-1].Text, "would pass the call's deadline") {
			t.Fatalf("got %+v after %d sends; want one send, and a note that the wait asked for passes the deadline", v, n)
		}
	})
}

func TestClientDeadlineShortensRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(busyThen(100))
		h.pol.Retry = retryRule(true)
		h.pol.Retry.RetryAfterPath = "retry_after_seconds" // 2s
		v := view(t, h.call(t.Context(), t, withDeadline(chargeCall, 1500)).only(t))
		if n := h.up.calls.Load(); n != 1 || !strings.Contains(v.Content[len(v.Content)-1].Text, "would pass the call's deadline, 1.5s from now") {
			t.Fatalf("got %+v after %d calls; a client deadline of 1.5s leaves no room for a 2s wait", v, n)
		}
	})
}

// TestApprovalDoesNotTakeTheRetryDeadline: the retry rule's deadline
// counts from the approval, so a call a user approves after longer than
// it still gets its retries. The client's own deadline still counts from
// the call's arrival.
func TestApprovalDoesNotTakeTheRetryDeadline(t *testing.T) {
	for _, tt := range []struct {
		name     string
		clientMS int    // the client's deadline_ms; 0 for none
		want     string // the caller's first text
		wantNote string // in its last text, if not ""
		calls    int32
	}{
		{"the retry deadline restarts at the approval", 0, "charge #2", "", 2},
		{"the client's deadline counts from the arrival", 91_000, "429: rate limited, try later", "would pass the call's deadline, 1s from now", 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := approving(policy.ApprovalEach, policy.ApproverClient)
				h.up.respond = busyThen(1) // asks for 2s
				h.pol.Retry = retryRule(true)
				h.pol.Retry.RetryAfterPath = "retry_after_seconds"
				h.pol.Retry.Deadline = time.Minute
				a := newAsker(func(ctx context.Context, p json.RawMessage) (json.RawMessage, error) {
					<-time.After(90 * time.Second) // the user takes 90s
					return elicited("accept", "")(ctx, p)
				})
				call := chargeCall
				if tt.clientMS > 0 {
					call = withDeadline(call, tt.clientMS)
				}
				h.askingCall(t, a, "session:1", call)
				v := view(t, <-a.got) // after the user's 90s
				h.in.Wait(t.Context())
				last := v.Content[len(v.Content)-1].Text
				if v.Content[0].Text != tt.want || h.up.calls.Load() != tt.calls || !strings.Contains(last, tt.wantNote) {
					t.Fatalf("got %+v after %d sends; want %q after %d, noting %q", v, h.up.calls.Load(), tt.want, tt.calls, tt.wantNote)
				}
			})
		})
	}
}

// TestPassedDeadlineIsSaidSo: an attempt that outlasts the deadline is
// answered with a note that the deadline has passed, not a wait "-1m
// from now".
func TestPassedDeadlineIsSaidSo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
			<-time.After(2 * time.Minute) // past the 1m deadline
			return busyThen(1)(ctx, n, p)
		})
		h.pol.Retry = retryRule(true)
		h.pol.Retry.Deadline = time.Minute
		v := view(t, <-h.call(t.Context(), t, chargeCall).got) // after the 2m send
		h.in.Wait(t.Context())
		last := v.Content[len(v.Content)-1].Text
		if h.up.calls.Load() != 1 || !strings.Contains(last, "the call's deadline has passed") || strings.Contains(last, "from now") {
			t.Fatalf("got %+v after %d sends; want one send and a note that the deadline has passed", v, h.up.calls.Load())
		}
	})
}
