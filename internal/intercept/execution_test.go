package intercept

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// syncUpstream answers every call before Send returns, as a transport
// does that fails a send at once (never sent, a context already ended).
type syncUpstream struct{ *upstream }

func (u syncUpstream) Send(ctx context.Context, method string, params json.RawMessage, done Answered) {
	n := int(u.calls.Add(1))
	done.Answered(u.respond(ctx, n, params))
}

// TestAnswerDuringTheSend: an execution whose answers come before
// Upstream.Send returns runs on, on the caller's goroutine for the first
// attempt and on the backoff's for the next, and settles once.
func TestAnswerDuringTheSend(t *testing.T) {
	for _, unrecorded := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(busyThen(2))
			h.pol.Retry = retryRule(true)
			req, a := h.request(t, chargeCall)
			req.Upstream = syncUpstream{h.up}
			if unrecorded {
				h.in.Unrecorded(t.Context(), req)
			} else {
				h.in.Handle(t.Context(), req)
			}
			v := view(t, a.only(t))
			if v.IsError || v.Content[0].Text != "charge #3" {
				t.Fatalf("unrecorded %v: the caller got %+v; want the third attempt's success", unrecorded, v)
			}
			if err := h.in.Wait(t.Context()); err != nil {
				t.Fatal(err)
			}
			if h.up.calls.Load() != 3 {
				t.Fatalf("unrecorded %v: the upstream saw %d calls; want 3", unrecorded, h.up.calls.Load())
			}
			if unrecorded {
				return
			}
			if rec := h.onlyRecord(t); rec.Attempts != 3 || rec.State != record.Delivered {
				t.Fatalf("record: %d attempts, %s; want 3, delivered", rec.Attempts, rec.State)
			}
		})
	}
}

// copyingUpstream is a CopyingUpstream: it keeps a copy of the params of
// each request before Send returns, as a transport writing them into a
// frame of its own does.
type copyingUpstream struct {
	*upstream
	mu   sync.Mutex
	sent []json.RawMessage
}

func (u *copyingUpstream) CopiesParams() bool { return true }

func (u *copyingUpstream) Send(ctx context.Context, method string, params json.RawMessage, done Answered) {
	params = bytes.Clone(params)
	u.mu.Lock()
	u.sent = append(u.sent, params)
	u.mu.Unlock()
	u.upstream.Send(ctx, method, params, done)
}

// TestParamsIntoReusedBuffer checks that the params of sends built in the
// buffer a CopyingUpstream lets the interceptor use again each carry
// their own arguments and execution id.
func TestParamsIntoReusedBuffer(t *testing.T) {
	h := newHarness(charged)
	u := &copyingUpstream{upstream: h.up}
	for i := range 3 {
		req, a := h.request(t, fmt.Sprintf(`{"name":"charge_card","arguments":{"card":"4242","amount":%d}}`, i))
		req.Upstream = u
		h.in.Handle(t.Context(), req)
		view(t, a.only(t))
	}
	ids := map[string]bool{}
	for _, r := range h.store.Records() {
		ids[r.ID] = true
	}
	for i, p := range u.sent {
		var v struct {
			Arguments struct{ Amount int } `json:"arguments"`
			Meta      map[string]string    `json:"_meta"`
		}
		if err := json.Unmarshal(p, &v); err != nil || v.Arguments.Amount != i || !ids[v.Meta[mcp.MetaExecutionID]] {
			t.Fatalf("send %d: params %s (%v); want amount %d and the id of one of %v", i, p, err, i, ids)
		}
		delete(ids, v.Meta[mcp.MetaExecutionID])
	}
	if len(u.sent) != 3 {
		t.Fatalf("%d sends; want 3", len(u.sent))
	}
}

