package pgstore

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
)

// A reservation that won and settled an orphan is made even when the
// orphan's count cannot be read again afterwards: failing it would leave
// the committed record in flight, and a caller told the store was never
// reached would not fail it.
func TestWonReservationSurvivesTheOrphansCount(t *testing.T) {
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	var (
		s     *Store
		armed atomic.Bool
		other *record.Record // attached to meanwhile
	)
	s = newStore(t, func() time.Time {
		if armed.Load() {
			overlapWrite(t, s, other)
		}
		return clock.Now()
	})
	ctx := t.Context()
	other = newRecord("other", clock.Now())
	if _, _, err := s.Reserve(ctx, other, record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	orphan := newRecord("k", clock.Now())
	orphan.Owner, orphan.LeaseUntil = "proxy-1", clock.Now().Add(time.Second)
	if _, _, err := s.Reserve(ctx, orphan, record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second) // proxy-1 died
	next := newRecord("k", clock.Now())
	next.Owner, next.LeaseUntil = "proxy-2", clock.Now().Add(time.Minute)
	// The orphan goes with the insert that replaces it, so its count,
	// read again, is not found.
	if _, err := s.pool.Exec(ctx, s.sql(`CREATE FUNCTION {schema}.drop_orphan() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN DELETE FROM {schema}.records WHERE id = '`+orphan.ID+`'; RETURN NULL; END $$`)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, s.sql(`CREATE TRIGGER drop_orphan AFTER INSERT ON {schema}.records
		FOR EACH ROW WHEN (NEW.id = '`+next.ID+`') EXECUTE FUNCTION {schema}.drop_orphan()`)); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	got, won, err := s.Reserve(ctx, next, record.ReserveOptions{})
	armed.Store(false)
	if err != nil || !won {
		t.Fatalf("Reserve: won=%v err=%v; want the reservation, which is committed", won, err)
	}
	if got.Orphan == nil || got.Orphan.ID != orphan.ID || got.Orphan.State != record.Failed {
		t.Errorf("the reservation reports the orphan %+v; want %s failed, as read", got.Orphan, orphan.ID)
	}
	if stored, err := s.Get(ctx, next.ID); err != nil || stored.State != record.Accepted {
		t.Errorf("the reserved record: %+v, %v; want it accepted", stored, err)
	}
}

// overlapWrite makes a write of the attach counts begin and end now, as
// one a reservation's statements overlap: a Reading taken before shows
// its counts only after reading them again from the store. The write
// fails at once, and its count is kept for the next.
func overlapWrite(t *testing.T, s *Store, rec *record.Record) {
	reading, err := s.attaches.Begin(t.Context())
	if err == nil {
		_, err = reading.Add(t.Context(), rec.Clone(), s.storedAttached)
	}
	if err != nil {
		t.Error(err)
	}
	done, cancel := context.WithCancel(t.Context())
	cancel()
	s.attaches.Flush(done)
}
