package memstore_test

import (
	"fmt"
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

// TestIdleStoreIsPurged: records whose retention ran out go at the next
// lease renewal, which comes every few seconds, not at the next
// reservation, which an idle proxy may never make.
func TestIdleStoreIsPurged(t *testing.T) {
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	s := memstore.New(memstore.Options{Now: clock.Now})
	ctx := t.Context()
	const n = 10000 // more than one batch under the lock
	for i := range n {
		r := &record.Record{ID: record.NewID(clock.Now()), Key: fmt.Sprint("k", i), Retention: time.Minute}
		if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Update(ctx, r.ID, record.Change{To: record.Failed}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(2 * time.Minute)
	if err := s.Renew(ctx, "proxy-1", clock.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got := s.Len(); got != 0 {
		t.Fatalf("store holds %d records after their retention and a renewal; want none", got)
	}
}

// TestVersionsStayAsTheyWere checks that a record handed out never
// changes when the store changes the execution: each change makes a new
// version, and the history the store appends to, which has room reserved
// for the transitions to come, never shows in earlier versions.
func TestVersionsStayAsTheyWere(t *testing.T) {
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
	attached, _, err := s.Reserve(ctx, &record.Record{ID: record.NewID(time.Now()), Key: "k"}, record.ReserveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	completed, err := s.Update(ctx, r.ID, record.Change{To: record.Completed, Result: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if reserved.State != record.Accepted || len(reserved.History) != 1 || reserved.History[0].State != record.Accepted {
		t.Errorf("the reservation's version changed: %s %+v", reserved.State, reserved.History)
	}
	if dispatched.State != record.Dispatched || len(dispatched.History) != 2 || dispatched.Attached != 0 {
		t.Errorf("the dispatched version changed: %s, attached %d, %+v", dispatched.State, dispatched.Attached, dispatched.History)
	}
	if attached.State != record.Dispatched || attached.Attached != 1 {
		t.Errorf("the attached caller got %s, attached %d; want dispatched, 1", attached.State, attached.Attached)
	}
	if got := completed.History; len(got) != 3 || got[2].State != record.Completed || completed.Attached != 1 {
		t.Errorf("after completion: attached %d, history %+v", completed.Attached, got)
	}
}

// TestDeliveryMovesTheExpiry checks that a record delivered after it
// completed is kept for its retention from the delivery: the purge finds
// it due by its completion and keeps it.
func TestDeliveryMovesTheExpiry(t *testing.T) {
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	s := memstore.New(memstore.Options{Now: clock.Now})
	ctx := t.Context()
	r := &record.Record{ID: record.NewID(clock.Now()), Key: "k", Retention: time.Minute}
	if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, to := range []record.State{record.Dispatched, record.Completed} {
		if _, err := s.Update(ctx, r.ID, record.Change{To: to, Result: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(30 * time.Second)
	if _, err := s.Update(ctx, r.ID, record.Change{To: record.Delivered}); err != nil {
		t.Fatal(err)
	}
	// A reservation runs the purge.
	other := func() {
		t.Helper()
		o := &record.Record{ID: record.NewID(clock.Now()), Key: "other" + record.NewID(clock.Now()), Retention: time.Minute}
		if _, _, err := s.Reserve(ctx, o, record.ReserveOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(45 * time.Second) // 75s after completion, 45s after delivery
	other()
	if _, err := s.Get(ctx, r.ID); err != nil {
		t.Fatalf("75s after completion and 45s after delivery, with a retention of 1m: %v", err)
	}
	clock.Advance(16 * time.Second) // 61s after delivery
	other()
	if _, err := s.Get(ctx, r.ID); err == nil {
		t.Fatal("61s after delivery, with a retention of 1m, the record is still held")
	}
}

// TestReplaysOfAPackedRecord checks the versions of a delivered record,
// which the store keeps packed: each replay gets one that counts it,
// and none handed out changes.
func TestReplaysOfAPackedRecord(t *testing.T) {
	s := memstore.New(memstore.Options{})
	ctx := t.Context()
	done, err := recordtest.Execute(ctx, s, "k")
	if err != nil {
		t.Fatal(err)
	}
	var got []*record.Record
	for range 3 {
		r, won, err := s.Reserve(ctx, &record.Record{ID: record.NewID(time.Now()), Key: "k", Fingerprint: "k"}, record.ReserveOptions{})
		if err != nil || won {
			t.Fatalf("a replay: won %v, %v", won, err)
		}
		got = append(got, r)
	}
	for i, r := range got {
		if r.Attached != i+1 || r.State != record.Delivered || string(r.Result) != string(recordtest.ExecutionResult) {
			t.Errorf("replay %d got %s, attached %d, result %s", i+1, r.State, r.Attached, r.Result)
		}
	}
	if done.Attached != 0 {
		t.Errorf("the delivered version now counts %d attached", done.Attached)
	}
	if r, err := s.Get(ctx, done.ID); err != nil || r.Attached != 3 || len(r.History) != 4 {
		t.Fatalf("Get after 3 replays: %+v, %v", r, err)
	}
}
