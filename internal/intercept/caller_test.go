package intercept

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

func TestCancelledCallerDetachesAndTheAnswerWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, release := newHeldHarness()
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan *answers)
		go func() { done <- h.call(ctx, t, chargeCall) }()
		synctest.Wait()
		if r := h.onlyRecord(t); r.State != record.Dispatched {
			t.Fatalf("state %s; want dispatched", r.State)
		}
		cancel()
		a := <-done
		close(release) // the execution goes on without its caller
		if err := h.in.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
		if a.count() != 0 {
			t.Fatalf("a caller that cancelled got %d answers; want none", a.count())
		}
		if r := h.onlyRecord(t); r.State != record.Completed {
			t.Fatalf("state %s after the cancelled caller's execution finished; want completed (not delivered)", r.State)
		}
		v := view(t, h.call(t.Context(), t, chargeCall).only(t))
		if !v.Meta.Replayed || v.Content[0].Text != "charge #1" {
			t.Fatalf("retry after a cancel got %+v; want the stored answer", v)
		}
		if r := h.onlyRecord(t); r.State != record.Delivered {
			t.Fatalf("state %s after the replay was written; want delivered", r.State)
		}
		if n := h.up.calls.Load(); n != 1 {
			t.Fatalf("upstream ran %d times; want 1", n)
		}
	})
}

func TestOneCallerCancellingLeavesTheOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, release := newHeldHarness()
		ctx, cancel := context.WithCancel(t.Context())
		first := make(chan *answers)
		go func() { first <- h.call(ctx, t, chargeCall) }()
		second := make(chan *answers)
		go func() { second <- h.call(t.Context(), t, chargeCall) }()
		synctest.Wait()
		cancel()
		cancelled := <-first
		close(release)
		if v := view(t, (<-second).only(t)); v.Content[0].Text != "charge #1" {
			t.Fatalf("the remaining caller got %+v", v)
		}
		if n := h.up.calls.Load(); n != 1 {
			t.Fatalf("upstream ran %d times; want 1", n)
		}
		if cancelled.count() != 0 {
			t.Fatalf("the caller that cancelled got %d answers; want none", cancelled.count())
		}
	})
}

// TestAttachedCallerIsToldItWaits: a caller attached to an execution
// under way, that asked for progress, is told at once that it is
// attached, and again every approvalProgress while it waits, so that a
// client that resets its timeout on progress (most retries come after a
// timeout) waits for the outcome instead of timing out again. Nothing is
// sent it after its answer.
func TestAttachedCallerIsToldItWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, release := newHeldHarness()
		h.pol.AttachWindow = 5 * time.Minute
		// A lease past the test: nothing here renews it.
		h.in = New(Options{Store: h.store, Hasher: fingerprint.NewRandom(), Lease: time.Hour})
		first := h.call(t.Context(), t, chargeCall)
		synctest.Wait()
		attached := newAsker(nil)
		h.askingCall(t, attached, "session:2", chargeCall)
		synctest.Wait()
		time.Sleep(2*approvalProgress + time.Second)
		synctest.Wait()
		attached.mu.Lock()
		told := slices.Clone(attached.progress)
		attached.mu.Unlock()
		rec := h.onlyRecord(t)
		if len(told) != 3 || !strings.Contains(told[0], "attached to execution "+rec.ID) {
			t.Fatalf("after %v attached, the caller was told %q; want three notes that it is attached to %s", 2*approvalProgress+time.Second, told, rec.ID)
		}
		close(release)
		if v := view(t, attached.only(t)); v.Content[0].Text != "charge #1" {
			t.Fatalf("the attached caller got %+v", v)
		}
		first.only(t)
		time.Sleep(2 * approvalProgress)
		synctest.Wait()
		attached.mu.Lock()
		defer attached.mu.Unlock()
		if len(attached.progress) != len(told) {
			t.Errorf("the caller was told %q after its answer", attached.progress[len(told):])
		}
	})
}

func TestAttachWindowAnswersStillInProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, release := newHeldHarness()
		h.pol.AttachWindow = 5 * time.Second
		first := h.call(t.Context(), t, chargeCall) // dispatched; the upstream holds it
		v := view(t, h.call(t.Context(), t, chargeCall).only(t))
		if !v.IsError || !strings.HasPrefix(v.Content[0].Text, "Still in progress:") ||
			!strings.Contains(v.Content[0].Text, "Do not retry") || v.Meta.Outcome != "in_progress" {
			t.Fatalf("after the attach window: %+v; want a still-in-progress result", v)
		}
		if first.count() != 0 {
			t.Fatal("the originator was answered before the upstream answered")
		}
		close(release)
		if v := view(t, first.only(t)); v.Content[0].Text != "charge #1" {
			t.Fatalf("the originator got %+v once the upstream answered", v)
		}
		if v := view(t, h.call(t.Context(), t, chargeCall).only(t)); v.Content[0].Text != "charge #1" || !v.Meta.Replayed {
			t.Fatalf("after the execution finished: %+v; want its answer replayed", v)
		}
	})
}

// TestAttachWindowFromArrival: an attached caller's window counts from
// its arrival (docs/concepts.md), not from when the store answered its
// reservation, which may take a while.
func TestAttachWindowFromArrival(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, release := newHeldHarness()
		defer close(release)
		h.in = New(Options{Store: slowReserve{h.store}, Hasher: fingerprint.NewRandom()})
		h.pol.AttachWindow = 5 * time.Second
		h.call(t.Context(), t, chargeCall) // dispatched; the upstream holds it
		synctest.Wait()
		arrived := time.Now()
		v := view(t, h.call(t.Context(), t, chargeCall).only(t))
		if waited := time.Since(arrived); !strings.HasPrefix(v.Content[0].Text, "Still in progress") || waited != 5*time.Second {
			t.Fatalf("the attached caller was answered %q %v after it arrived; want \"Still in progress\" at the 5s attach window's end", v.Content[0].Text, waited)
		}
		if !strings.Contains(v.Content[0].Text, "after 5s") {
			t.Errorf("the answer says %q; want the wait it had, 5s", v.Content[0].Text)
		}
	})
}

// A slowReserve store takes 3 s to answer each reservation.
type slowReserve struct{ record.Store }

func (s slowReserve) Reserve(ctx context.Context, r *record.Record, opts record.ReserveOptions) (*record.Record, bool, error) {
	time.Sleep(3 * time.Second)
	return s.Store.Reserve(ctx, r, opts)
}

// TestDeliveredWhenWritten: over a transport that learns of the delivery
// later, the execution is completed when the answer is handed over, and
// delivered only once the transport says the caller got it; so with
// replay: undelivered, a call after an answer that never reached its
// caller is answered from the record, not run again.
func TestDeliveredWhenWritten(t *testing.T) {
	h := newHarness(charged)
	h.pol.Replay = policy.ReplayUndelivered
	call := func() (*laterAnswers, func(error)) {
		tc, _ := mcp.ParseToolCall(json.RawMessage(chargeCall))
		a := &laterAnswers{answers: newAnswers(), written: make(chan func(error), 1)}
		h.in.Handle(t.Context(), &Request{Call: tc, Policy: &h.pol, Origin: &Origin{Actor: "alice", Scope: "session:1", UpstreamID: "stdio:bank"},
			Upstream: h.up, Reply: a, Correlation: "test"})
		a.only(t)
		return a, <-a.written
	}
	_, written := call() // the transport never writes it: the caller dropped
	if err := h.in.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	if r := h.onlyRecord(t); r.State != record.Completed {
		t.Fatalf("record %s before the answer was written; want completed", r.State)
	}
	_, written = call()
	if n := h.up.calls.Load(); n != 1 {
		t.Fatalf("upstream reached %d times; an answer never written is replayed, not run again", n)
	}
	written(nil) // this one reached its caller
	if r := h.onlyRecord(t); r.State != record.Delivered {
		t.Fatalf("record %s once the answer was written; want delivered", r.State)
	}
}

