package pgstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
)

func TestResultKeptByteForByte(t *testing.T) {
	s := newStore(t, nil)
	ctx := context.Background()
	r, _, err := s.Reserve(ctx, newRecord("k", time.Now()), record.ReserveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	result := json.RawMessage("{\"z\": 1,  \"a\" : [1.0, 1e2],\n\"u\":\"\\u00e9\"}")
	if _, err := s.Update(ctx, r.ID, record.Change{To: record.Dispatched}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, r.ID, record.Change{To: record.Completed, Result: result}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Result, result) || got.Error != nil {
		t.Fatalf("stored result %q, error %q; want %q and none", got.Result, got.Error, result)
	}
}

// A note may hold any text, NUL included, which jsonb would refuse.
func TestNoteWithNUL(t *testing.T) {
	s := newStore(t, nil)
	ctx := context.Background()
	r, _, err := s.Reserve(ctx, newRecord("k", time.Now()), record.ReserveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Update(ctx, r.ID, record.Change{To: record.Failed, Note: "upstream said \x00"})
	if err != nil {
		t.Fatal(err)
	}
	if note := got.History[1].Note; note != "upstream said \uFFFD" {
		t.Fatalf("note = %q", note)
	}
}

func TestExpiredRecordsArePurged(t *testing.T) {
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	s := newStore(t, clock.Now)
	ctx := context.Background()
	var inFlight string
	for i := range 100 {
		r, _, err := s.Reserve(ctx, newRecord(fmt.Sprint("k", i), clock.Now()), record.ReserveOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			inFlight = r.ID // never settled: never purged
			continue
		}
		if _, err := s.Update(ctx, r.ID, record.Change{To: record.Failed}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Hour - time.Second)
	if n, err := s.Purge(ctx, 1000); err != nil || n != 0 {
		t.Fatalf("Purge before the retention ran out = %d, %v; want 0", n, err)
	}
	clock.Advance(time.Second)
	for _, want := range []int{60, 39, 0} {
		if n, err := s.Purge(ctx, 60); err != nil || n != want {
			t.Fatalf("Purge(60) = %d, %v; want %d", n, err, want)
		}
	}
	if _, err := s.Get(ctx, inFlight); err != nil {
		t.Errorf("the record in flight was purged: %v", err)
	}
}

// Reserve purges on its own, a bounded batch every so often.
func TestReservePurges(t *testing.T) {
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	s := newStore(t, clock.Now)
	ctx := context.Background()
	first, _, err := s.Reserve(ctx, newRecord("first", clock.Now()), record.ReserveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, first.ID, record.Change{To: record.Failed}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Hour)
	for i := range purgeEvery {
		if _, _, err := s.Reserve(ctx, newRecord(fmt.Sprint("k", i), clock.Now()), record.ReserveOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Get(ctx, first.ID); !errors.Is(err, record.ErrNotFound) {
		t.Fatalf("an expired record is still there after %d reservations: %v", purgeEvery, err)
	}
}

// Reserve's purge looks for orphans at most every orphanScanEvery.
func TestReservePacesTheOrphanScan(t *testing.T) {
	recordtest.RunPacedOrphanScan(t, func(t *testing.T, now func() time.Time) recordtest.PacedStore {
		s := newStore(t, now)
		return recordtest.PacedStore{Store: s, PurgeEvery: purgeEvery, ScanEvery: orphanScanEvery, Looks: s.scans.Load}
	})
}

// Of concurrent reservations over a replaceable holder, exactly one wins.
func TestConcurrentReplace(t *testing.T) {
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	s := newStore(t, clock.Now)
	ctx := context.Background()
	for _, settle := range []record.State{record.Delivered, record.Failed} {
		r, _, err := s.Reserve(ctx, newRecord("k", clock.Now()), record.ReserveOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if settle == record.Delivered {
			for _, to := range []record.State{record.Dispatched, record.Completed} {
				if _, err := s.Update(ctx, r.ID, record.Change{To: to}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, err := s.Update(ctx, r.ID, record.Change{To: settle}); err != nil {
			t.Fatal(err)
		}
		var wins atomic.Int32
		var wg sync.WaitGroup
		for range 100 {
			wg.Go(func() {
				_, won, err := s.Reserve(ctx, newRecord("k", clock.Now()), record.ReserveOptions{Replace: []record.State{record.Delivered}})
				if err != nil {
					t.Error(err)
				}
				if won {
					wins.Add(1)
				}
			})
		}
		wg.Wait()
		if n := wins.Load(); n != 1 {
			t.Fatalf("%d of 100 reservations over a %s holder won; want 1", n, settle)
		}
	}
}

// TestReplaysWriteNothing: a replay only reads, so its commit waits for
// no WAL flush: every write of a row makes a new version of it, with a
// new xmin, and five replays make none.
func TestReplaysWriteNothing(t *testing.T) {
	s := newStore(t, nil)
	ctx := t.Context()
	r, err := recordtest.Execute(ctx, s, "k")
	if err != nil {
		t.Fatal(err)
	}
	xmin := func() (x string) {
		t.Helper()
		if err := s.pool.QueryRow(ctx, s.sql(`SELECT xmin::text FROM {schema}.records WHERE id = $1`), r.ID).Scan(&x); err != nil {
			t.Fatal(err)
		}
		return x
	}
	before := xmin()
	for range 5 {
		if _, won, err := s.Reserve(ctx, newRecord("k", time.Now()), record.ReserveOptions{}); err != nil || won {
			t.Fatalf("replay: won=%v err=%v", won, err)
		}
	}
	if after := xmin(); after != before {
		t.Errorf("five replays rewrote the record (xmin %s, then %s); want it only read", before, after)
	}
}

// TestPurgeSettlesOrphansTogether: the orphans a purge finds are settled
// in the batches of updates, a few transactions for all, not one each:
// the reservation whose purge found them waits for them. The pool's
// acquisitions count the transactions.
func TestPurgeSettlesOrphansTogether(t *testing.T) {
	const n = 64
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	var mu sync.Mutex
	told := 0
	s, err := Open(context.Background(), serverURL(t), Options{Now: clock.Now, Schema: newSchema(t), Orphaned: func(*record.Record) {
		mu.Lock()
		told++
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ctx := t.Context()
	var ids []string
	for i := range n {
		r := newRecord(fmt.Sprint("orphan", i), clock.Now())
		r.Owner, r.LeaseUntil = "gone", clock.Now().Add(time.Second)
		if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{Dispatch: true}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	clock.Advance(2 * time.Second)
	before := s.pool.Stat().AcquireCount()
	if _, err := s.Purge(ctx, n); err != nil {
		t.Fatal(err)
	}
	if got := s.pool.Stat().AcquireCount() - before; got > n/4 {
		t.Errorf("settling %d orphans took %d connections; want a few batches", n, got)
	}
	for _, id := range ids {
		if r, err := s.Get(ctx, id); err != nil || r.State != record.Unknown {
			t.Fatalf("orphan %s after the purge: %+v, %v; want it unknown", id, r, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if told != n {
		t.Errorf("Orphaned was told of %d orphans; want %d", told, n)
	}
}
