package intercept

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// httpError is what the Streamable HTTP client reports, and the session
// hands on, for a POST the server answered with an HTTP error status.
func httpError(status int, retryAfter string) *jsonrpc.NoAnswer {
	return &jsonrpc.NoAnswer{Status: status, RetryAfter: retryAfter, Reason: fmt.Sprintf("upstream answered HTTP %d", status)}
}

// statusThen answers the first call with e, then charges.
func statusThen(e error) func(context.Context, int, json.RawMessage) (json.RawMessage, error) {
	return func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
		if n == 1 {
			return nil, e
		}
		return charged(ctx, n, p)
	}
}

func TestHTTPStatuses(t *testing.T) {
	sideEffect := policy.FromAnnotations(nil)
	idempotent := policy.FromAnnotations(&mcp.Annotations{IdempotentHint: ptr(true)})
	readOnly := policy.FromAnnotations(&mcp.Annotations{ReadOnlyHint: ptr(true)})
	keyed := policy.FromAnnotations(nil)
	keyed.OnUnknown = policy.Retry // the upstream dedupes on the forwarded execution id
	unkeyed := keyed
	unkeyed.ForwardKey = false // none forwarded: nothing to dedupe on
	for _, tt := range []struct {
		name   string
		err    error
		pol    policy.Policy
		resent bool
		// unknown, when not resent: the status may follow a run, so the
		// outcome is unknown, not failed.
		unknown bool
	}{
		// 429 proves nothing ran: even a side effect is sent again.
		{"429 side effect", httpError(http.StatusTooManyRequests, ""), sideEffect, true, false},
		// 502, 503 and 504 may come after the tool ran: sent again only
		// where the policy says that is safe.
		{"502 side effect", httpError(http.StatusBadGateway, ""), sideEffect, false, true},
		{"503 side effect", httpError(http.StatusServiceUnavailable, ""), sideEffect, false, true},
		{"504 side effect", httpError(http.StatusGatewayTimeout, ""), sideEffect, false, true},
		{"503 idempotent", httpError(http.StatusServiceUnavailable, ""), idempotent, true, false},
		{"502 read only", httpError(http.StatusBadGateway, ""), readOnly, true, false},
		{"504 on_unknown retry", httpError(http.StatusGatewayTimeout, ""), keyed, true, false},
		{"504 on_unknown retry, key not forwarded", httpError(http.StatusGatewayTimeout, ""), unkeyed, false, true},
		// The request is wrong, or the server will not do it: repeating
		// it cannot help, whatever the tool.
		{"400", httpError(http.StatusBadRequest, ""), idempotent, false, false},
		{"401", httpError(http.StatusUnauthorized, ""), idempotent, false, false},
		{"403", httpError(http.StatusForbidden, ""), idempotent, false, false},
		{"404", httpError(http.StatusNotFound, ""), idempotent, false, false},
		{"422", httpError(http.StatusUnprocessableEntity, ""), idempotent, false, false},
		{"501", httpError(http.StatusNotImplemented, ""), idempotent, false, false},
		{"500", httpError(http.StatusInternalServerError, ""), idempotent, false, true},
		{"524 (a gateway's timeout)", httpError(524, ""), sideEffect, false, true},
		{"408", httpError(http.StatusRequestTimeout, ""), sideEffect, false, true},
		// A server's own error is the server refusing, whatever its data.
		{"server error with a status in its data", &jsonrpc.Error{Code: -32000, Message: "busy", Data: json.RawMessage(`{"http_status":503}`)}, idempotent, false, false},
		// But a status reported as a proxy in front of an HTTP server
		// reports it (-32603, http_status) is the upstream's word about
		// its own vendor, which the rule may act on.
		{"a status the upstream reports", httpError(http.StatusServiceUnavailable, "").Object(), idempotent, true, false},
		{"a status the upstream reports, side effect", httpError(http.StatusServiceUnavailable, "").Object(), sideEffect, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(statusThen(tt.err))
				h.pol = tt.pol
				h.pol.Retry = retryRule(false)
				a := h.call(t.Context(), t, chargeCall).only(t)
				h.in.Wait(t.Context())
				rec := h.onlyRecord(t)
				if tt.resent {
					if v := view(t, a); v.Content[0].Text != "charge #2" || h.up.calls.Load() != 2 || rec.Attempts != 2 {
						t.Fatalf("got %+v after %d calls, %d attempts; want the second attempt's success", v, h.up.calls.Load(), rec.Attempts)
					}
					return
				}
				if tt.unknown {
					if v := view(t, a); !v.IsError || !strings.HasPrefix(v.Content[0].Text, "Outcome unknown:") || rec.State != record.Unknown || h.up.calls.Load() != 1 {
						t.Fatalf("got %+v, record %s, after %d calls; want outcome unknown after 1 call", v, rec.State, h.up.calls.Load())
					}
					return
				}
				want, _ := rpcError(tt.err)
				if e := jsonrpc.DecodeError(a.Error); a.Error == nil || e.Message != want.Message || string(e.Data) != string(want.Data) {
					t.Fatalf("got %+v; want the upstream's error as it came", a)
				}
				if n := h.up.calls.Load(); n != 1 || rec.State != record.Failed {
					t.Fatalf("upstream saw %d calls, record %s; want 1 call, failed", n, rec.State)
				}
			})
		})
	}
}

