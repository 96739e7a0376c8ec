package recordtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// awaiting returns a new record that waits in Accepted for approver.
func awaiting(key, approver string) *record.Record {
	r := newRecord(key)
	r.Awaiting = approver
	return r
}

// testApproval: an execution that awaits an approval is kept so, and
// found by the Awaiting filter, until it is authorized; the decision
// keeps who made it, through which channel and why; authorized is in
// flight, and goes on to dispatched, never straight to completed.
func testApproval(t *testing.T, s record.Store, _ *Clock) {
	r, won := mustReserve(t, s, awaiting("k", record.ApproverOperator), record.ReserveOptions{})
	if !won || r.Awaiting != record.ApproverOperator {
		t.Fatalf("Reserve = %+v won=%v; want it won, awaiting the operator", r, won)
	}
	ctx := context.Background()
	if got, err := s.Get(ctx, r.ID); err != nil || got.Awaiting != record.ApproverOperator || got.State != record.Accepted {
		t.Fatalf("Get = %+v, %v; want accepted, awaiting the operator", got, err)
	}
	listed := func() bool {
		l, ok := s.(record.Lister)
		if !ok {
			return true
		}
		recs, err := l.List(ctx, record.Filter{Awaiting: true})
		if err != nil {
			t.Fatal(err)
		}
		return len(recs) == 1 && recs[0].ID == r.ID
	}
	mustReserve(t, s, newRecord("other"), record.ReserveOptions{}) // accepted, awaits nothing
	if !listed() {
		t.Error("List(Awaiting) does not give the one execution that awaits an approval")
	}
	if _, err := s.Update(ctx, r.ID, record.Change{To: record.Authorized, From: record.Dispatched}); !errors.Is(err, record.ErrConflict) {
		t.Fatalf("an approval From dispatched of an accepted record: %v; want ErrConflict", err)
	}
	got := mustUpdate(t, s, r.ID, record.Change{To: record.Authorized, From: record.Accepted, By: "bob", Via: record.ApproverOperator, Note: "ticket 42"})
	last := got.History[len(got.History)-1]
	if got.State != record.Authorized || got.Awaiting != "" || !got.ExpiresAt.IsZero() ||
		last.By != "bob" || last.Via != record.ApproverOperator || last.Note != "ticket 42" {
		t.Fatalf("authorized: %+v, last transition %+v; want in flight, awaiting nothing, the decision kept", got, last)
	}
	if l, ok := s.(record.Lister); ok {
		if recs, err := l.List(ctx, record.Filter{Awaiting: true}); err != nil || len(recs) != 0 {
			t.Errorf("List(Awaiting) after the approval = %d records, %v; want none", len(recs), err)
		}
	}
	if _, err := s.Update(ctx, r.ID, record.Change{To: record.Completed}); !errors.Is(err, record.ErrConflict) {
		t.Errorf("authorized straight to completed: %v; want ErrConflict: it is sent first", err)
	}
	if _, err := s.Update(ctx, r.ID, record.Change{To: record.Authorized, From: record.Accepted}); !errors.Is(err, record.ErrConflict) {
		t.Errorf("a second decision: %v; want ErrConflict: one decision per execution", err)
	}
	if got, won := mustReserve(t, s, newRecord("k"), record.ReserveOptions{}); won || got.ID != r.ID || got.State != record.Authorized {
		t.Errorf("a retry Reserve = %s %s won=%v; want the authorized execution, attached", got.ID, got.State, won)
	}
	got = mustUpdate(t, s, r.ID, record.Change{To: record.Dispatched})
	got = mustUpdate(t, s, r.ID, record.Change{To: record.Completed, Result: []byte(`{}`)})
	if got.History[1].By != "bob" || got.History[1].Via != record.ApproverOperator {
		t.Errorf("the history of the completed execution lost its decision: %+v", got.History)
	}
}

