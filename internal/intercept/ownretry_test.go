package intercept

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

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
				release := make(chan struct{})
				h := newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
					<-release
					return charged(ctx, n, p)
				})
				store := &allDown{Store: h.store}
				h.in = New(Options{Store: store, Hasher: fingerprint.NewRandom(), StoreWaits: true})
				releaseOnce := sync.OnceFunc(func() { close(release) })
				defer func() {
					// On a failure, too: nothing is left blocked.
					releaseOnce()
					store.down.Store(false)
					h.in.Wait(context.Background())
				}()
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
				release := make(chan struct{})
				h := newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
					<-release
					return charged(ctx, n, p)
				})
				tc.pol(&h.pol)
				store := &allDown{Store: h.store}
				h.in = New(Options{Store: store, Hasher: fingerprint.NewRandom(), StoreWaits: true})
				defer func() {
					store.down.Store(false)
					h.in.Wait(context.Background())
				}()
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
				release := make(chan struct{})
				h := newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
					<-release
					return charged(ctx, n, p)
				})
				store := &allDown{Store: h.store}
				h.in = New(Options{Store: store, Hasher: fingerprint.NewRandom(), StoreWaits: true})
				releaseOnce := sync.OnceFunc(func() { close(release) })
				defer func() {
					releaseOnce()
					store.down.Store(false)
					h.in.Wait(context.Background())
				}()
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
		release := make(chan struct{})
		h := newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
			<-release
			return charged(ctx, n, p)
		})
		h.pol.Replay = policy.ReplayUndelivered
		store := &allDown{Store: h.store}
		h.in = New(Options{Store: store, Hasher: fingerprint.NewRandom(), StoreWaits: true})
		defer func() {
			store.down.Store(false)
			h.in.Wait(context.Background())
		}()
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
