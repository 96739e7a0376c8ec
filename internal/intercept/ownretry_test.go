package intercept

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

// allDown is a memory store that fails every operation while down is
// set, as a Redis or PostgreSQL server the proxy lost its connection to.
type allDown struct {
	*memstore.Store
	down atomic.Bool
}

var errAllDown = errors.New("dial tcp 127.0.0.1:6379: connect: connection reset by peer")

func (s *allDown) Reserve(ctx context.Context, r *record.Record, o record.ReserveOptions) (*record.Record, bool, error) {
	if s.down.Load() {
		return nil, false, errAllDown
	}
	return s.Store.Reserve(ctx, r, o)
}

func (s *allDown) Update(ctx context.Context, id string, c record.Change) (*record.Record, error) {
	if s.down.Load() {
		return nil, errAllDown
	}
	return s.Store.Update(ctx, id, c)
}

func (s *allDown) Get(ctx context.Context, id string) (*record.Record, error) {
	if s.down.Load() {
		return nil, errAllDown
	}
	return s.Store.Get(ctx, id)
}

func (s *allDown) Wait(ctx context.Context, id string) (*record.Record, error) {
	if s.down.Load() {
		return nil, errAllDown
	}
	return s.Store.Wait(ctx, id)
}

// downable puts h's interceptor over h's store made able to go down, with
// accounts. When the test ends, after its deferred calls, the store comes
// back and the interceptor is waited for.
func downable(t *testing.T, h *harness, accounts map[string]policy.Account) *allDown {
	store := &allDown{Store: h.store}
	h.in = New(Options{Store: store, Hasher: fingerprint.NewRandom(), StoreWaits: true, Accounts: accounts})
	t.Cleanup(func() {
		store.down.Store(false)
		h.in.Wait(context.Background())
	})
	return store
}

// TestRetryInOutageAttachesToItsOwnExecution: a retry made while the
// store is down, of a call this process sent and still runs, or whose
// outcome it holds and could not record, is not told that the call was
// not executed: it ran, or runs. The retry attaches to the execution,
// and gets its outcome once the store takes it; the tool ran once.
func TestRetryInOutageAttachesToItsOwnExecution(t *testing.T) {
	for _, tc := range []struct {
		name    string
		running bool // the retry comes while the execution still runs
	}{{"running", true}, {"outcome kept", false}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, release := newHeldHarness()
				store := downable(t, h, nil)
				releaseOnce := sync.OnceFunc(func() { close(release) })
				defer releaseOnce() // on a failure, too: nothing is left blocked
				first := h.call(t.Context(), t, chargeCall)
				synctest.Wait() // dispatched: the upstream holds it
				store.down.Store(true)
				if !tc.running {
					releaseOnce()
					a := first.only(t)
					if e := jsonrpc.DecodeError(a.Error); a.Error == nil || !strings.Contains(e.Message, "could not be recorded yet") {
						t.Fatalf("first call got %+v; want its outcome not recorded yet", a)
					}
				}
				retry := h.call(t.Context(), t, chargeCall)
				synctest.Wait()
				if retry.count() != 0 {
					a := <-retry.got
					t.Fatalf("retry while the store is down got %s %s; want it attached to the execution this process holds", a.Error, a.Result)
				}
				if tc.running {
					releaseOnce()
					first.only(t)
				}
				store.down.Store(false)
				v := view(t, retry.only(t))
				if v.Content[0].Text != "charge #1" {
					t.Fatalf("retry got %+v; want the execution's outcome, charge #1", v)
				}
				if err := h.in.Wait(t.Context()); err != nil {
					t.Fatal(err)
				}
				if n := h.up.calls.Load(); n != 1 {
					t.Fatalf("upstream reached %d times; want 1", n)
				}
			})
		})
	}
}

