package memstore

import (
	"runtime"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
)

// TestWaiterGetsARecordPurgedAsItWoke: a record settled with a short
// retention may be purged before a waiter it woke reads it. The waiter
// was attached while the execution ran, and gets its outcome, not "not
// found": an attached caller told nothing waits on for a record no one
// writes again.
func TestWaiterGetsARecordPurgedAsItWoke(t *testing.T) {
	for _, to := range []record.State{record.Completed, record.Failed, record.Unknown} {
		t.Run(string(to), func(t *testing.T) {
			clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
			s := New(Options{Now: clock.Now})
			ctx := t.Context()
			r := &record.Record{ID: record.NewID(clock.Now()), Key: "k", Retention: time.Nanosecond}
			if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{Dispatch: true}); err != nil {
				t.Fatal(err)
			}
			type got struct {
				rec *record.Record
				err error
			}
			done := make(chan got, 1)
			go func() {
				rec, err := s.Wait(ctx, r.ID)
				done <- got{rec, err}
			}()
			for waiting := false; !waiting; runtime.Gosched() {
				s.mu.Lock()
				_, e, _ := s.lookup(r.ID)
				waiting = s.flight(e).settled != nil
				s.mu.Unlock()
			}
			// Settled and purged under one hold of the lock: the waiter
			// cannot read the record in between.
			s.mu.Lock()
			i, e, _ := s.lookup(r.ID)
			s.apply(i, e, &record.Change{To: to, Result: []byte(`{"ok":true}`)}, clock.Now())
			clock.Advance(time.Second)
			s.purge(clock.Now(), purgeBatch)
			s.mu.Unlock()
			if s.Len() != 0 {
				t.Fatal("the record was not purged")
			}
			g := <-done
			if g.err != nil {
				t.Fatalf("Wait: %v; want the record as it settled", g.err)
			}
			if g.rec.ID != r.ID || g.rec.State != to {
				t.Fatalf("Wait returned %s in %s; want %s in %s", g.rec.ID, g.rec.State, r.ID, to)
			}
		})
	}
}
