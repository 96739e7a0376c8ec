package memstore_test

import (
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
)

func TestSemantics(t *testing.T) {
	recordtest.Run(t, func(t *testing.T, now func() time.Time) record.Store {
		return memstore.New(memstore.Options{Now: now})
	})
}

func TestExpiredRecordsArePurged(t *testing.T) {
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	s := memstore.New(memstore.Options{Now: clock.Now})
	ctx := t.Context()
	for i := range 100 {
		r := &record.Record{ID: record.NewID(clock.Now()), Key: string(rune('a'+i%26)) + time.Duration(i).String(), Retention: time.Minute}
		if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Update(ctx, r.ID, record.Change{To: record.Failed}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Minute)
	// Each reservation purges a bounded batch; two are enough for 100.
	for range 2 {
		r := &record.Record{ID: record.NewID(clock.Now()), Key: "fresh" + record.NewID(clock.Now()), Retention: time.Minute}
		if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Len(); n != 2 {
		t.Fatalf("store holds %d records after retention; want only the 2 fresh ones", n)
	}
}

// TestCopiesDoNotShareHistory checks that records handed out stay as they
// were when the store appends to its own history, which has room reserved
// for the transitions to come, and that appending to a copy never changes
// the store's.
func TestCopiesDoNotShareHistory(t *testing.T) {
	s := memstore.New(memstore.Options{})
	ctx := t.Context()
	r := &record.Record{ID: record.NewID(time.Now()), Key: "k", Retention: time.Minute}
	reserved, _, err := s.Reserve(ctx, r, record.ReserveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dispatched, err := s.Update(ctx, r.ID, record.Change{To: record.Dispatched})
	if err != nil {
		t.Fatal(err)
	}
	dispatched.History = append(dispatched.History, record.Transition{State: "tampered"})
	completed, err := s.Update(ctx, r.ID, record.Change{To: record.Completed, Result: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if len(reserved.History) != 1 || reserved.History[0].State != record.Accepted {
		t.Errorf("the reservation's copy changed: %+v", reserved.History)
	}
	if got := completed.History; len(got) != 3 || got[2].State != record.Completed {
		t.Errorf("history after completion: %+v", got)
	}
}
