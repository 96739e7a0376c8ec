package memstore

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
)

// TestLiveHoldsOnlyRecordsUnderWay checks the small map Update looks in
// first: a record is in it while in flight or completed, leaves it when
// delivered, and a completed one that is never delivered leaves it when
// it expires; Renew gives a lease only to a record in flight.
func TestLiveHoldsOnlyRecordsUnderWay(t *testing.T) {
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	s := New(Options{Now: clock.Now})
	ctx := t.Context()
	reserve := func(key string) string {
		t.Helper()
		r := &record.Record{ID: record.NewID(clock.Now()), Key: key, Owner: "me", LeaseUntil: clock.Now().Add(time.Minute), Retention: time.Hour}
		if _, won, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil || !won {
			t.Fatalf("Reserve(%s): won %v, %v", key, won, err)
		}
		return r.ID
	}
	update := func(id string, to record.State) {
		t.Helper()
		if _, err := s.Update(ctx, id, record.Change{To: to, Result: []byte(`{}`)}); err != nil {
			t.Fatalf("Update(%s, %s): %v", id, to, err)
		}
	}
	var completed []string
	for i := range 10 {
		id := reserve(fmt.Sprint("k", i))
		update(id, record.Dispatched)
		update(id, record.Completed)
		completed = append(completed, id)
	}
	delivered := reserve("delivered")
	update(delivered, record.Dispatched)
	update(delivered, record.Completed)
	update(delivered, record.Delivered)
	if _, ok := s.live[delivered]; ok {
		t.Error("a delivered record is still in live")
	}
	if len(s.live) != 10 {
		t.Fatalf("live holds %d records; want the 10 completed", len(s.live))
	}
	checkFlights(t, s, "with 10 completed")
	if err := s.Renew(ctx, "me", clock.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.Get(ctx, completed[0]); !r.LeaseUntil.IsZero() {
		t.Errorf("Renew gave a completed record a lease until %v", r.LeaseUntil)
	}
	clock.Advance(staleCompletion + time.Second)
	if err := s.Renew(ctx, "me", clock.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if len(s.live) != 0 {
		t.Errorf("after %v undelivered, live still holds %d completed records", staleCompletion, len(s.live))
	}
	checkFlights(t, s, "after the completed were packed")
	update(completed[0], record.Delivered) // found in byID
	clock.Advance(2 * time.Hour)
	fresh := reserve("fresh") // runs the purge
	if _, ok := s.live[fresh]; len(s.live) != 1 || !ok {
		t.Errorf("after the retention live holds %d records; want only the fresh one", len(s.live))
	}
	checkFlights(t, s, "after the purge")
	if len(s.flights) > 11 {
		t.Errorf("%d flights made for at most 11 live records at once", len(s.flights))
	}
}

// TestPurgeLandsFlight checks that a completed record purged while still
// live, its caller gone and no Renew run, gives its flight back.
func TestPurgeLandsFlight(t *testing.T) {
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	s := New(Options{Now: clock.Now})
	ctx := t.Context()
	for i := range 3 {
		r := &record.Record{ID: record.NewID(clock.Now()), Key: fmt.Sprint("k", i), Retention: time.Hour}
		if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{Dispatch: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Update(ctx, r.ID, record.Change{To: record.Completed, Result: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	checkFlights(t, s, "with 3 completed")
	clock.Advance(2 * time.Hour)
	s.PurgeExpired()
	if s.Len() != 0 {
		t.Fatalf("%d records left after the retention", s.Len())
	}
	checkFlights(t, s, "after the purge")
}

// checkFlights checks that the live records, and only they, have a
// flight, each its own.
func checkFlights(t *testing.T, s *Store, when string) {
	t.Helper()
	inUse := 0
	for _, fl := range s.flights {
		if fl != nil {
			inUse++
		}
	}
	if inUse != len(s.live) || inUse+len(s.landed) != len(s.flights) {
		t.Errorf("%s: %d flights in use and %d free of %d, for %d live records", when, inUse, len(s.landed), len(s.flights), len(s.live))
	}
	seen := make(map[flightRef]bool)
	for id, i := range s.live {
		e := s.at(i)
		if fl := s.flight(e); fl == nil || fl.rec.ID != id || seen[e.fl] {
			t.Errorf("%s: live record %s has flight %d, not its own", when, id, e.fl)
		}
		seen[e.fl] = true
	}
}

// TestEntryHoldsNoPointer checks that the entries, one per record kept,
// are memory the collector does not scan: with a million records kept,
// scanning them took longer than the rest of a cycle.
func TestEntryHoldsNoPointer(t *testing.T) {
	var hasPointer func(reflect.Type) bool
	hasPointer = func(t reflect.Type) bool {
		switch t.Kind() {
		case reflect.Pointer, reflect.Map, reflect.Slice, reflect.String, reflect.Chan, reflect.Func, reflect.Interface, reflect.UnsafePointer:
			return true
		case reflect.Array:
			return hasPointer(t.Elem())
		case reflect.Struct:
			for f := range t.Fields() {
				if hasPointer(f.Type) {
					return true
				}
			}
		}
		return false
	}
	if typ := reflect.TypeFor[entry](); hasPointer(typ) {
		t.Errorf("%v holds a pointer", typ)
	}
}

// TestCommonsAreCounted checks that the strings packed records share are
// counted once per packed record, through every way a record is packed
// again or leaves, and forgotten with the last.
func TestCommonsAreCounted(t *testing.T) {
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	s := New(Options{Now: clock.Now})
	ctx := t.Context()
	check := func(when string) {
		t.Helper()
		packed, refs := 0, 0
		for i := range s.byID.all() {
			if s.at(i).ref.n != 0 {
				packed++
			}
		}
		for _, set := range s.commons.sets {
			refs += set.refs
		}
		if refs != packed || len(s.commons.ids) > packed {
			t.Errorf("%s: %d packed records, %d references to %d commons", when, packed, refs, len(s.commons.ids))
		}
	}
	for i := range 20 {
		r := &record.Record{ID: record.NewID(clock.Now()), Key: fmt.Sprint("k", i), Tool: fmt.Sprint("tool", i%3), Retention: time.Hour}
		if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{Dispatch: true}); err != nil {
			t.Fatal(err)
		}
		// Unknown, packed; back in flight, live; completed; delivered,
		// packed again.
		for _, to := range []record.State{record.Unknown, record.Dispatched, record.Unknown, record.Completed, record.Delivered} {
			if _, err := s.Update(ctx, r.ID, record.Change{To: to, Result: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	check("after 20 executions")
	if n := len(s.commons.ids); n != 3 {
		t.Errorf("%d commons for records of 3 tools", n)
	}
	clock.Advance(2 * time.Hour)
	s.PurgeExpired()
	check("after the purge")
	if n := len(s.commons.ids); n != 0 {
		t.Errorf("%d commons left after every record went", n)
	}
	checkFlights(t, s, "after every record went")
	if len(s.flights) != 1 {
		t.Errorf("%d flights made for one live record at a time", len(s.flights))
	}
}

// TestLargeResultIsNotHeld checks that the buffer records are packed in
// does not keep the size of the largest result the store has seen.
func TestLargeResultIsNotHeld(t *testing.T) {
	s := New(Options{})
	ctx := t.Context()
	r := &record.Record{ID: record.NewID(time.Now()), Key: "k", Retention: time.Hour}
	if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{Dispatch: true}); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 1<<20)
	if _, err := s.Update(ctx, r.ID, record.Change{To: record.Failed, Result: big}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get(ctx, r.ID); len(got.Result) != len(big) {
		t.Fatalf("the result kept is %d bytes; want %d", len(got.Result), len(big))
	}
	if n := cap(s.scratch); n > maxScratch {
		t.Errorf("the store holds a %d-byte scratch buffer after packing a large result", n)
	}
}
