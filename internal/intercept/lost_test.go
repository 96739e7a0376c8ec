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

// amnesiac is a memory store that can lose every record it holds, as a
// Redis restarted without persistence, and whose updates fail while it
// is down.
type amnesiac struct {
	mu   sync.Mutex
	s    *memstore.Store
	down atomic.Bool
	// loseAtOutcome makes the next outcome's write lose the store's
	// records first, as a restart just before it would.
	loseAtOutcome atomic.Bool
}

func newAmnesiac() *amnesiac { return &amnesiac{s: memstore.New(memstore.Options{})} }

// lose forgets every record.
func (a *amnesiac) lose() {
	a.mu.Lock()
	a.s = memstore.New(memstore.Options{})
	a.mu.Unlock()
}

func (a *amnesiac) store() *memstore.Store {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.s
}

func (a *amnesiac) Reserve(ctx context.Context, r *record.Record, o record.ReserveOptions) (*record.Record, bool, error) {
	return a.store().Reserve(ctx, r, o)
}

func (a *amnesiac) Update(ctx context.Context, id string, c record.Change) (*record.Record, error) {
	if a.down.Load() {
		return nil, errDown
	}
	if c.To.Settled() && a.loseAtOutcome.CompareAndSwap(true, false) {
		a.lose()
	}
	return a.store().Update(ctx, id, c)
}

func (a *amnesiac) Get(ctx context.Context, id string) (*record.Record, error) {
	return a.store().Get(ctx, id)
}

// Wait waits in the store that holds the records now, and, as Redis's
// does on its backoff, finds a record that store lost gone.
func (a *amnesiac) Wait(ctx context.Context, id string) (*record.Record, error) {
	for {
		s := a.store()
		if _, err := s.Get(ctx, id); err != nil {
			return nil, err
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		rec, err := s.Wait(wctx, id)
		cancel()
		if err == nil || ctx.Err() != nil {
			return rec, err
		}
	}
}

func (a *amnesiac) Renew(ctx context.Context, owner string, until time.Time) error {
	return a.store().Renew(ctx, owner, until)
}

var errDown = errors.New("connection refused")

// onlyLost returns the one record an amnesiac holds.
func onlyLost(t *testing.T, a *amnesiac) *record.Record {
	t.Helper()
	recs := a.store().Records()
	if len(recs) != 1 {
		t.Fatalf("store holds %d records; want 1", len(recs))
	}
	return recs[0]
}

// TestOutcomeOfARecordTheStoreLost: a store that no longer holds an
// execution as its outcome comes back has lost its data. The execution is
// written again with its outcome: the caller gets it, and an identical
// call replays it rather than running the call a second time.
func TestOutcomeOfARecordTheStoreLost(t *testing.T) {
	h := newHarness(charged)
	store := newAmnesiac()
	h.in = New(Options{Store: store, Hasher: fingerprint.NewRandom()})
	store.loseAtOutcome.Store(true)
	v := view(t, h.call(t.Context(), t, chargeCall).only(t))
	if v.IsError || v.Content[0].Text != "charge #1" || v.Meta.Replayed {
		t.Fatalf("got %+v; want the tool's own result", v)
	}
	// The delivery is recorded once the answer is written: after the
	// caller has it.
	if err := h.in.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	r := onlyLost(t, store)
	if r.State != record.Delivered || r.History[1].Note != restoredNote {
		t.Fatalf("store holds %s in %s, history %+v; want it written again and delivered", r.ID, r.State, r.History)
	}
	v = view(t, h.call(t.Context(), t, chargeCall).only(t))
	if !v.Meta.Replayed || v.Content[0].Text != "charge #1" || v.Meta.Execution.ID != r.ID {
		t.Fatalf("calling again got %+v; want %s's outcome replayed", v, r.ID)
	}
	if n := h.up.calls.Load(); n != 1 {
		t.Fatalf("upstream reached %d times; want 1", n)
	}
	if err := h.in.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestRetryAfterTheStoreLostAnOutcomeItHeld: the store stops answering
// as a call runs, so its outcome is held, and the caller told that
// calling again attaches to it; the store comes back empty. The retry
// gets the held outcome, written again, without waiting for the next
// try to record it; the upstream ran the call once.
func TestRetryAfterTheStoreLostAnOutcomeItHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(charged)
		store := newAmnesiac()
		h.in = New(Options{Store: store, Hasher: fingerprint.NewRandom()})
		store.down.Store(true)
		a := h.call(t.Context(), t, chargeCall).only(t)
		if e := jsonrpc.DecodeError(a.Error); a.Error == nil || !strings.Contains(e.Message, "calling again attaches to it") {
			t.Fatalf("got %+v; want an error saying calling again attaches", a)
		}
		store.lose()
		store.down.Store(false)
		v := view(t, h.call(t.Context(), t, chargeCall).only(t))
		if !v.Meta.Replayed || v.Content[0].Text != "charge #1" {
			t.Fatalf("calling again got %+v; want the held outcome replayed", v)
		}
		if n := h.up.calls.Load(); n != 1 {
			t.Fatalf("upstream reached %d times; want 1", n)
		}
		if err := h.in.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
		if r := onlyLost(t, store); r.State != record.Delivered {
			t.Fatalf("record %s; want delivered", r.State)
		}
	})
}