// TestRetryInOutageRunsAgainByPolicy: an outcome this process holds is
// given to a retry in a store outage only as the store would give it. A
// tool whose policy runs a settled call again (idempotent, or replay:
// undelivered) is not replayed a kept outcome: the retry is told the
// store is down, as before, and the tool ran once.
func TestRetryInOutageRunsAgainByPolicy(t *testing.T) {
	for _, tc := range []struct {
		name string
		pol  func(*policy.Policy)
	}{
		{"idempotent", func(p *policy.Policy) { p.Class = policy.Idempotent }},
		{"replay undelivered", func(p *policy.Policy) { p.Replay = policy.ReplayUndelivered }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, release := newHeldHarness()
				tc.pol(&h.pol)
				store := downable(t, h, nil)
				first := h.call(t.Context(), t, chargeCall)
				synctest.Wait() // dispatched: the upstream holds it
				store.down.Store(true)
				close(release)
				if a := first.only(t); a.Error == nil {
					t.Fatalf("first call got %s; want its outcome not recorded yet", a.Result)
				}
				retry := h.call(t.Context(), t, chargeCall)
				synctest.Wait()
				a := retry.only(t)
				if e := jsonrpc.DecodeError(a.Error); a.Error == nil || !strings.Contains(e.Message, "not executed") {
					t.Fatalf("retry got %s %s; want the store's refusal", a.Error, a.Result)
				}
			})
		})
	}
}

// TestRetryInOutageToldOutcomeNotRecorded: a retry attached to an
// execution of this process whose outcome it holds and could not record
// is not told at the end of its wait, the store still down, that the
// execution is still in progress: it ran. It is told what its first
// caller was, that the outcome could not be recorded yet.
func TestRetryInOutageToldOutcomeNotRecorded(t *testing.T) {
	for _, tc := range []struct {
		name    string
		running bool // the retry comes while the execution still runs
	}{{"running", true}, {"outcome kept", false}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, release := newHeldHarness()
				store := downable(t, h, nil)
				releaseOnce := sync.OnceFunc(func() { close(release) })
				defer releaseOnce() // on a failure, too: nothing is left blocked
				first := h.call(t.Context(), t, chargeCall)
				synctest.Wait() // dispatched: the upstream holds it
				store.down.Store(true)
				if !tc.running {
					releaseOnce()
					first.only(t)
				}
				retry := h.call(t.Context(), t, chargeCall)
				synctest.Wait()
				if tc.running {
					releaseOnce()
					first.only(t)
				}
				// The attach window passes, the store still down.
				a := <-retry.got
				if e := jsonrpc.DecodeError(a.Error); a.Error == nil || !strings.Contains(e.Message, "ran, but its outcome could not be recorded yet") {
					t.Fatalf("retry got %s %s; want its outcome not recorded yet", a.Error, a.Result)
				}
				store.down.Store(false)
				if err := h.in.Wait(t.Context()); err != nil {
					t.Fatal(err)
				}
				if n := h.up.calls.Load(); n != 1 {
					t.Fatalf("upstream reached %d times; want 1", n)
				}
			})
		})
	}
}

// onReply is a Replier that calls then, once it has the answer, before
// it returns: what the caller does at once, before the proxy goes on.
type onReply struct {
	*answers
	then func()
}

func (r onReply) Reply(a Answer) error {
	err := r.answers.Reply(a)
	r.then()
	return err
}

// TestRetryInOutageAtTheFirstAnswer: a retry made the moment its first
// caller is told the outcome could not be recorded, while the execution
// that got it is still ending, meets that outcome, not an execution under
// way: a tool that replays only undelivered answers is not attached to
// it, and the retry gets the store's refusal, as one made a moment later.
func TestRetryInOutageAtTheFirstAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, release := newHeldHarness()
		h.pol.Replay = policy.ReplayUndelivered
		store := downable(t, h, nil)
		req, first := h.request(t, chargeCall)
		retryReq, retry := h.request(t, chargeCall)
		req.Reply = onReply{first, func() {
			h.in.Handle(t.Context(), retryReq)
			synctest.Wait() // the retry answered, or attached
		}}
		h.in.Handle(t.Context(), req)
		synctest.Wait() // dispatched: the upstream holds it
		store.down.Store(true)
		close(release)
		if a := <-first.got; a.Error == nil {
			t.Fatalf("first call got %s; want its outcome not recorded yet", a.Result)
		}
		a := <-retry.got
		if e := jsonrpc.DecodeError(a.Error); a.Error == nil || !strings.Contains(e.Message, "not executed") {
			t.Fatalf("retry got %s %s; want the store's refusal", a.Error, a.Result)
		}
	})
}

