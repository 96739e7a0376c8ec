// Package recordtest is the semantics suite every record.Store passes.
package recordtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// A Clock is a settable time source for the store under test.
type Clock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

// NewClock returns a Clock set to t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock by d: forward, or back if d is negative.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// NewStore returns an empty store that reads the time from now.
type NewStore func(t *testing.T, now func() time.Time) record.Store

// Run runs the suite against stores made by newStore.
func Run(t *testing.T, newStore NewStore) {
	tests := []struct {
		name string
		fn   func(*testing.T, record.Store, *Clock)
	}{
		{"ReserveOnce", testReserveOnce},
		{"ConcurrentReserve", testConcurrentReserve},
		{"Lifecycle", testLifecycle},
		{"ForbiddenTransitions", testForbiddenTransitions},
		{"FailedIsReplaced", testFailedIsReplaced},
		{"ReplaceOption", testReplaceOption},
		{"Expiry", testExpiry},
		{"WaitWakesAll", testWaitWakesAll},
		{"WaitHonoursContext", testWaitHonoursContext},
		{"UnknownRedispatch", testUnknownRedispatch},
		{"NotFound", testNotFound},
		{"OrphanNotSentFails", testOrphanNotSentFails},
		{"OrphanSentIsUnknown", testOrphanSentIsUnknown},
		{"RenewKeepsTheLease", testRenewKeepsTheLease},
		{"WaitSettlesAnOrphan", testWaitSettlesAnOrphan},
		{"ConcurrentOrphanTakeover", testConcurrentOrphanTakeover},
		{"TakeoverIsReported", testTakeoverIsReported},
		{"ConcurrentTakeoverReportedOnce", testConcurrentTakeoverReportedOnce},
		{"List", testList},
		{"ResendWhileDispatched", testResendWhileDispatched},
		{"ConditionalClaim", testConditionalClaim},
		{"OnlyTheSameActionReplaces", testOnlyTheSameActionReplaces},
		{"PurgeSettlesOrphans", testPurgeSettlesOrphans},
		{"ReserveAndDispatch", testReserveAndDispatch},
		{"OrphanDispatchedOnReserve", testOrphanDispatchedOnReserve},
		{"KeyReuseIsNotAttached", testKeyReuseIsNotAttached},
		{"ReserveLeaseStartsAtTheWrite", testReserveLeaseStartsAtTheWrite},
		{"ClaimLeaseStartsAtTheWrite", testClaimLeaseStartsAtTheWrite},
		{"Approval", testApproval},
		{"Refusal", testRefusal},
		{"OrphanAuthorizedFails", testOrphanAuthorizedFails},
		{"LateOutcomeIsFenced", testLateOutcomeIsFenced},
		{"StaleClaimIsRefused", testStaleClaimIsRefused},
		{"DispatchedReservationAwaitsNothing", testDispatchedReservationAwaitsNothing},
		{"OrphanShowsPendingAttaches", testOrphanShowsPendingAttaches},
		{"TakeoverOnKeyReuseIsReported", testTakeoverOnKeyReuseIsReported},
		{"OutcomeNotUTF8", testOutcomeNotUTF8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
			tt.fn(t, newStore(t, clock.Now), clock)
		})
	}
}

var seq atomic.Int64

func newRecord(key string) *record.Record {
	return &record.Record{
		ID:          fmt.Sprintf("exe_test%08d", seq.Add(1)),
		Key:         key,
		Fingerprint: key,
		Actor:       "alice",
		Scope:       "session:1",
		Upstream:    "stdio:server",
		Tool:        "charge_card",
		Retention:   time.Hour,
	}
}

func mustReserve(t *testing.T, s record.Store, r *record.Record, opts record.ReserveOptions) (*record.Record, bool) {
	t.Helper()
	got, won, err := s.Reserve(context.Background(), r, opts)
	if err != nil {
		t.Fatalf("Reserve(%s): %v", r.Key, err)
	}
	return got, won
}

func mustUpdate(t *testing.T, s record.Store, id string, c record.Change) *record.Record {
	t.Helper()
	got, err := s.Update(context.Background(), id, c)
	if err != nil {
		t.Fatalf("Update(%s, %s): %v", id, c.To, err)
	}
	return got
}

