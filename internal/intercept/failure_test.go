package intercept

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

// TestTakenOverWhileSent: when the store already holds another outcome
// for an execution as its send comes back (this process's lease lapsed,
// and another process took it over, sent it again and settled it), the
// caller gets the stored outcome, not an error saying it will be recorded.
func TestTakenOverWhileSent(t *testing.T) {
	var h *harness
	h = newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
		// Meanwhile, in another process:
		id := h.store.Records()[0].ID
		for _, c := range []record.Change{
			{To: record.Unknown, Note: "taken over"},
			{To: record.Dispatched},
			{To: record.Completed, Result: json.RawMessage(`{"content":[{"type":"text","text":"charge #B"}]}`)},
			{To: record.Delivered},
		} {
			if _, err := h.store.Update(ctx, id, c); err != nil {
				return nil, err
			}
		}
		return charged(ctx, n, p)
	})
	v := view(t, h.call(t.Context(), t, chargeCall).only(t))
	if !v.Meta.Replayed || v.Content[0].Text != "charge #B" {
		t.Fatalf("the first caller got %+v; want the stored outcome, replayed", v)
	}
}

// TestTakenOverAndRunningAgain: when this process's lease lapsed and
// another process took the execution over and is running it again, the
// store refuses this process's outcome (fencing), and its caller waits
// for the other's, which is the one recorded.
func TestTakenOverAndRunningAgain(t *testing.T) {
	var h *harness
	otherDone := make(chan error, 1)
	h = newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
		// Meanwhile, in another process, which will answer later:
		id := h.store.Records()[0].ID
		for _, c := range []record.Change{
			{To: record.Unknown, Note: "taken over"},
			{To: record.Dispatched, From: record.Unknown, Owner: "proxy-B", Lease: time.Minute},
		} {
			if _, err := h.store.Update(ctx, id, c); err != nil {
				return nil, err
			}
		}
		go func() {
			time.Sleep(50 * time.Millisecond)
			_, err := h.store.Update(context.Background(), id, record.Change{To: record.Completed, Holder: "proxy-B",
				Result: json.RawMessage(`{"content":[{"type":"text","text":"charge #B"}]}`)})
			otherDone <- err
		}()
		return charged(ctx, n, p)
	})
	v := view(t, h.call(t.Context(), t, chargeCall).only(t))
	if err := <-otherDone; err != nil {
		t.Fatalf("the other process's outcome: %v; want it recorded", err)
	}
	if v.Content[0].Text != "charge #B" {
		t.Fatalf("the first caller got %+v; want the other process's outcome", v)
	}
}

// TestNoSecretFailsClosed: without the fingerprint secret (a durable
// store that keeps it could not be reached at start), a side effect is
// refused as with the store down, and runs once the secret is known.
func TestNoSecretFailsClosed(t *testing.T) {
	h := newHarness(charged)
	hasher := fingerprint.Pending()
	h.in = New(Options{Store: h.store, Hasher: hasher})
	a := h.call(t.Context(), t, chargeCall).only(t)
	if e := jsonrpc.DecodeError(a.Error); a.Error == nil || e.Code != jsonrpc.CodeInternalError || !strings.Contains(e.Message, "store is unavailable") {
		t.Fatalf("a call without the secret got %+v; want -32603 saying the store is unavailable", a)
	}
	if n := h.up.calls.Load(); n != 0 || len(h.store.Records()) != 0 {
		t.Fatalf("%d sends, %d records; want none", n, len(h.store.Records()))
	}
	if err := hasher.SetSecret([]byte("0123456789abcdef0123")); err != nil {
		t.Fatal(err)
	}
	if v := view(t, h.call(t.Context(), t, chargeCall).only(t)); v.Content[0].Text != "charge #1" {
		t.Fatalf("once the secret is known the call got %+v; want it run", v)
	}
}

func TestUpstreamErrorFailsAndRunsAgain(t *testing.T) {
	h := newHarness(func(_ context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
		if n == 1 {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "amount too large"}
		}
		return charged(context.Background(), n, p)
	})
	a := h.call(t.Context(), t, chargeCall).only(t)
	if a.Error == nil || !strings.Contains(string(a.Error), "amount too large") {
		t.Fatalf("first call got %+v; want the upstream's JSON-RPC error as it came", a)
	}
	if v := view(t, h.call(t.Context(), t, chargeCall).only(t)); v.Meta.Replayed || v.Content[0].Text != "charge #2" {
		t.Fatalf("call after a failure got %+v; want a new execution", v)
	}
}