// TestRetryInOutageAttachesToAnExecutionWaitingForItsAccount: a retry
// made while the store is down, of a call this process reserved and
// holds until its account has room, is not told that the call was not
// executed: it runs once the account lets it. The retry attaches to it,
// as the store would have, and gets its outcome; the tool ran once.
func TestRetryInOutageAttachesToAnExecutionWaitingForItsAccount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, release := newHeldHarness()
		a := policy.Account{Name: "bank", Rate: 100, Burst: 100, MaxConcurrency: 1}
		store := downable(t, h, map[string]policy.Account{a.Name: a})
		h.pol.Retry = &policy.RetryRule{MaxAttempts: 1, Base: time.Millisecond, Cap: time.Millisecond, Account: a.Name}
		releaseOnce := sync.OnceFunc(func() { close(release) })
		defer releaseOnce() // on a failure, too: nothing is left blocked
		first := h.call(t.Context(), t, charge(1))
		synctest.Wait() // charge(1) holds the account's one slot
		second := h.call(t.Context(), t, charge(2))
		synctest.Wait() // charge(2) reserved, waiting for the slot
		store.down.Store(true)
		retry := h.call(t.Context(), t, charge(2))
		synctest.Wait()
		if retry.count() != 0 {
			a := <-retry.got
			t.Fatalf("retry while the store is down got %s %s; want it attached to the execution waiting for its account", a.Error, a.Result)
		}
		store.down.Store(false)
		releaseOnce()
		first.only(t)
		if v := view(t, second.only(t)); v.Content[0].Text != "charge #2" {
			t.Fatalf("second call got %+v; want charge #2", v)
		}
		if v := view(t, retry.only(t)); v.Content[0].Text != "charge #2" {
			t.Fatalf("retry got %+v; want the execution's outcome, charge #2", v)
		}
		if err := h.in.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
		if n := h.up.calls.Load(); n != 2 {
			t.Fatalf("upstream reached %d times; want 2", n)
		}
	})
}

// TestRetryInOutageToldItsExecutionWasNotSent: a retry attached in a
// store outage to an execution waiting for its account, whose dispatch
// the store, still down, then refused, is told at the end of its wait
// what the first caller was: the call was not executed. Not "still in
// progress": nothing will send it.
func TestRetryInOutageToldItsExecutionWasNotSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, release := newHeldHarness()
		acct := policy.Account{Name: "bank", Rate: 100, Burst: 100, MaxConcurrency: 1}
		store := downable(t, h, map[string]policy.Account{acct.Name: acct})
		h.pol.Retry = &policy.RetryRule{MaxAttempts: 1, Base: time.Millisecond, Cap: time.Millisecond, Account: acct.Name}
		releaseOnce := sync.OnceFunc(func() { close(release) })
		defer releaseOnce() // on a failure, too: nothing is left blocked
		first := h.call(t.Context(), t, charge(1))
		synctest.Wait() // charge(1) holds the account's one slot
		second := h.call(t.Context(), t, charge(2))
		synctest.Wait() // charge(2) reserved, waiting for the slot
		store.down.Store(true)
		retry := h.call(t.Context(), t, charge(2))
		synctest.Wait() // attached
		releaseOnce()
		first.only(t)
		if a := second.only(t); a.Error == nil || !strings.Contains(jsonrpc.DecodeError(a.Error).Message, "not executed") {
			t.Fatalf("second call got %s %s; want not executed", a.Error, a.Result)
		}
		// The attach window passes, the store still down.
		a := <-retry.got
		if e := jsonrpc.DecodeError(a.Error); a.Error == nil || !strings.Contains(e.Message, "was not sent: the store refused the dispatch") {
			t.Fatalf("retry got %s %s; want not sent, as the first caller was told", a.Error, a.Result)
		}
		if n := h.up.calls.Load(); n != 1 {
			t.Fatalf("upstream reached %d times; want 1", n)
		}
	})
}