func testReserveOnce(t *testing.T, s record.Store, _ *Clock) {
	first := newRecord("k1")
	got, won := mustReserve(t, s, first, record.ReserveOptions{})
	if !won || got.ID != first.ID || got.State != record.Accepted {
		t.Fatalf("first Reserve = %s %s won=%v; want %s accepted won", got.ID, got.State, won, first.ID)
	}
	got, won = mustReserve(t, s, newRecord("k1"), record.ReserveOptions{})
	if won || got.ID != first.ID {
		t.Fatalf("second Reserve = %s won=%v; want the first record %s, not won", got.ID, won, first.ID)
	}
	if got.Attached != 1 {
		t.Errorf("Attached = %d after one duplicate; want 1", got.Attached)
	}
	if _, won = mustReserve(t, s, newRecord("k2"), record.ReserveOptions{}); !won {
		t.Error("Reserve of another key did not win")
	}
}

func testConcurrentReserve(t *testing.T, s record.Store, _ *Clock) {
	const n = 1000
	var wins atomic.Int32
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			got, won, err := s.Reserve(context.Background(), newRecord("hot"), record.ReserveOptions{})
			if err != nil {
				t.Error(err)
				return
			}
			if won {
				wins.Add(1)
			}
			ids[i] = got.ID
		})
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d of %d concurrent reservations won; want exactly 1", wins.Load(), n)
	}
	for i, id := range ids {
		if id != ids[0] {
			t.Fatalf("caller %d got execution %s, caller 0 got %s; all must share one", i, id, ids[0])
		}
	}
	got, err := s.Get(context.Background(), ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if got.Attached != n-1 {
		t.Errorf("Attached = %d; want %d", got.Attached, n-1)
	}
}

func testLifecycle(t *testing.T, s record.Store, clock *Clock) {
	r, _ := mustReserve(t, s, newRecord("k"), record.ReserveOptions{})
	clock.Advance(time.Second)
	mustUpdate(t, s, r.ID, record.Change{To: record.Dispatched})
	clock.Advance(time.Second)
	result := json.RawMessage(`{"content":[{"type":"text","text":"charged"}]}`)
	mustUpdate(t, s, r.ID, record.Change{To: record.Completed, Result: result})
	clock.Advance(time.Second)
	got := mustUpdate(t, s, r.ID, record.Change{To: record.Delivered})
	mustUpdate(t, s, r.ID, record.Change{To: record.Delivered}) // a no-op, not an error
	// A conditional delivery learns that the record was delivered before.
	if _, err := s.Update(t.Context(), r.ID, record.Change{To: record.Delivered, From: record.Completed}); !errors.Is(err, record.ErrConflict) {
		t.Errorf("delivering a delivered record from completed: %v; want ErrConflict", err)
	}

	if got.State != record.Delivered || string(got.Result) != string(result) {
		t.Errorf("after delivery: state %s result %s", got.State, got.Result)
	}
	if got.Attempts != 1 {
		t.Errorf("Attempts = %d; want 1", got.Attempts)
	}
	want := []record.State{record.Accepted, record.Dispatched, record.Completed, record.Delivered}
	if len(got.History) != len(want) {
		t.Fatalf("History = %v; want states %v", got.History, want)
	}
	start := got.History[0].At
	for i, tr := range got.History {
		if tr.State != want[i] {
			t.Errorf("History[%d] = %s; want %s", i, tr.State, want[i])
		}
		if at := start.Add(time.Duration(i) * time.Second); !tr.At.Equal(at) {
			t.Errorf("History[%d] at %v; want %v", i, tr.At, at)
		}
	}
	if exp := got.At(record.Completed).Add(time.Hour); !got.ExpiresAt.Equal(exp) && !got.ExpiresAt.Equal(exp.Add(time.Second)) {
		t.Errorf("ExpiresAt = %v; want retention after settling (%v)", got.ExpiresAt, exp)
	}
}

func testForbiddenTransitions(t *testing.T, s record.Store, _ *Clock) {
	r, _ := mustReserve(t, s, newRecord("k"), record.ReserveOptions{})
	for _, to := range []record.State{record.Completed, record.Delivered, record.Unknown} {
		if _, err := s.Update(context.Background(), r.ID, record.Change{To: to}); !errors.Is(err, record.ErrConflict) {
			t.Errorf("accepted -> %s: err = %v; want ErrConflict", to, err)
		}
	}
	mustUpdate(t, s, r.ID, record.Change{To: record.Dispatched})
	mustUpdate(t, s, r.ID, record.Change{To: record.Completed, Result: json.RawMessage(`{}`)})
	if _, err := s.Update(context.Background(), r.ID, record.Change{To: record.Failed}); !errors.Is(err, record.ErrConflict) {
		t.Errorf("completed -> failed: err = %v; want ErrConflict", err)
	}
}