// TestSessionEndedBeforeTheReservation: a call whose session ended before
// it was reserved did not leave, as a cancelled caller does: it is told,
// and nothing runs or is recorded.
func TestSessionEndedBeforeTheReservation(t *testing.T) {
	h := newHarness(charged)
	ended := newEndable(t.Context())
	ended.end(ErrSessionEnded)
	ans := h.call(ended, t, chargeCall).only(t)
	if ans.Error == nil || !strings.Contains(string(ans.Error), "session ended before charge_card was executed; it did not run") {
		t.Fatalf("got %+v; want an error saying the call did not run", ans)
	}
	if n := h.up.calls.Load(); n != 0 {
		t.Fatalf("the upstream ran %d calls; want none", n)
	}
	if v := view(t, h.call(t.Context(), t, chargeCall).only(t)); v.Content[0].Text != "charge #1" || v.Meta.Replayed {
		t.Fatalf("calling again got %+v; want a new execution", v)
	}
}

// waitsForEver is a memory store whose Wait never sees the execution
// settle, as a waiter on a shared store may not before its session ends.
type waitsForEver struct{ *memstore.Store }

func (waitsForEver) Wait(ctx context.Context, _ string) (*record.Record, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestSessionEndAnswersFromTheRecord: a caller attached to an execution
// that settled as unknown before the caller's session ended is told the
// outcome is unknown, not that the execution is still in progress.
func TestSessionEndAnswersFromTheRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		h := newHarness(func(context.Context, int, json.RawMessage) (json.RawMessage, error) {
			<-release
			return nil, errors.New("the upstream exited before answering")
		})
		h.in = New(Options{Store: waitsForEver{h.store}, Hasher: fingerprint.NewRandom()})
		first := h.call(t.Context(), t, chargeCall)
		ctx := newEndable(t.Context())
		attached := h.call(ctx, t, chargeCall)
		synctest.Wait()
		close(release)
		if v := view(t, first.only(t)); !strings.HasPrefix(v.Content[0].Text, "Outcome unknown:") {
			t.Fatalf("the first caller got %+v; want outcome unknown", v)
		}
		ctx.end(ErrSessionEnded)
		if v := view(t, attached.only(t)); !strings.HasPrefix(v.Content[0].Text, "Outcome unknown:") {
			t.Fatalf("the attached caller got %+v at the session's end; want outcome unknown, as the record says", v)
		}
	})
}

// TestSessionEndAnswersAStatusCheck: a call whose status check (on_unknown
// recover) is cut off by the end of its session is still answered: the
// outcome stays unknown.
func TestSessionEndAnswersAStatusCheck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		status := make(chan struct{})
		h := newHarness(func(_ context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
			if n == 1 {
				return nil, errors.New("the upstream exited before answering")
			}
			<-status // the status check: cut off by the session's end
			return nil, errors.New("the session ended before the upstream answered")
		})
		h.pol.OnUnknown = policy.Recover
		h.pol.Recover = &policy.RecoverRule{Tool: "get_status"}
		h.call(t.Context(), t, chargeCall).only(t)
		ctx := newEndable(t.Context())
		a := h.call(ctx, t, chargeCall)
		synctest.Wait() // the status check is under way
		ctx.end(ErrSessionEnded)
		close(status)
		if v := view(t, a.only(t)); !strings.HasPrefix(v.Content[0].Text, "Outcome unknown:") {
			t.Fatalf("got %+v; want outcome unknown", v)
		}
		if n := h.up.calls.Load(); n != 2 {
			t.Fatalf("upstream reached %d times; want the call and its status check", n)
		}
	})
}