func TestHTTPRetryAfterIsAFloor(t *testing.T) {
	for _, tt := range []struct {
		name       string
		retryAfter func(now time.Time) string
		want       time.Duration
	}{
		{"seconds", func(time.Time) string { return "3" }, 3 * time.Second},
		{"an HTTP date", func(now time.Time) string { return now.Add(5 * time.Second).UTC().Format(http.TimeFormat) }, 5 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				var second time.Duration
				h := newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
					if n == 1 {
						return nil, httpError(http.StatusTooManyRequests, tt.retryAfter(time.Now()))
					}
					second = time.Since(start)
					return charged(ctx, n, p)
				})
				h.pol.Retry = retryRule(false) // backoff ceilings of 100ms and up
				if v := view(t, h.call(t.Context(), t, chargeCall).only(t)); v.Content[0].Text != "charge #2" {
					t.Fatalf("got %+v; want the second attempt's success", v)
				}
				if second < tt.want || second > tt.want+100*time.Millisecond {
					t.Fatalf("the second attempt went after %v; Retry-After asked for %v, and the backoff adds at most 100ms", second, tt.want)
				}
			})
		})
	}
}

func TestHTTPRetryAfterPastTheDeadlineFailsNow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(statusThen(httpError(http.StatusTooManyRequests, "120")))
		h.pol.Retry = retryRule(false) // the default deadline: a minute
		start := time.Now()
		a := h.call(t.Context(), t, chargeCall).only(t)
		e := jsonrpc.DecodeError(a.Error)
		if a.Error == nil || !strings.HasPrefix(e.Message, "upstream answered HTTP 429 (mcp-idempotent: not retried: waiting 2m0s for attempt 2 (HTTP 429) would pass the call's deadline") {
			t.Fatalf("got %+v; want the 429 now, saying the wait would pass the deadline", a)
		}
		if n := h.up.calls.Load(); n != 1 || time.Since(start) != 0 {
			t.Fatalf("upstream saw %d calls; answered after %v; want 1, at once", n, time.Since(start))
		}
	})
}

// countingObserver counts the transitions the interceptor reports, and
// keeps the upstream times.
type countingObserver struct {
	mu       sync.Mutex
	n        map[record.State]int
	upstream []time.Duration
	retries  []time.Duration // the backoff of each retry told
}

func (o *countingObserver) Decision(Tool, policy.Class, string) {}
func (o *countingObserver) Attempt(_ Tool, _ int, _ string, wait time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.retries = append(o.retries, wait)
}
func (o *countingObserver) Upstream(_ Tool, d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.upstream = append(o.upstream, d)
}
func (o *countingObserver) Transition(_ Tool, st record.State) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n[st]++
}

// TestEveryDispatchIsObserved: a re-send is a transition to dispatched
// like the first send, and the metrics see both.
func TestEveryDispatchIsObserved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &countingObserver{n: map[record.State]int{}}
		h := newHarness(statusThen(httpError(http.StatusTooManyRequests, "")))
		h.in = New(Options{Store: h.store, Hasher: fingerprint.NewRandom(), Observer: obs})
		h.pol.Retry = retryRule(false)
		h.call(t.Context(), t, chargeCall).only(t)
		h.in.Wait(t.Context())
		obs.mu.Lock()
		defer obs.mu.Unlock()
		if obs.n[record.Dispatched] != 2 || obs.n[record.Completed] != 1 {
			t.Fatalf("observed %v; want 2 dispatches and 1 completion", obs.n)
		}
	})
}