func testFailedIsReplaced(t *testing.T, s record.Store, _ *Clock) {
	r, _ := mustReserve(t, s, newRecord("k"), record.ReserveOptions{})
	mustUpdate(t, s, r.ID, record.Change{To: record.Failed, Note: "upstream not started"})
	next := newRecord("k")
	got, won := mustReserve(t, s, next, record.ReserveOptions{})
	if !won || got.ID != next.ID {
		t.Fatalf("Reserve after failure = %s won=%v; want a new execution %s", got.ID, won, next.ID)
	}
	old, err := s.Get(context.Background(), r.ID)
	if err != nil || old.State != record.Failed {
		t.Errorf("the failed record must stay readable by id: %v %v", old, err)
	}
}

func testReplaceOption(t *testing.T, s record.Store, _ *Clock) {
	r, _ := mustReserve(t, s, newRecord("k"), record.ReserveOptions{})
	mustUpdate(t, s, r.ID, record.Change{To: record.Dispatched})
	mustUpdate(t, s, r.ID, record.Change{To: record.Completed, Result: json.RawMessage(`{}`)})

	if _, won := mustReserve(t, s, newRecord("k"), record.ReserveOptions{Replace: []record.State{record.Delivered}}); won {
		t.Fatal("a completed record was replaced though only delivered ones may be")
	}
	mustUpdate(t, s, r.ID, record.Change{To: record.Delivered})
	if _, won := mustReserve(t, s, newRecord("k"), record.ReserveOptions{}); won {
		t.Fatal("a delivered record was replaced without the option")
	}
	if _, won := mustReserve(t, s, newRecord("k"), record.ReserveOptions{Replace: []record.State{record.Delivered}}); !won {
		t.Fatal("a delivered record was not replaced with Replace: [delivered]")
	}
}

func testExpiry(t *testing.T, s record.Store, clock *Clock) {
	r, _ := mustReserve(t, s, newRecord("k"), record.ReserveOptions{})
	clock.Advance(48 * time.Hour) // in flight: no expiry, however long
	if _, won := mustReserve(t, s, newRecord("k"), record.ReserveOptions{}); won {
		t.Fatal("an in-flight record expired")
	}
	mustUpdate(t, s, r.ID, record.Change{To: record.Dispatched})
	mustUpdate(t, s, r.ID, record.Change{To: record.Completed, Result: json.RawMessage(`{}`)})
	clock.Advance(time.Hour - time.Second)
	if _, won := mustReserve(t, s, newRecord("k"), record.ReserveOptions{}); won {
		t.Fatal("a completed record stopped matching before its retention ran out")
	}
	clock.Advance(time.Second)
	if _, won := mustReserve(t, s, newRecord("k"), record.ReserveOptions{}); !won {
		t.Fatal("a completed record still matched after its retention ran out")
	}
}

func testWaitWakesAll(t *testing.T, s record.Store, _ *Clock) {
	r, _ := mustReserve(t, s, newRecord("k"), record.ReserveOptions{})
	mustUpdate(t, s, r.ID, record.Change{To: record.Dispatched})

	const waiters = 50
	results := make(chan *record.Record, waiters)
	var started sync.WaitGroup
	for range waiters {
		started.Add(1)
		go func() {
			started.Done()
			got, err := s.Wait(context.Background(), r.ID)
			if err != nil {
				t.Error(err)
			}
			results <- got
		}()
	}
	started.Wait()
	mustUpdate(t, s, r.ID, record.Change{To: record.Completed, Result: json.RawMessage(`{"n":1}`)})
	for range waiters {
		got := <-results
		if got == nil || got.State != record.Completed || string(got.Result) != `{"n":1}` {
			t.Fatalf("a waiter got %+v; want the completed record", got)
		}
	}
	// A settled record answers at once.
	got, err := s.Wait(context.Background(), r.ID)
	if err != nil || got.State != record.Completed {
		t.Fatalf("Wait on a settled record = %v, %v", got, err)
	}
}

func testWaitHonoursContext(t *testing.T, s record.Store, _ *Clock) {
	r, _ := mustReserve(t, s, newRecord("k"), record.ReserveOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Wait(ctx, r.ID); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a cancelled context = %v; want context.Canceled", err)
	}
}