// TestCallerThatLeftIsNotLoggedAnswered: the log does not say a caller
// that cancelled its call was answered when the execution it left ends
// unknown: nothing is written to it.
func TestCallerThatLeftIsNotLoggedAnswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		h := newHarness(func(context.Context, int, json.RawMessage) (json.RawMessage, error) {
			<-release
			return nil, httpError(http.StatusGatewayTimeout, "") // sent, then no answer: unknown
		})
		var logs lockedBuffer
		h.in = New(Options{Store: h.store, Hasher: fingerprint.NewRandom(),
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan *answers)
		go func() { done <- h.call(ctx, t, chargeCall) }()
		synctest.Wait()
		cancel()
		if a := <-done; a.count() != 0 {
			t.Fatalf("a caller that cancelled got %d answers; want none", a.count())
		}
		close(release)
		if err := h.in.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
		if r := h.onlyRecord(t); r.State != record.Unknown {
			t.Fatalf("state %s; want unknown", r.State)
		}
		if out := logs.String(); strings.Contains(out, "answered outcome unknown") {
			t.Errorf("the log says the caller that left was answered:\n%s", out)
		}
	})
}

// lockedBuffer is a bytes.Buffer that goroutines may write at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// slowDelivery is a store whose first "delivered" update says so on
// entered, then waits for release.
type slowDelivery struct {
	*memstore.Store
	entered, release chan struct{}
	enter            sync.Once
}

func (s *slowDelivery) Update(ctx context.Context, id string, c record.Change) (*record.Record, error) {
	if c.To == record.Delivered {
		first := false
		s.enter.Do(func() { first = true; close(s.entered) })
		if first {
			<-s.release
		}
	}
	return s.Store.Update(ctx, id, c)
}

// waitingForDelivery reports whether a goroutine reserving a call waits
// for a delivery to be recorded.
func waitingForDelivery() bool {
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	for _, g := range strings.Split(stacks, "\n\n") {
		if strings.Contains(g, "(*journalGates).wait") && strings.Contains(g, "(*Interceptor).reserve") {
			return true
		}
	}
	return false
}

// TestUndeliveredAfterItsDelivery: with replay: undelivered, a call made
// once the caller got the answer runs again, even while the store is
// still recording that delivery: the caller already has the answer, so
// asking again is a new intent, not a retry.
func TestUndeliveredAfterItsDelivery(t *testing.T) {
	h := newHarness(charged)
	store := &slowDelivery{Store: h.store, entered: make(chan struct{}), release: make(chan struct{})}
	h.in = New(Options{Store: store, Hasher: fingerprint.NewRandom()})
	h.pol.Replay = policy.ReplayUndelivered
	tc, _ := mcp.ParseToolCall(json.RawMessage(chargeCall))
	a := &laterAnswers{answers: newAnswers(), written: make(chan func(error), 1)}
	h.in.Handle(t.Context(), &Request{Call: tc, Policy: &h.pol, Origin: &Origin{Actor: "alice", Scope: "session:1", UpstreamID: "stdio:bank"},
		Upstream: h.up, Reply: a, Correlation: "test"})
	a.only(t)
	written := <-a.written
	go written(nil) // the caller read it; the store records that slowly
	<-store.entered
	again := make(chan *answers, 1)
	go func() { again <- h.call(t.Context(), t, chargeCall) }()
	var got *answers
	for got == nil {
		select {
		case got = <-again: // answered while the delivery was unrecorded
			close(store.release)
		default:
			if waitingForDelivery() {
				close(store.release)
				got = <-again
			} else {
				runtime.Gosched()
			}
		}
	}
	v := view(t, got.only(t))
	if v.Content[0].Text != "charge #2" || v.Meta.Replayed {
		t.Fatalf("a call after the answer was delivered got %+v; want it run again", v)
	}
	if n := h.up.calls.Load(); n != 2 {
		t.Fatalf("upstream reached %d times; want 2", n)
	}
}

// orderedAnswers is laterAnswers over a transport that writes in order,
// as stdio does.
type orderedAnswers struct{ *laterAnswers }