func TestNotSentFailsAndRunsAgain(t *testing.T) {
	h := newHarness(func(_ context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
		if n == 1 {
			return nil, retry.NotSent(errors.New("the upstream has closed"))
		}
		return charged(context.Background(), n, p)
	})
	a := h.call(t.Context(), t, chargeCall).only(t)
	e := jsonrpc.DecodeError(a.Error)
	if a.Error == nil || !strings.Contains(e.Message, "failed before it was sent") {
		t.Fatalf("first call got %+v; want an error saying nothing ran", a)
	}
	h.call(t.Context(), t, chargeCall).only(t)
	if n := h.up.calls.Load(); n != 2 {
		t.Fatalf("upstream reached %d times; a call that was never sent must run on the next try", n)
	}
}

func TestOutcomeUnknownIsNeverResent(t *testing.T) {
	h := newHarness(func(context.Context, int, json.RawMessage) (json.RawMessage, error) {
		return nil, errors.New("the upstream exited before answering")
	})
	for i := range 2 {
		v := view(t, h.call(t.Context(), t, chargeCall).only(t))
		if !v.IsError || !strings.HasPrefix(v.Content[0].Text, "Outcome unknown:") ||
			!strings.Contains(v.Content[0].Text, v.Meta.Execution.ID) || v.Meta.Outcome != "unknown" {
			t.Fatalf("call %d got %+v; want an outcome-unknown result naming the execution", i+1, v)
		}
	}
	if n := h.up.calls.Load(); n != 1 {
		t.Fatalf("upstream reached %d times; an unknown outcome must never be re-sent", n)
	}
}

// failingStore refuses every reservation, like a store that is down.
type failingStore struct{ record.Store }

func (failingStore) Reserve(context.Context, *record.Record, record.ReserveOptions) (*record.Record, bool, error) {
	return nil, false, errors.New("connection refused")
}

func TestStoreDownFailsClosed(t *testing.T) {
	h := newHarness(charged)
	h.in = New(Options{Store: failingStore{}, Hasher: fingerprint.NewRandom()})
	a := h.call(t.Context(), t, chargeCall).only(t)
	if e := jsonrpc.DecodeError(a.Error); a.Error == nil || !strings.Contains(e.Message, "store is unavailable") {
		t.Fatalf("got %+v; want an error saying the store is unavailable", a)
	}
	if n := h.up.calls.Load(); n != 0 {
		t.Fatalf("upstream reached %d times without a reservation; want 0", n)
	}
}

// TestOutcomeRecordedWhenTheStoreIsBack: an outcome the store refused to
// record is recorded once the store takes it again: the execution does
// not stay in flight, and calling again replays it instead of waiting on
// it (or running it again).
func TestOutcomeRecordedWhenTheStoreIsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(charged)
		store := &recordtest.UpdatesDown{Store: h.store}
		h.in = New(Options{Store: store, Hasher: fingerprint.NewRandom()})
		store.Down.Store(true)
		a := h.call(t.Context(), t, chargeCall).only(t)
		if e := jsonrpc.DecodeError(a.Error); a.Error == nil || !strings.Contains(e.Message, "ran, but its outcome could not be recorded yet") {
			t.Fatalf("got %+v; want an error saying the call ran and its outcome is not recorded yet", a)
		}
		time.Sleep(time.Second) // the store stays down a while
		store.Down.Store(false)
		if err := h.in.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
		if r := h.onlyRecord(t); r.State != record.Completed {
			t.Fatalf("record %s; want completed once the store is back", r.State)
		}
		v := view(t, h.call(t.Context(), t, chargeCall).only(t))
		if !v.Meta.Replayed || v.Content[0].Text != "charge #1" {
			t.Fatalf("calling again got %+v; want the outcome replayed", v)
		}
		if n := h.up.calls.Load(); n != 1 {
			t.Fatalf("upstream reached %d times; want 1", n)
		}
	})
}

// answerLost is a memory store whose first outcome write is taken but
// answered with an error, as a Redis write whose reply timed out.
type answerLost struct {
	record.Store
	lost atomic.Bool
}

func (s *answerLost) Update(ctx context.Context, id string, c record.Change) (*record.Record, error) {
	rec, err := s.Store.Update(ctx, id, c)
	if err == nil && c.To.Settled() && s.lost.CompareAndSwap(false, true) {
		return nil, errors.New("updating " + id + ": i/o timeout")
	}
	return rec, err
}