func testUnknownRedispatch(t *testing.T, s record.Store, _ *Clock) {
	r, _ := mustReserve(t, s, newRecord("k"), record.ReserveOptions{})
	mustUpdate(t, s, r.ID, record.Change{To: record.Dispatched})
	mustUpdate(t, s, r.ID, record.Change{To: record.Unknown, Note: "upstream exited"})
	if got, won := mustReserve(t, s, newRecord("k"), record.ReserveOptions{}); won || got.State != record.Unknown {
		t.Fatalf("Reserve over an unknown record = %s won=%v; an unknown outcome must be matched, never replaced", got.State, won)
	}
	got := mustUpdate(t, s, r.ID, record.Change{To: record.Dispatched, Note: "retry"})
	if got.Attempts != 2 {
		t.Errorf("Attempts = %d after a re-dispatch; want 2", got.Attempts)
	}
	done := make(chan *record.Record, 1)
	go func() {
		got, _ := s.Wait(context.Background(), r.ID)
		done <- got
	}()
	mustUpdate(t, s, r.ID, record.Change{To: record.Completed, Result: json.RawMessage(`{}`)})
	if got := <-done; got == nil || got.State != record.Completed {
		t.Fatalf("a waiter on a re-dispatched record got %+v", got)
	}
}

func testNotFound(t *testing.T, s record.Store, _ *Clock) {
	ctx := context.Background()
	if _, err := s.Get(ctx, "exe_missing"); !errors.Is(err, record.ErrNotFound) {
		t.Errorf("Get = %v; want ErrNotFound", err)
	}
	if _, err := s.Update(ctx, "exe_missing", record.Change{To: record.Dispatched}); !errors.Is(err, record.ErrNotFound) {
		t.Errorf("Update = %v; want ErrNotFound", err)
	}
	if _, err := s.Wait(ctx, "exe_missing"); !errors.Is(err, record.ErrNotFound) {
		t.Errorf("Wait = %v; want ErrNotFound", err)
	}
}

func leased(key, owner string, until time.Time) *record.Record {
	r := newRecord(key)
	r.Owner, r.LeaseUntil = owner, until
	return r
}

// testOrphanDispatchedOnReserve: an execution reserved to be sent at once
// whose owner went away is unknown, as any dispatched orphan, and its note
// says that it may not have been sent: nothing records the send itself.
func testOrphanDispatchedOnReserve(t *testing.T, s record.Store, clock *Clock) {
	r, _ := mustReserve(t, s, leased("k", "proxy-1", clock.Now().Add(10*time.Second)), record.ReserveOptions{Dispatch: true})
	clock.Advance(11 * time.Second) // proxy-1 died, before or after its send
	next, won := mustReserve(t, s, leased("k", "proxy-2", clock.Now().Add(10*time.Second)), record.ReserveOptions{Dispatch: true})
	if won || next.ID != r.ID || next.State != record.Unknown {
		t.Fatalf("Reserve over the orphan = %s %s won=%v; want %s, unknown", next.ID, next.State, won, r.ID)
	}
	if note := next.History[len(next.History)-1].Note; !strings.Contains(note, "may or may not have sent it") {
		t.Errorf("the orphan's note = %q; want it to say it may not have been sent", note)
	}
}

func testOrphanNotSentFails(t *testing.T, s record.Store, clock *Clock) {
	r, _ := mustReserve(t, s, leased("k", "proxy-1", clock.Now().Add(10*time.Second)), record.ReserveOptions{})
	clock.Advance(11 * time.Second) // proxy-1 died without sending
	next, won := mustReserve(t, s, leased("k", "proxy-2", clock.Now().Add(10*time.Second)), record.ReserveOptions{})
	if !won || next.ID == r.ID {
		t.Fatalf("Reserve over an orphan never sent = %s won=%v; want a new execution", next.ID, won)
	}
	old, err := s.Get(context.Background(), r.ID)
	if err != nil || old.State != record.Failed || !old.LeaseUntil.IsZero() {
		t.Fatalf("the orphan is %+v (%v); want failed, lease cleared", old, err)
	}
}

func testOrphanSentIsUnknown(t *testing.T, s record.Store, clock *Clock) {
	r, _ := mustReserve(t, s, leased("k", "proxy-1", clock.Now().Add(10*time.Second)), record.ReserveOptions{})
	mustUpdate(t, s, r.ID, record.Change{To: record.Dispatched})
	clock.Advance(11 * time.Second) // proxy-1 died after sending
	got, won := mustReserve(t, s, leased("k", "proxy-2", clock.Now().Add(10*time.Second)), record.ReserveOptions{})
	if won || got.ID != r.ID || got.State != record.Unknown {
		t.Fatalf("Reserve over a sent orphan = %s %s won=%v; want %s unknown, never re-sent", got.ID, got.State, won, r.ID)
	}
}