// heldReply is a Replier that takes its answer only once release is
// closed, as a caller whose transport is slow to write it.
type heldReply struct {
	*answers
	release chan struct{}
}

func (h heldReply) Reply(a Answer) error {
	<-h.release
	return h.answers.Reply(a)
}

// TestDeliveryIsObservedOnce: when the first caller's answer is still
// being written as a retry replays the completed result, both callers get
// it, and the execution moves to delivered once, not once for each.
func TestDeliveryIsObservedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &countingObserver{n: map[record.State]int{}}
		j := &memJournal{}
		h := newHarness(charged)
		h.in = New(Options{Store: h.store, Hasher: fingerprint.NewRandom(), Observer: obs, Journal: j})
		req, first := h.request(t, chargeCall)
		held := heldReply{first, make(chan struct{})}
		req.Reply = held
		go h.in.Handle(t.Context(), req)
		synctest.Wait() // the first answer is being written
		if v := view(t, h.call(t.Context(), t, chargeCall).only(t)); !v.Meta.Replayed {
			t.Fatalf("the retry got %+v; want the completed result replayed", v)
		}
		close(held.release)
		first.only(t)
		h.in.Wait(t.Context())
		obs.mu.Lock()
		defer obs.mu.Unlock()
		if obs.n[record.Delivered] != 1 {
			t.Fatalf("observed %d moves to delivered; want 1", obs.n[record.Delivered])
		}
		if got := j.states(); !slices.Equal(got, []string{"accepted", "dispatched", "completed", "delivered", "delivered"}) {
			t.Fatalf("journal states %q; want a delivered line for each caller", got)
		}
	})
}

// TestUpstreamTimeIsObserved: the metrics get how long each send took
// upstream.
func TestUpstreamTimeIsObserved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &countingObserver{n: map[record.State]int{}}
		h := newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
			time.Sleep(250 * time.Millisecond)
			return charged(ctx, n, p)
		})
		h.in = New(Options{Store: h.store, Hasher: fingerprint.NewRandom(), Observer: obs})
		h.call(t.Context(), t, chargeCall).only(t)
		h.in.Wait(t.Context())
		obs.mu.Lock()
		defer obs.mu.Unlock()
		if len(obs.upstream) != 1 || obs.upstream[0] != 250*time.Millisecond {
			t.Fatalf("observed upstream times %v; want one of 250ms", obs.upstream)
		}
	})
}

// TestOnlyRetriesSentAreObserved: the metrics count a retry, and its
// backoff, when it goes upstream, not when it is decided: one that the
// session's end or the account stops is not counted as made.
func TestOnlyRetriesSentAreObserved(t *testing.T) {
	for _, tt := range []struct {
		name    string
		account bool // a second call waits a minute for room
		end     bool // the session ends during the backoff
		sends   int32
	}{
		{"sent again", false, false, 2},
		{"the session ends during the backoff", false, true, 1},
		{"no room after the backoff", true, false, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				obs := &countingObserver{n: map[record.State]int{}}
				h := newHarness(busyThen(1))
				h.pol.Retry = retryRule(true)
				h.pol.Retry.Base, h.pol.Retry.Cap = time.Second, time.Second
				accounts := map[string]policy.Account{}
				if tt.account {
					accounts["vendor"] = policy.Account{Name: "vendor", Rate: 1.0 / 60, Burst: 1}
					h.pol.Retry.Account = "vendor"
				}
				h.in = New(Options{Store: h.store, Hasher: fingerprint.NewRandom(), Observer: obs, Accounts: accounts})
				ctx := newEndable(t.Context())
				a := h.call(ctx, t, chargeCall)
				synctest.Wait() // the first answer was transient: a backoff
				if tt.end {
					ctx.end(ErrSessionEnded)
				}
				a.only(t)
				h.in.Wait(t.Context())
				obs.mu.Lock()
				defer obs.mu.Unlock()
				if n := h.up.calls.Load(); n != tt.sends || len(obs.retries) != int(n)-1 {
					t.Fatalf("upstream saw %d calls, %d retries observed; want %d calls, each after the first observed", n, len(obs.retries), tt.sends)
				}
				if len(obs.retries) == 1 && (obs.retries[0] < 0 || obs.retries[0] > time.Second) {
					t.Fatalf("the retry was observed after a backoff of %v; want one in [0, 1s]", obs.retries[0])
				}
			})
		})
	}
}