// TestResendAfterTakeoverIsFenced: process A sends a side effect,
// gets a "429, did nothing" result, and waits out a backoff longer than
// its lease (its renewals fail). Process B meets the lapsed execution,
// settles it unknown, asks the status tool (nothing happened), and
// re-dispatches it as its own. When A's backoff ends, A must not send the
// execution again: it is B's now. A's re-send is fenced like its outcome
// is (DESIGN 8), or the action runs twice, B's send and A's.
func TestResendAfterTakeoverIsFenced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var charges []string // the sends of charge_card that reached the upstream, by who
		release := make(chan struct{})
		h := newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
			if strings.Contains(string(p), `"get_status"`) {
				return json.RawMessage(`{"content":[{"type":"text","text":"no such charge"}],"structuredContent":{"status":"not_found"}}`), nil
			}
			mu.Lock()
			charges = append(charges, time.Now().String())
			k := len(charges)
			mu.Unlock()
			if k == 1 {
				return json.RawMessage(`{"content":[{"type":"text","text":"429: rate limited, try later"}],"isError":true,"structuredContent":{"status":429,"retry_after_seconds":60}}`), nil
			}
			<-release
			return charged(ctx, n, p)
		})
		h.pol.OnUnknown = policy.Recover
		h.pol.Recover = &policy.RecoverRule{Tool: "get_status", Arguments: json.RawMessage(`{"execution_id":"{{execution_id}}"}`)}
		h.pol.Retry = &policy.RetryRule{MaxAttempts: 3, Base: 100 * time.Millisecond, Cap: time.Second, Deadline: 5 * time.Minute,
			RetryAfterPath: "retry_after_seconds",
			Transient:      []policy.ResultMatch{{Text: regexp.MustCompile(`\b429\b`), SafeToResend: true}}}
		hasher := fingerprint.NewRandom()
		a := New(Options{Store: h.store, Hasher: hasher, Owner: "proxy-A", Lease: 30 * time.Second})
		b := New(Options{Store: h.store, Hasher: hasher, Owner: "proxy-B", Lease: 30 * time.Second})

		h.in = a
		h.call(t.Context(), t, chargeCall) // A: attempt 1 gets the 429, backs off 60s+
		synctest.Wait()
		time.Sleep(45 * time.Second) // A's lease (30s) lapsed, unrenewed
		h.in = b
		h.call(t.Context(), t, chargeCall) // B: takes it over, status says not done, re-dispatches
		synctest.Wait()
		mu.Lock()
		if len(charges) != 2 {
			mu.Unlock()
			t.Fatalf("after B's call the upstream saw %d charges; want 2 (A's 429, B's re-dispatch)", len(charges))
		}
		mu.Unlock()
		time.Sleep(30 * time.Second) // A's backoff ends
		synctest.Wait()
		mu.Lock()
		n := len(charges)
		mu.Unlock()
		close(release)
		synctest.Wait()
		if n != 2 {
			for _, r := range h.store.Records() {
				for _, tr := range r.History {
					t.Logf("%s %s owner=%s: %s %q", r.ID, r.State, r.Owner, tr.State, tr.Note)
				}
			}
			t.Fatalf("the upstream saw %d sends of charge_card; A sent the execution again after B took it over and re-dispatched it: the charge ran twice (B's send and A's)", n)
		}
	})
}

// claimGate holds the first re-dispatch claim (Unknown to Dispatched)
// until a second one comes, so that two callers both find the execution
// unknown and both try to re-dispatch it; the first wins.
type claimGate struct {
	record.Store
	n                  atomic.Int32
	firstGo, firstDone chan struct{}
}

func (g *claimGate) Update(ctx context.Context, id string, c record.Change) (*record.Record, error) {
	if c.From != record.Unknown || c.To != record.Dispatched {
		return g.Store.Update(ctx, id, c)
	}
	switch g.n.Add(1) {
	case 1:
		<-g.firstGo
		defer close(g.firstDone)
	case 2:
		close(g.firstGo)
		<-g.firstDone
	}
	return g.Store.Update(ctx, id, c)
}

// blockedReplier takes its answer only once unblock is closed.
type blockedReplier struct {
	unblock chan struct{}
	got     chan Answer
}

func (r *blockedReplier) Reply(a Answer) error {
	<-r.unblock
	r.got <- a
	return nil
}

// TestWaitCoversTheLoserOfARedispatch: Wait promises that every
// attached caller has its answer (and journal line) before it returns.
// A caller that lost the race to re-dispatch an unknown execution
// attaches to the winner's (notDispatched), on a goroutine Wait does not
// count: Wait returns while that caller is still unanswered.
func TestWaitCoversTheLoserOfARedispatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		h := newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
			if n == 1 {
				return nil, errors.New("the upstream exited before answering")
			}
			<-release
			return charged(ctx, n, p)
		})
		gate := &claimGate{Store: h.store, firstGo: make(chan struct{}), firstDone: make(chan struct{})}
		h.in = New(Options{Store: gate, Hasher: fingerprint.NewRandom()})
		h.pol.OnUnknown = policy.Retry

		h.call(t.Context(), t, chargeCall).only(t) // unknown
		h.in.Wait(t.Context())

		var first *answers
		done1 := make(chan struct{})
		go func() { first = h.call(t.Context(), t, chargeCall); close(done1) }()
		synctest.Wait() // the first re-dispatcher waits in its claim
		req, _ := h.request(t, chargeCall)
		loser := &blockedReplier{unblock: make(chan struct{}), got: make(chan Answer, 1)}
		req.Reply = loser
		h.in.Handle(t.Context(), req) // loses the claim, attaches
		<-done1
		close(release)
		first.only(t)
		synctest.Wait() // the loser is woken and writes its answer (blocked)

		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		err := h.in.Wait(ctx)
		close(loser.unblock)
		<-loser.got
		if err == nil {
			t.Fatal("Interceptor.Wait returned while an attached caller (the loser of a re-dispatch claim) was still being answered; want it to wait for that answer")
		}
	})
}