func testRenewKeepsTheLease(t *testing.T, s record.Store, clock *Clock) {
	mine, _ := mustReserve(t, s, leased("mine", "proxy-1", clock.Now().Add(10*time.Second)), record.ReserveOptions{})
	theirs, _ := mustReserve(t, s, leased("theirs", "proxy-2", clock.Now().Add(10*time.Second)), record.ReserveOptions{})
	mustUpdate(t, s, mine.ID, record.Change{To: record.Dispatched})
	mustUpdate(t, s, theirs.ID, record.Change{To: record.Dispatched})
	clock.Advance(5 * time.Second)
	if err := s.Renew(context.Background(), "proxy-1", clock.Now().Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	clock.Advance(6 * time.Second) // past the first lease, within the renewed one
	if got, _ := mustReserve(t, s, newRecord("mine"), record.ReserveOptions{}); got.State != record.Dispatched {
		t.Errorf("a renewed record is %s; want still dispatched", got.State)
	}
	if got, _ := mustReserve(t, s, newRecord("theirs"), record.ReserveOptions{}); got.State != record.Unknown {
		t.Errorf("another owner's record is %s; Renew must touch only the owner's", got.State)
	}
}

func testWaitSettlesAnOrphan(t *testing.T, s record.Store, clock *Clock) {
	r, _ := mustReserve(t, s, leased("k", "proxy-1", clock.Now().Add(10*time.Second)), record.ReserveOptions{})
	mustUpdate(t, s, r.ID, record.Change{To: record.Dispatched})
	clock.Advance(11 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := s.Wait(ctx, r.ID)
	if err != nil || got.State != record.Unknown {
		t.Fatalf("Wait on a sent orphan = %+v, %v; want it settled unknown", got, err)
	}
}

func testConcurrentOrphanTakeover(t *testing.T, s record.Store, clock *Clock) {
	r, _ := mustReserve(t, s, leased("k", "proxy-1", clock.Now().Add(10*time.Second)), record.ReserveOptions{})
	mustUpdate(t, s, r.ID, record.Change{To: record.Dispatched})
	clock.Advance(11 * time.Second)
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			got, won, err := s.Reserve(context.Background(), leased("k", "proxy-2", clock.Now().Add(10*time.Second)), record.ReserveOptions{})
			if err != nil || won || got.State != record.Unknown {
				t.Errorf("Reserve over an orphan: %v won=%v err=%v", got, won, err)
			}
		})
	}
	wg.Wait()
	got, err := s.Get(context.Background(), r.ID)
	if err != nil {
		t.Fatal(err)
	}
	unknowns := 0
	for _, tr := range got.History {
		if tr.State == record.Unknown {
			unknowns++
		}
	}
	if unknowns != 1 {
		t.Fatalf("the orphan was settled %d times: %+v; exactly one caller takes it over", unknowns, got.History)
	}
}

func testList(t *testing.T, s record.Store, clock *Clock) {
	l, ok := s.(record.Lister)
	if !ok {
		t.Skip("the store does not list its records")
	}
	start := clock.Now()
	var ids []string
	for i, tool := range []string{"charge_card", "refund", "charge_card", "charge_card"} {
		r := newRecord(fmt.Sprintf("list-%d", i))
		r.ID, r.Tool = record.NewID(clock.Now()), tool
		if i == 2 {
			r.Fingerprint = "list-0" // a later call of the first's fingerprint
		}
		mustReserve(t, s, r, record.ReserveOptions{})
		if i%2 == 1 {
			mustUpdate(t, s, r.ID, record.Change{To: record.Failed})
		}
		ids = append(ids, r.ID)
		clock.Advance(time.Minute)
	}
	for _, tt := range []struct {
		name string
		f    record.Filter
		want []string
	}{
		{"all, newest first", record.Filter{}, []string{ids[3], ids[2], ids[1], ids[0]}},
		{"by tool", record.Filter{Tool: "charge_card"}, []string{ids[3], ids[2], ids[0]}},
		{"by fingerprint", record.Filter{Fingerprint: "list-0"}, []string{ids[2], ids[0]}},
		{"by tool and fingerprint", record.Filter{Tool: "refund", Fingerprint: "list-0"}, nil},
		{"by state", record.Filter{State: record.Failed}, []string{ids[3], ids[1]}},
		{"since", record.Filter{Since: start.Add(90 * time.Second)}, []string{ids[3], ids[2]}},
		{"limit", record.Filter{Limit: 1}, []string{ids[3]}},
	} {
		got, err := l.List(context.Background(), tt.f)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		var gotIDs []string
		for _, r := range got {
			gotIDs = append(gotIDs, r.ID)
		}
		if fmt.Sprint(gotIDs) != fmt.Sprint(tt.want) {
			t.Errorf("List %s = %v; want %v", tt.name, gotIDs, tt.want)
		}
	}
}