// testRefusal: a refusal settles the execution: it keeps its decision,
// expires with the record's retention, wakes its waiters, and a call
// that comes again gets it, not a new execution.
func testRefusal(t *testing.T, s record.Store, clock *Clock) {
	r, _ := mustReserve(t, s, awaiting("k", record.ApproverClient), record.ReserveOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	waited := make(chan *record.Record, 1)
	go func() {
		got, err := s.Wait(ctx, r.ID)
		if err != nil {
			t.Errorf("Wait: %v", err)
		}
		waited <- got
	}()
	got := mustUpdate(t, s, r.ID, record.Change{To: record.Refused, From: record.Accepted, By: "alice", Via: record.ApproverClient, Note: "declined"})
	if got.State != record.Refused || !got.ExpiresAt.Equal(clock.Now().Add(r.Retention)) {
		t.Fatalf("refused: %+v; want settled, expiring after its retention", got)
	}
	if w := <-waited; w == nil || w.State != record.Refused {
		t.Fatalf("Wait returned %+v; want the refusal", w)
	}
	again, won := mustReserve(t, s, newRecord("k"), record.ReserveOptions{Replace: []record.State{record.Completed, record.Delivered}})
	if won || again.ID != r.ID || again.State != record.Refused {
		t.Fatalf("a call again = %s %s won=%v; want the refusal, matched", again.ID, again.State, won)
	}
	last := again.History[len(again.History)-1]
	if last.By != "alice" || last.Via != record.ApproverClient || last.Note != "declined" {
		t.Errorf("the refusal's decision = %+v; want by alice via client, declined", last)
	}
	if _, err := s.Update(ctx, r.ID, record.Change{To: record.Dispatched}); !errors.Is(err, record.ErrConflict) {
		t.Errorf("a refused execution dispatched: %v; want ErrConflict", err)
	}
	clock.Advance(r.Retention + time.Second)
	if _, won := mustReserve(t, s, newRecord("k"), record.ReserveOptions{}); !won {
		t.Error("a refusal past its retention still matched a call; want a new execution")
	}
}

// testOrphanAuthorizedFails: an execution authorized and never sent,
// whose owner died, fails (it may run anew), and says why.
func testOrphanAuthorizedFails(t *testing.T, s record.Store, clock *Clock) {
	r, _ := mustReserve(t, s, leased("k", "proxy-1", clock.Now().Add(10*time.Second)), record.ReserveOptions{})
	mustUpdate(t, s, r.ID, record.Change{To: record.Authorized, By: "bob", Via: record.ApproverOperator})
	clock.Advance(11 * time.Second) // proxy-1 died before sending
	next, won := mustReserve(t, s, leased("k", "proxy-2", clock.Now().Add(10*time.Second)), record.ReserveOptions{})
	if !won || next.ID == r.ID {
		t.Fatalf("Reserve over an authorized orphan = %s won=%v; want a new execution", next.ID, won)
	}
	old, err := s.Get(context.Background(), r.ID)
	if err != nil || old.State != record.Failed {
		t.Fatalf("the orphan is %+v (%v); want failed", old, err)
	}
}

// NewDeciderPair returns two Stores of one backend that implement
// record.Decider, as two processes that share it have, each closed when
// the test ends.
type NewDeciderPair func(t *testing.T) (s, other record.Store)

// RunDecisions checks a record.Decider: an owner waiting for the decision
// on an execution is woken when another process decides it, promptly;
// a decided execution's wait returns at once; the wait honours its
// context; and it settles an orphan it finds.
func RunDecisions(t *testing.T, newPair NewDeciderPair) {
	t.Run("WokenAcrossProcesses", func(t *testing.T) {
		s, other := newPair(t)
		for _, c := range []record.Change{
			{To: record.Authorized, From: record.Accepted, By: "bob", Via: record.ApproverOperator},
			{To: record.Refused, From: record.Accepted, By: "bob", Via: record.ApproverOperator},
		} {
			r, _ := mustReserve(t, s, awaiting("k-"+string(c.To), record.ApproverOperator), record.ReserveOptions{})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			waited := make(chan *record.Record, 1)
			go func() {
				got, err := s.(record.Decider).WaitDecided(ctx, r.ID)
				if err != nil {
					t.Errorf("WaitDecided: %v", err)
				}
				waited <- got
			}()
			time.Sleep(100 * time.Millisecond) // the wait is under way
			if got, err := other.Get(ctx, r.ID); err != nil || got.Awaiting != record.ApproverOperator {
				t.Fatalf("the other process sees %+v, %v; want it awaiting the operator", got, err)
			}
			decided := time.Now()
			mustUpdate(t, other, r.ID, c)
			got := <-waited
			if got == nil || got.State != c.To {
				t.Fatalf("WaitDecided returned %+v; want it %s", got, c.To)
			}
			// Woken by the change, not by a poll of its own.
			if d := time.Since(decided); d > 2*time.Second {
				t.Errorf("WaitDecided returned %v after the decision; want it woken by it", d)
			}
			cancel()
		}
	})
	t.Run("DecidedReturnsAtOnce", func(t *testing.T) {
		s, _ := newPair(t)
		r, _ := mustReserve(t, s, awaiting("k", record.ApproverOperator), record.ReserveOptions{})
		mustUpdate(t, s, r.ID, record.Change{To: record.Authorized, By: "bob", Via: record.ApproverOperator})
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if got, err := s.(record.Decider).WaitDecided(ctx, r.ID); err != nil || got.State != record.Authorized {
			t.Fatalf("WaitDecided on an authorized execution = %+v, %v; want it at once", got, err)
		}
	})
	t.Run("HonoursContext", func(t *testing.T) {
		s, _ := newPair(t)
		r, _ := mustReserve(t, s, awaiting("k", record.ApproverOperator), record.ReserveOptions{})
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if _, err := s.(record.Decider).WaitDecided(ctx, r.ID); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitDecided on an undecided execution: %v; want the context's end", err)
		}
		if _, err := s.(record.Decider).WaitDecided(context.Background(), "exe_missing"); !errors.Is(err, record.ErrNotFound) {
			t.Fatalf("WaitDecided on no execution: %v; want ErrNotFound", err)
		}
	})
	t.Run("SettlesAnOrphan", func(t *testing.T) {
		s, _ := newPair(t)
		r := awaiting("k", record.ApproverOperator)
		r.Owner, r.LeaseUntil = "proxy-gone", time.Now().Add(-time.Second)
		r, _ = mustReserve(t, s, r, record.ReserveOptions{})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if got, err := s.(record.Decider).WaitDecided(ctx, r.ID); err != nil || got.State != record.Failed {
			t.Fatalf("WaitDecided on an orphan awaiting approval = %+v, %v; want it settled failed", got, err)
		}
	})
}