func (orderedAnswers) WritesInOrder() bool { return true }

// TestUndeliveredBeforeWrittenIsTold: over a transport that writes in
// order, the caller may read its answer and ask again before the
// transport tells the proxy it wrote it. With replay: undelivered, that
// call runs again: the caller has the answer.
func TestUndeliveredBeforeWrittenIsTold(t *testing.T) {
	h := newHarness(charged)
	h.pol.Replay = policy.ReplayUndelivered
	tc, _ := mcp.ParseToolCall(json.RawMessage(chargeCall))
	a := orderedAnswers{&laterAnswers{answers: newAnswers(), written: make(chan func(error), 1)}}
	h.in.Handle(t.Context(), &Request{Call: tc, Policy: &h.pol, Origin: &Origin{Actor: "alice", Scope: "session:1", UpstreamID: "stdio:bank"},
		Upstream: h.up, Reply: a, Correlation: "test"})
	a.only(t) // the caller read it; written is not told yet
	written := <-a.written
	again := make(chan *answers, 1)
	go func() { again <- h.call(t.Context(), t, chargeCall) }()
	var got *answers
	for got == nil {
		select {
		case got = <-again: // answered before written was told
			written(nil)
		default:
			if waitingForDelivery() {
				written(nil)
				got = <-again
			} else {
				runtime.Gosched()
			}
		}
	}
	v := view(t, got.only(t))
	if v.Content[0].Text != "charge #2" || v.Meta.Replayed {
		t.Fatalf("a call after the answer was read got %+v; want it run again", v)
	}
}

// TestStillInProgressUnderReplayUndelivered: under replay: undelivered, a
// caller told "Still in progress" is not promised the answer on a retry:
// once the first caller has it, the same call runs again.
func TestStillInProgressUnderReplayUndelivered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, release := newHeldHarness()
		h.pol.Replay = policy.ReplayUndelivered
		h.pol.AttachWindow = 5 * time.Second
		first := h.call(t.Context(), t, chargeCall)
		text := view(t, h.call(t.Context(), t, chargeCall).only(t)).Content[0].Text
		close(release)
		first.only(t)
		h.in.Wait(t.Context())
		again := view(t, h.call(t.Context(), t, chargeCall).only(t)).Content[0].Text
		if again != "charge #2" || !strings.Contains(text, "the same call runs again") || strings.Contains(text, "returns its answer once it is done") {
			t.Fatalf("told %q, and the retry got %q; want the retry run again, as the caller was told", text, again)
		}
	})
}

// settlesAsWaitEnds is a store whose Wait, once a caller's wait ends
// unanswered, runs settle and waits for the execution to settle before
// it returns: the execution ends between the wait and the next read.
type settlesAsWaitEnds struct {
	*memstore.Store
	settle func()
	once   sync.Once
}

func (s *settlesAsWaitEnds) Wait(ctx context.Context, id string) (*record.Record, error) {
	rec, err := s.Store.Wait(ctx, id)
	if err != nil && ctx.Err() != nil {
		s.once.Do(func() {
			s.settle()
			s.Store.Wait(context.Background(), id)
		})
	}
	return rec, err
}

// TestSettledAsTheAttachWindowEnds: an execution that settles as a
// caller's attach window ends gives that caller its answer, not "Still
// in progress" of an execution that is over.
func TestSettledAsTheAttachWindowEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, release := newHeldHarness()
		store := &settlesAsWaitEnds{Store: h.store, settle: func() { close(release) }}
		h.in = New(Options{Store: store, Hasher: fingerprint.NewRandom()})
		h.pol.AttachWindow = 5 * time.Second
		first := h.call(t.Context(), t, chargeCall)
		v := view(t, h.call(t.Context(), t, chargeCall).only(t))
		if v.Content[0].Text != "charge #1" || !v.Meta.Replayed {
			t.Fatalf("the attached caller got %q; want the execution's answer replayed", v.Content[0].Text)
		}
		first.only(t)
	})
}