func testResendWhileDispatched(t *testing.T, s record.Store, _ *Clock) {
	r, _ := mustReserve(t, s, newRecord("k"), record.ReserveOptions{})
	mustUpdate(t, s, r.ID, record.Change{To: record.Dispatched})
	done := make(chan *record.Record, 1)
	go func() {
		got, _ := s.Wait(context.Background(), r.ID)
		done <- got
	}()
	got := mustUpdate(t, s, r.ID, record.Change{To: record.Dispatched, Note: "re-sent after a transient result"})
	if got.State != record.Dispatched || got.Attempts != 2 {
		t.Fatalf("after a re-send: %s, %d attempts; want dispatched, 2", got.State, got.Attempts)
	}
	select {
	case w := <-done:
		t.Fatalf("a waiter was woken by a re-send: %+v", w)
	default:
	}
	mustUpdate(t, s, r.ID, record.Change{To: record.Completed, Result: json.RawMessage(`{}`)})
	if w := <-done; w == nil || w.State != record.Completed {
		t.Fatalf("the waiter got %+v; want the completed record", w)
	}
}

// testKeyReuseIsNotAttached checks that a caller whose client key names
// another action is given the holder, to be refused, without being
// counted as one of its callers.
// testTakeoverOnKeyReuseIsReported: a reservation that settles an orphan
// reports it (Record.Orphan), so that its process journals the takeover,
// also when the key's holder is another action, which it is not
// attached to (a client key reused).
func testTakeoverOnKeyReuseIsReported(t *testing.T, s record.Store, clock *Clock) {
	first := leased("key:reused", "proxy-1", clock.Now().Add(10*time.Second))
	first.Fingerprint = "action-a"
	r, _ := mustReserve(t, s, first, record.ReserveOptions{})
	clock.Advance(11 * time.Second) // proxy-1 went away before sending
	other := leased("key:reused", "proxy-2", clock.Now().Add(10*time.Second))
	other.Fingerprint = "action-b"
	got, won := mustReserve(t, s, other, record.ReserveOptions{})
	if won || got.ID != r.ID || got.State != record.Failed {
		t.Fatalf("another action under the key of an orphan: won=%v %s %s; want the holder %s, failed", won, got.ID, got.State, r.ID)
	}
	if got.Orphan == nil || got.Orphan.ID != r.ID || got.Orphan.State != record.Failed {
		t.Errorf("the reservation that settled orphan %s reported %+v; want it, failed", r.ID, got.Orphan)
	}
}

