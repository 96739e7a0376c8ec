package sqlitestore

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
)

// A reservation that won and settled an orphan is made even when the
// orphan's count cannot be read again afterwards: failing it would leave
// the committed record in flight, and its caller would not fail it.
func TestWonReservationSurvivesTheOrphansCount(t *testing.T) {
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	var (
		s     *Store
		armed atomic.Bool
		other *record.Record // attached to meanwhile
	)
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "records.db"), Options{Now: func() time.Time {
		if armed.Load() {
			overlapWrite(t, s, other)
		}
		return clock.Now()
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := t.Context()
	reserve := func(key, owner string) *record.Record {
		t.Helper()
		r := &record.Record{ID: record.NewID(clock.Now()), Key: key, Fingerprint: key, Actor: "alice", Scope: "session:1",
			Upstream: "stdio:server", Tool: "charge_card", Retention: time.Hour, Owner: owner, LeaseUntil: clock.Now().Add(time.Second)}
		got, won, err := s.Reserve(ctx, r, record.ReserveOptions{})
		if err != nil || !won {
			t.Fatalf("Reserve %s: won=%v err=%v; want the reservation, which is committed", key, won, err)
		}
		return got
	}
	other = reserve("other", "proxy-1")
	orphan := reserve("k", "proxy-1")
	clock.Advance(2 * time.Second) // proxy-1 died
	// The orphan goes with the insert that replaces it, so its count,
	// read again, is not found.
	if _, err := s.w.ExecContext(ctx, `CREATE TRIGGER drop_orphan AFTER INSERT ON records
		WHEN NEW.id <> '`+orphan.ID+`' BEGIN DELETE FROM records WHERE id = '`+orphan.ID+`'; END`); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	got := reserve("k", "proxy-2")
	armed.Store(false)
	if got.Orphan == nil || got.Orphan.ID != orphan.ID || got.Orphan.State != record.Failed {
		t.Errorf("the reservation reports the orphan %+v; want %s failed, as read", got.Orphan, orphan.ID)
	}
	if stored, err := s.Get(ctx, got.ID); err != nil || stored.State != record.Accepted {
		t.Errorf("the reserved record: %+v, %v; want it accepted", stored, err)
	}
}

// overlapWrite makes a write of the attach counts begin and end now, as
// one a reservation's write overlaps: a Reading taken before shows its
// counts only after reading them again from the file. The write fails at
// once, and its count is kept for the next.
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

// Reserve's purge looks for orphans at most every orphanScanEvery.
func TestReservePacesTheOrphanScan(t *testing.T) {
	recordtest.RunPacedOrphanScan(t, func(t *testing.T, now func() time.Time) recordtest.PacedStore {
		s := openAt(t, now)
		return recordtest.PacedStore{Store: s, PurgeEvery: purgeEvery, ScanEvery: orphanScanEvery, Looks: s.scans.Load}
	})
}

// openAt opens a Store on a new file that reads the time from now.
func openAt(t *testing.T, now func() time.Time) *Store {
	t.Helper()
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "records.db"), Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// reserveLeased reserves key for an owner "gone" whose lease lapses in a
// second: an orphan once the clock has moved on.
func reserveLeased(t *testing.T, s *Store, clock *recordtest.Clock, key string, opts record.ReserveOptions) *record.Record {
	t.Helper()
	r := &record.Record{ID: record.NewID(clock.Now()), Key: key, Fingerprint: key, Tool: "charge_card",
		Retention: time.Hour, Owner: "gone", LeaseUntil: clock.Now().Add(time.Second)}
	if _, _, err := s.Reserve(t.Context(), r, opts); err != nil {
		t.Fatal(err)
	}
	return r
}

// A reservation beside other writes that replaces its key's holder opens
// a savepoint before its first change: when its insert then fails, the
// orphan it settled (failed: never sent) and released is as it was, and
// the write beside it is committed.
func TestReservationFailsWhole(t *testing.T) {
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	s := openAt(t, clock.Now)
	ctx := t.Context()
	orphan := reserveLeased(t, s, clock, "k", record.ReserveOptions{})
	kept := reserveDispatched(t, s, "kept")
	clock.Advance(2 * time.Second) // past the orphan's lease
	// The insert that would replace the orphan fails once the orphan is
	// settled; the first, refused for the holder, goes by.
	trigger := fmt.Sprintf(`CREATE TRIGGER refuse BEFORE INSERT ON records
		WHEN NEW.key = 'k' AND (SELECT state FROM records WHERE id = '%s') = '%s'
		BEGIN SELECT RAISE(ABORT, 'refused'); END`, orphan.ID, record.Failed)
	if _, err := s.w.ExecContext(ctx, trigger); err != nil {
		t.Fatal(err)
	}
	replace := func() error {
		r := &record.Record{ID: record.NewID(clock.Now()), Key: "k", Fingerprint: "k", Tool: "charge_card", Retention: time.Hour}
		_, _, err := s.Reserve(ctx, r, record.ReserveOptions{Dispatch: true})
		return err
	}
	errs := inOneBatch(s, replace, complete(s, kept[0]))
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "refused") {
		t.Fatalf("the reservation whose insert failed returned %v; want the trigger's error", errs[0])
	}
	checkToldFailed(t, s, kept, errs[1:])
	var (
		state  record.State
		holder int
	)
	if err := s.r.QueryRowContext(ctx, "SELECT state, holder FROM records WHERE id = ?", orphan.ID).Scan(&state, &holder); err != nil {
		t.Fatal(err)
	}
	if state != record.Accepted || holder != 1 {
		t.Errorf("the orphan after the failed reservation: %s, holder %d; want it accepted and still the holder", state, holder)
	}
}

// A reservation beside other writes that purges opens a savepoint first:
// when its insert then fails, the orphan its purge settled is as it was
// (its waiters would not be woken, nor Options.Orphaned told), and the
// write beside it is committed.
func TestPurgingReservationFailsWhole(t *testing.T) {
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	s := openAt(t, clock.Now)
	ctx := t.Context()
	orphan := reserveLeased(t, s, clock, "orphan", record.ReserveOptions{Dispatch: true})
	kept := reserveDispatched(t, s, "kept")
	clock.Advance(2 * time.Second)   // past the orphan's lease
	s.reserves.Store(purgeEvery - 1) // the next reservation purges
	// An id used already: the insert fails once the purge is done.
	reuse := func() error {
		r := &record.Record{ID: kept[0], Key: "new", Fingerprint: "new", Tool: "charge_card", Retention: time.Hour}
		_, _, err := s.Reserve(ctx, r, record.ReserveOptions{Dispatch: true})
		return err
	}
	errs := inOneBatch(s, reuse, complete(s, kept[0]))
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "already used") {
		t.Fatalf("the reservation of an id used already returned %v; want it refused", errs[0])
	}
	if s.scans.Load() != 1 {
		t.Fatalf("the reservation looked for orphans %d times; want once", s.scans.Load())
	}
	checkToldFailed(t, s, kept, errs[1:])
	var state record.State
	if err := s.r.QueryRowContext(ctx, "SELECT state FROM records WHERE id = ?", orphan.ID).Scan(&state); err != nil {
		t.Fatal(err)
	}
	if state != record.Dispatched {
		t.Errorf("the orphan after the failed reservation: %s; want it dispatched, as it was", state)
	}
}