// TestOutcomeTakenThoughItsAnswerWasLost: an outcome write that reached
// the store though its answer was lost is found recorded on the next
// try, and journaled, not reported as refused: the journal keeps its
// completed line.
func TestOutcomeTakenThoughItsAnswerWasLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(charged)
		j := &memJournal{}
		h.in = New(Options{Store: &answerLost{Store: h.store}, Hasher: fingerprint.NewRandom(), Journal: j})
		a := h.call(t.Context(), t, chargeCall).only(t)
		if e := jsonrpc.DecodeError(a.Error); a.Error == nil || !strings.Contains(e.Message, "could not be recorded yet") {
			t.Fatalf("got %+v; want an error saying the outcome is not recorded yet", a)
		}
		if err := h.in.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got, want := j.states(), []string{"accepted", "dispatched", "completed"}; !slices.Equal(got, want) {
			t.Fatalf("journal states %q; want %q", got, want)
		}
	})
}

// waitsFail is a memory store whose Wait fails while down is set, like a
// store whose connection dropped under a waiter.
type waitsFail struct {
	*memstore.Store
	down atomic.Bool
}

func (s *waitsFail) Wait(ctx context.Context, id string) (*record.Record, error) {
	if s.down.Load() {
		return nil, errors.New("waiting for " + id + ": connection reset by peer")
	}
	return s.Store.Wait(ctx, id)
}

// TestWaiterOutlivesAStoreFailure: a caller attached to an execution under
// way, whose store fails while it waits, waits on and gets the
// execution's answer, not an error that says neither whether the tool ran
// nor what to do.
func TestWaiterOutlivesAStoreFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, release := newHeldHarness()
		store := &waitsFail{Store: h.store}
		h.in = New(Options{Store: store, Hasher: fingerprint.NewRandom()})
		store.down.Store(true)
		first := h.call(t.Context(), t, chargeCall)
		second := h.call(t.Context(), t, chargeCall)
		synctest.Wait() // the second caller's wait has failed once
		time.Sleep(time.Second)
		store.down.Store(false)
		close(release)
		for i, a := range []*answers{first, second} {
			if v := view(t, a.only(t)); len(v.Content) == 0 || v.Content[0].Text != "charge #1" {
				t.Errorf("caller %d got %+v; want charge #1", i+1, v)
			}
		}
		if n := h.up.calls.Load(); n != 1 {
			t.Fatalf("upstream reached %d times; want 1", n)
		}
	})
}

// takenOver is a memory store in which another process takes over every
// execution between its reservation and its dispatch, settling it as
// never sent, as it does when this process's lease lapses meanwhile.
type takenOver struct{ *memstore.Store }

func (s takenOver) Reserve(ctx context.Context, r *record.Record, opts record.ReserveOptions) (*record.Record, bool, error) {
	opts.Dispatch = false // reserved, then dispatched in a step of its own
	return s.Store.Reserve(ctx, r, opts)
}

func (s takenOver) Update(ctx context.Context, id string, c record.Change) (*record.Record, error) {
	if c.To == record.Dispatched {
		if _, err := s.Store.Update(ctx, id, record.Change{To: record.Failed, Note: "the lease lapsed before dispatch"}); err != nil {
			return nil, err
		}
	}
	return s.Store.Update(ctx, id, c)
}

// TestTakenOverBeforeDispatch: a caller whose execution another process
// settled before it was sent is told that nothing ran and that calling
// again runs it, and nothing is sent.
func TestTakenOverBeforeDispatch(t *testing.T) {
	h := newHarness(charged)
	h.in = New(Options{Store: takenOver{h.store}, Hasher: fingerprint.NewRandom()})
	a := h.call(t.Context(), t, chargeCall).only(t)
	if e := jsonrpc.DecodeError(a.Error); a.Error == nil || !strings.Contains(e.Message, "failed before it was sent") || !strings.Contains(e.Message, "nothing ran") {
		t.Fatalf("got result %s, error %s; want an error saying nothing ran", a.Result, a.Error)
	}
	if n := h.up.calls.Load(); n != 0 {
		t.Fatalf("upstream reached %d times; want 0", n)
	}
}

// TestRetriesSendNoProgressToken: an attempt after the first goes without
// the client's progress token, whose progress the first attempt gave.
func TestRetriesSendNoProgressToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var sent []string
		busy := busyThen(1)
		h := newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
			mu.Lock()
			sent = append(sent, string(p))
			mu.Unlock()
			return busy(ctx, n, p)
		})
		h.pol.Retry = retryRule(true)
		h.call(t.Context(), t, `{"name":"charge_card","arguments":{"amount":1},"_meta":{"progressToken":"p1"}}`).only(t)
		if len(sent) != 2 || !strings.Contains(sent[0], `"progressToken":"p1"`) || strings.Contains(sent[1], "progressToken") {
			t.Fatalf("sent %q; want the first attempt with the progress token, the second without", sent)
		}
	})
}