func testKeyReuseIsNotAttached(t *testing.T, s record.Store, _ *Clock) {
	first := newRecord("key:reused")
	first.Fingerprint = "action-a"
	r, _ := mustReserve(t, s, first, record.ReserveOptions{})
	other := newRecord("key:reused")
	other.Fingerprint = "action-b"
	got, won := mustReserve(t, s, other, record.ReserveOptions{})
	if won || got.ID != r.ID {
		t.Fatalf("another action under the key won=%v (%s); want the holder %s", won, got.ID, r.ID)
	}
	if got.Attached != 0 {
		t.Errorf("holder returned with Attached = %d after a reuse of its key for another action; want 0", got.Attached)
	}
	same := newRecord("key:reused")
	same.Fingerprint = "action-a"
	if got, _ := mustReserve(t, s, same, record.ReserveOptions{}); got.Attached != 1 {
		t.Errorf("Attached = %d after a call of the same action; want 1", got.Attached)
	}
	stored, err := s.Get(context.Background(), r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Attached != 1 {
		t.Errorf("stored Attached = %d; want 1: the call of the same action only", stored.Attached)
	}
}

// testOnlyTheSameActionReplaces: under a client's key, a failed or
// replaceable record is superseded only by a reservation of the same
// action (fingerprint); one of another action is matched, so that the
// caller can refuse the key's reuse instead of running the other action.
// Once the record expires, the key is free for anything.
func testOnlyTheSameActionReplaces(t *testing.T, s record.Store, clock *Clock) {
	for _, tc := range []struct {
		name  string
		state record.State
		opts  record.ReserveOptions
	}{
		{"failed", record.Failed, record.ReserveOptions{}},
		{"delivered, replace delivered", record.Delivered, record.ReserveOptions{Replace: []record.State{record.Delivered}}},
	} {
		key := "key:" + tc.name
		first := newRecord(key)
		first.Fingerprint = "action-a"
		r, _ := mustReserve(t, s, first, tc.opts)
		mustUpdate(t, s, r.ID, record.Change{To: record.Dispatched})
		if tc.state == record.Failed {
			mustUpdate(t, s, r.ID, record.Change{To: record.Failed})
		} else {
			mustUpdate(t, s, r.ID, record.Change{To: record.Completed, Result: json.RawMessage(`{}`)})
			mustUpdate(t, s, r.ID, record.Change{To: record.Delivered})
		}
		other := newRecord(key)
		other.Fingerprint = "action-b"
		if got, won := mustReserve(t, s, other, tc.opts); won || got.ID != r.ID {
			t.Fatalf("%s: another action under the key won=%v (%s); want the %s record %s matched", tc.name, won, got.ID, tc.state, r.ID)
		}
		same := newRecord(key)
		same.Fingerprint = "action-a"
		if got, won := mustReserve(t, s, same, tc.opts); !won || got.ID != same.ID {
			t.Fatalf("%s: the same action won=%v (%s); want it to replace the %s record", tc.name, won, got.ID, tc.state)
		}
	}
	// Expired, the key takes any action.
	first := newRecord("key:expiring")
	first.Fingerprint = "action-a"
	r, _ := mustReserve(t, s, first, record.ReserveOptions{})
	mustUpdate(t, s, r.ID, record.Change{To: record.Failed})
	clock.Advance(2 * time.Hour)
	other := newRecord("key:expiring")
	other.Fingerprint = "action-b"
	if _, won := mustReserve(t, s, other, record.ReserveOptions{}); !won {
		t.Fatal("after the record expired, another action under its key did not win")
	}
}

// testPurgeSettlesOrphans: for a store that purges, an orphan nobody calls
// again is settled by the purge (unknown: it was sent) and, once its
// retention has passed, purged: retention bounds the store.
func testPurgeSettlesOrphans(t *testing.T, s record.Store, clock *Clock) {
	p, ok := s.(interface {
		Purge(ctx context.Context, limit int) (int, error)
	})
	if !ok {
		t.Skip("the store has no purge: its records expire by themselves")
	}
	r, _ := mustReserve(t, s, leased("k", "proxy-1", clock.Now().Add(10*time.Second)), record.ReserveOptions{})
	mustUpdate(t, s, r.ID, record.Change{To: record.Dispatched})
	clock.Advance(11 * time.Second) // proxy-1 died after sending
	if _, err := p.Purge(context.Background(), 100); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(context.Background(), r.ID); err != nil || got.State != record.Unknown {
		t.Fatalf("after a purge, the orphan is %+v, %v; want it unknown", got, err)
	}
	clock.Advance(2 * time.Hour) // past its retention
	if n, err := p.Purge(context.Background(), 100); err != nil || n != 1 {
		t.Fatalf("Purge = %d, %v; want the settled orphan purged", n, err)
	}
	if _, err := s.Get(context.Background(), r.ID); !errors.Is(err, record.ErrNotFound) {
		t.Fatalf("after its retention the orphan is still there: %v", err)
	}
}

// testConditionalClaim: of several callers claiming one unknown execution
// for a re-dispatch (Change.From Unknown), exactly one wins; the others get
// ErrConflict, though Dispatched may otherwise move to Dispatched. A change
// from a state the record is not in is refused too.
func testConditionalClaim(t *testing.T, s record.Store, _ *Clock) {
	r, _ := mustReserve(t, s, newRecord("k"), record.ReserveOptions{})
	mustUpdate(t, s, r.ID, record.Change{To: record.Dispatched})
	if _, err := s.Update(context.Background(), r.ID, record.Change{To: record.Dispatched, From: record.Unknown}); !errors.Is(err, record.ErrConflict) {
		t.Fatalf("a change from unknown on a dispatched record: %v; want ErrConflict", err)
	}
	mustUpdate(t, s, r.ID, record.Change{To: record.Unknown})
	const claimers = 8
	var wins atomic.Int32
	var wg sync.WaitGroup
	for i := range claimers {
		wg.Go(func() {
			_, err := s.Update(context.Background(), r.ID, record.Change{To: record.Dispatched, From: record.Unknown, Owner: fmt.Sprintf("p%d", i)})
			switch {
			case err == nil:
				wins.Add(1)
			case !errors.Is(err, record.ErrConflict):
				t.Errorf("a losing claim: %v; want ErrConflict", err)
			}
		})
	}
	wg.Wait()
	if n := wins.Load(); n != 1 {
		t.Fatalf("%d of %d claims won; want exactly 1", n, claimers)
	}
	if got, err := s.Get(context.Background(), r.ID); err != nil || got.State != record.Dispatched || got.Attempts != 2 {
		t.Fatalf("after the claim: %+v, %v; want dispatched, 2 attempts", got, err)
	}
}

// ExecutionResult is the result Execute stores.
var ExecutionResult = json.RawMessage(`{"content":[{"type":"text","text":"charged"}]}`)

// Execute runs one execution through s as the proxy does when nothing
// makes it wait: reserved under key (a fresh one when key is empty) by
// owner "bench" and dispatched in the same step, completed with
// ExecutionResult and delivered. The benchmarks of every backend share
// it, so their figures measure the same work.
func Execute(ctx context.Context, s record.Store, key string) (*record.Record, error) {
	got, err := Answer(ctx, s, key)
	if err != nil {
		return nil, err
	}
	return s.Update(ctx, got.ID, record.Change{To: record.Delivered})
}

// Answer runs the steps of Execute that come before the caller's answer,
// its latency path: the reservation with its dispatch, and completed.
func Answer(ctx context.Context, s record.Store, key string) (*record.Record, error) {
	r := executionRecord(key)
	got, won, err := s.Reserve(ctx, r, record.ReserveOptions{Dispatch: true})
	if err != nil || !won || got.State != record.Dispatched {
		return nil, fmt.Errorf("reserving %s: won=%v err=%v", r.Key, won, err)
	}
	return s.Update(ctx, r.ID, record.Change{To: record.Completed, Result: ExecutionResult})
}

// Replay asks s again for the execution Execute ran under key, as a
// retry does: through Replay where s answers replays that way, as the
// proxy does, else through Reserve. It fails unless the delivered record
// comes back.
func Replay(ctx context.Context, s record.Store, key string) error {
	r := executionRecord(key)
	if rp, ok := s.(record.Replayer); ok {
		if got, _, ok := rp.Replay(ctx, r, record.ReserveOptions{}); ok && got.State == record.Delivered {
			return nil
		}
	}
	got, won, err := s.Reserve(ctx, r, record.ReserveOptions{Dispatch: true})
	if err != nil || won || got.State != record.Delivered {
		return fmt.Errorf("replaying %s: won=%v err=%v; want the delivered record", key, won, err)
	}
	return nil
}

// ExecutionSteps are what each store's BenchmarkSteps runs, one call at
// a time, for bench/writes.sh: the steps of a new execution before its
// answer (Answer), all of them (Execute), and a replay of the execution
// under the key "replayed", which the benchmark runs first.
var ExecutionSteps = []struct {
	Name string
	Do   func(context.Context, record.Store) error
}{
	{"answer", func(ctx context.Context, s record.Store) error { _, err := Answer(ctx, s, ""); return err }},
	{"execution", func(ctx context.Context, s record.Store) error { _, err := Execute(ctx, s, ""); return err }},
	{"replay", func(ctx context.Context, s record.Store) error { return Replay(ctx, s, "replayed") }},
}

// executionRecord is the record Execute reserves under key.
func executionRecord(key string) *record.Record {
	r := &record.Record{ID: record.NewID(time.Now()), Tool: "charge_card", Retention: time.Hour,
		Owner: "bench", LeaseUntil: time.Now().Add(time.Minute)}
	r.Key = key
	if key == "" {
		r.Key = r.ID
	}
	r.Fingerprint = r.Key
	return r
}

// testReserveAndDispatch: a reservation asked to record the dispatch too
// comes back dispatched, with both transitions at once and one attempt,
// as the store keeps it; the record then lives as any other, and a call
// that matches it attaches.
func testReserveAndDispatch(t *testing.T, s record.Store, _ *Clock) {
	r := newRecord("k")
	got, won := mustReserve(t, s, r, record.ReserveOptions{Dispatch: true})
	if !won {
		t.Fatal("the reservation did not win")
	}
	stored, err := s.Get(context.Background(), r.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range []*record.Record{got, stored} {
		if rec.State != record.Dispatched || len(rec.History) != 2 || rec.History[0].State != record.Accepted ||
			rec.History[1].State != record.Dispatched || !rec.History[1].At.Equal(rec.History[0].At) || rec.Attempts != 1 {
			t.Fatalf("reserved to be sent at once: %s, history %+v, attempts %d; want dispatched, accepted then dispatched at once, 1 attempt",
				rec.State, rec.History, rec.Attempts)
		}
	}
	if again, won := mustReserve(t, s, newRecord("k"), record.ReserveOptions{Dispatch: true}); won || again.ID != r.ID || again.State != record.Dispatched {
		t.Fatalf("a second call: won %v, %s %s; want the first record, dispatched", won, again.ID, again.State)
	}
	done := mustUpdate(t, s, r.ID, record.Change{To: record.Completed, Result: json.RawMessage(`{}`)})
	if done.Attempts != 1 {
		t.Errorf("completed after one dispatch with %d attempts", done.Attempts)
	}
}