// TestRestoredExecutionKeepsItsApproval: an approved execution that the
// store lost as it ran is written again with its approval: who decided,
// and through which channel, as the record of any approved call says.
func TestRestoredExecutionKeepsItsApproval(t *testing.T) {
	h := approving(policy.ApprovalEach, policy.ApproverClient)
	store := newAmnesiac()
	h.in = New(Options{Store: store, Hasher: fingerprint.NewRandom()})
	store.loseAtOutcome.Store(true)
	a := newAsker(elicited("accept", "looks right"))
	h.askingCall(t, a, "session:1", chargeCall)
	if v := view(t, a.only(t)); v.Content[0].Text != "charge #1" {
		t.Fatalf("the approved call got %q; want the charge", v.Content[0].Text)
	}
	if err := h.in.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	r := onlyLost(t, store)
	if d := decision(t, r, record.Authorized); d.By != "alice" || d.Via != record.ApproverClient || d.Note != "looks right" {
		t.Errorf("the approval is recorded again as %+v; want by alice, through client, with the note", d)
	}
}

// TestCallerAttachedAsTheStoreLostTheExecution: a caller attached to an
// execution under way as the store loses it waits on, as for a store that
// failed, rather than being told to call again: a call made then would
// run the action a second time. It gets the outcome once the process
// that sent the execution writes it again.
func TestCallerAttachedAsTheStoreLostTheExecution(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, release := newHeldHarness()
		store := newAmnesiac()
		h.in = New(Options{Store: store, Hasher: fingerprint.NewRandom()})
		first, a := h.request(t, chargeCall)
		h.in.Handle(t.Context(), first)
		synctest.Wait()
		second, b := h.request(t, chargeCall)
		h.in.Handle(t.Context(), second)
		synctest.Wait()
		store.lose()
		time.Sleep(time.Second)
		close(release)
		wantOneCharge(t, h, a, b, "the attached caller")
	})
}

// TestExecutionTakenOverAndExpiredIsNotWrittenAgain: a process whose
// store stopped answering for longer than its lease and an execution's
// retention may find the execution gone for its age, not for a loss of
// data: another process took it over, and the store dropped it once its
// retention ended. Its outcome is not written again over that takeover,
// and calls made after its retention are not answered with it.
func TestExecutionTakenOverAndExpiredIsNotWrittenAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, release := newHeldHarness()
		h.pol.Retention = time.Hour
		store := newAmnesiac()
		hasher := fingerprint.NewRandom()
		a := New(Options{Store: store, Hasher: hasher, Owner: "proxy-a"})
		b := New(Options{Store: store.store(), Hasher: hasher, Owner: "proxy-b"})
		h.in = a
		first := h.call(t.Context(), t, chargeCall)
		synctest.Wait()
		store.down.Store(true)
		close(release)
		if ans := first.only(t); ans.Error == nil {
			t.Fatalf("proxy-a's caller got %s; want its outcome not recorded yet", ans.Result)
		}
		time.Sleep(time.Minute) // proxy-a's lease lapses
		h.in = b
		if v := view(t, h.call(t.Context(), t, chargeCall).only(t)); v.Meta.Execution.State != record.Unknown {
			t.Fatalf("proxy-b's call got %+v; want the execution taken over, unknown", v)
		}
		sent := onlyLost(t, store)
		time.Sleep(2 * time.Hour)
		h.call(t.Context(), t, `{"name":"charge_card","arguments":{"card":"1","amount":1}}`).only(t) // the store purges
		store.down.Store(false)
		time.Sleep(time.Minute) // proxy-a tries its outcome again
		if err := a.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
		if r, err := store.Get(t.Context(), sent.ID); err == nil {
			t.Fatalf("the store holds %s again, %s, history %+v; want it left dropped", r.ID, r.State, r.History)
		}
		if err := b.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestLongCallLostIsWrittenAgain: a call that runs for longer than its
// lease and retention, its lease renewed all along, is written again
// when the store loses it: the renewals say no other process took it.
func TestLongCallLostIsWrittenAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, release := newHeldHarness()
		h.pol.Retention = time.Minute
		store := newAmnesiac()
		h.in = New(Options{Store: store, Hasher: fingerprint.NewRandom()})
		ctx, stop := context.WithCancel(t.Context())
		go h.in.KeepLeases(ctx)
		first := h.call(t.Context(), t, chargeCall)
		time.Sleep(10 * time.Minute)
		store.loseAtOutcome.Store(true)
		close(release)
		if v := view(t, first.only(t)); v.IsError || v.Content[0].Text != "charge #1" {
			t.Fatalf("got %+v; want the charge", v)
		}
		if err := h.in.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
		stop()
		if r := onlyLost(t, store); r.State != record.Delivered || r.History[1].Note != restoredNote {
			t.Fatalf("store holds %s in %s, history %+v; want it written again and delivered", r.ID, r.State, r.History)
		}
	})
}

// TestRetryAsTheStoreLostTheExecutionItRuns: a call identical to one
// this process runs, made once the store lost its record, wins a new
// reservation, but is not sent: it would run the action a second time.
// Its reservation is failed unsent, and it gets the outcome of the one
// under way, written again.
func TestRetryAsTheStoreLostTheExecutionItRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, release := newHeldHarness()
		store := newAmnesiac()
		// A store outside the process, as one that can lose a record is.
		h.in = New(Options{Store: store, Hasher: fingerprint.NewRandom(), StoreWaits: true})
		first := h.call(t.Context(), t, chargeCall)
		synctest.Wait()
		store.lose()
		retry := h.call(t.Context(), t, chargeCall)
		synctest.Wait()
		close(release)
		wantOneCharge(t, h, first, retry, "the retry")
		for _, r := range store.store().Records() {
			if r.State == record.Failed && r.History[len(r.History)-1].Note != runningNote {
				t.Errorf("the retry's reservation %s is failed with %+v; want the note that says why", r.ID, r.History)
			}
		}
	})
}

// wantOneCharge checks that the upstream ran the charge once: first, the
// caller that started it, got it, and other, named who, got it replayed;
// and that nothing is left under way.
func wantOneCharge(t *testing.T, h *harness, first, other *answers, who string) {
	t.Helper()
	if v := view(t, first.only(t)); v.IsError || v.Content[0].Text != "charge #1" {
		t.Fatalf("the first caller got %+v; want the charge", v)
	}
	ans := other.only(t)
	if ans.Error != nil {
		t.Fatalf("%s got %s; want the charge", who, ans.Error)
	}
	if v := view(t, ans); !v.Meta.Replayed || v.Content[0].Text != "charge #1" {
		t.Fatalf("%s got %+v; want the charge replayed", who, v)
	}
	if n := h.up.calls.Load(); n != 1 {
		t.Fatalf("upstream reached %d times; want 1", n)
	}
	if err := h.in.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestKeyReusedAsTheStoreLostTheExecutionItRuns: a client key this
// process runs an execution under, reused for other arguments once the
// store lost that execution's record, is refused as ever: the process
// still knows the key names another action. It reserves nothing, so the
// first execution is written again under the key, and a retry of it
// gets its answer.
func TestKeyReusedAsTheStoreLostTheExecutionItRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, release := newHeldHarness()
		store := newAmnesiac()
		h.in = New(Options{Store: store, Hasher: fingerprint.NewRandom(), StoreWaits: true})
		first := h.call(t.Context(), t, keyed("order-1", `{"amount":100}`))
		synctest.Wait()
		store.lose()
		other := h.call(t.Context(), t, keyed("order-1", `{"amount":999}`))
		synctest.Wait()
		close(release)
		ans := other.only(t)
		if e := jsonrpc.DecodeError(ans.Error); ans.Error == nil || e.Code != jsonrpc.CodeInvalidParams || !strings.Contains(e.Message, "arguments differ") {
			t.Fatalf("key order-1 reused for other arguments got %s %s; want -32602, not run", ans.Result, ans.Error)
		}
		if v := view(t, first.only(t)); v.IsError || v.Content[0].Text != "charge #1" {
			t.Fatalf("the first caller got %+v; want the charge", v)
		}
		if n := h.up.calls.Load(); n != 1 {
			t.Fatalf("upstream reached %d times; want 1", n)
		}
		if err := h.in.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
		// The first execution, written again, answers its key's retry.
		again := view(t, h.call(t.Context(), t, keyed("order-1", `{"amount":100}`)).only(t))
		if !again.Meta.Replayed || again.Content[0].Text != "charge #1" {
			t.Fatalf("a retry of the first call got %+v; want its charge replayed", again)
		}
		if n := h.up.calls.Load(); n != 1 {
			t.Fatalf("upstream reached %d times; want 1", n)
		}
	})
}

// TestSentCallsDrop checks drop, which skips its lock when nothing is
// held: it forgets the execution it names once added, and only that one.
func TestSentCallsDrop(t *testing.T) {
	var s sentCalls
	s.drop("k", "exe_a") // none held: nothing to do
	a := &record.Record{ID: "exe_a", Key: "k", Fingerprint: "fp"}
	s.add(a)
	s.drop("k", "exe_b") // another execution of the key: a stays
	if got := s.other(&record.Record{ID: "exe_c", Key: "k", Fingerprint: "fp"}); got != a {
		t.Fatalf("after dropping another execution, other = %v; want exe_a", got)
	}
	s.drop("k", "exe_a")
	if got := s.other(&record.Record{ID: "exe_c", Key: "k", Fingerprint: "fp"}); got != nil || s.n.Load() != 0 {
		t.Fatalf("after dropping exe_a, other = %v and %d held; want none", got, s.n.Load())
	}
}
