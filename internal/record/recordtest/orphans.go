package recordtest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// NewToldStore returns an empty store that reads the time from now and
// tells orphaned of each orphan its purge settles.
type NewToldStore func(t *testing.T, now func() time.Time, orphaned func(*record.Record)) record.Store

// RunPurgeTellsOfOrphans checks a store that settles orphans as it
// purges: it tells of each, once, as the purge left it (failed if never
// sent, unknown if sent), so that the process running the purge can
// journal the takeover that no call met.
func RunPurgeTellsOfOrphans(t *testing.T, newStore NewToldStore) {
	clock := NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	var mu sync.Mutex
	told := map[string]*record.Record{}
	s := newStore(t, clock.Now, func(r *record.Record) {
		mu.Lock()
		defer mu.Unlock()
		if told[r.ID] != nil {
			t.Errorf("told of orphan %s twice", r.ID)
		}
		told[r.ID] = r
	})
	p, ok := s.(interface {
		Purge(ctx context.Context, limit int) (int, error)
	})
	if !ok {
		t.Fatal("the store has no Purge")
	}
	sent, _ := mustReserve(t, s, leased("sent", "proxy-1", clock.Now().Add(10*time.Second)), record.ReserveOptions{})
	mustUpdate(t, s, sent.ID, record.Change{To: record.Dispatched})
	waiting, _ := mustReserve(t, s, leased("waiting", "proxy-1", clock.Now().Add(10*time.Second)), record.ReserveOptions{})
	clock.Advance(11 * time.Second) // proxy-1 died
	for range 2 {
		if _, err := p.Purge(context.Background(), 100); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for id, want := range map[string]record.State{sent.ID: record.Unknown, waiting.ID: record.Failed} {
		o := told[id]
		if o == nil || o.State != want || !strings.Contains(o.History[len(o.History)-1].Note, "proxy-1 went away") {
			t.Errorf("told of orphan %s as %+v; want it %s, naming the owner that went away", id, o, want)
		}
	}
}

// A PacedStore is a store whose reservations purge every purgeEvery-th
// time, looking for orphans at most every scanEvery; looks counts those
// looks.
type PacedStore struct {
	record.Store
	PurgeEvery int
	ScanEvery  time.Duration
	Looks      func() uint64
}

// RunPacedOrphanScan checks that the purges of reservations made in one
// instant look for orphans once, that one made once ScanEvery has passed
// looks again and settles the orphan it finds, and that one made after
// the clock went back looks again.
func RunPacedOrphanScan(t *testing.T, newStore func(t *testing.T, now func() time.Time) PacedStore) {
	clock := NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	s := newStore(t, clock.Now)
	orphan, _ := mustReserve(t, s, leased("orphan", "gone", clock.Now().Add(time.Second)), record.ReserveOptions{Dispatch: true})
	n := 0
	reserve := func(count int) {
		t.Helper()
		for range count {
			n++
			mustReserve(t, s, leased(fmt.Sprint("k", n), "here", clock.Now().Add(time.Minute)), record.ReserveOptions{})
		}
	}
	reserve(4 * s.PurgeEvery)
	if looks := s.Looks(); looks != 1 {
		t.Fatalf("%d reservations in one instant looked for orphans %d times; want once", 4*s.PurgeEvery+1, looks)
	}
	wait := max(s.ScanEvery, 2*time.Second) // and past the orphan's lease
	clock.Advance(wait)
	reserve(s.PurgeEvery)
	if looks := s.Looks(); looks != 2 {
		t.Fatalf("looked for orphans %d times; want twice, once %v passed", looks, wait)
	}
	if got, err := s.Get(context.Background(), orphan.ID); err != nil || got.State != record.Unknown {
		t.Fatalf("the orphan after the second look: %+v, %v; want it unknown", got, err)
	}
	clock.Advance(-time.Minute) // a clock set back
	reserve(s.PurgeEvery)
	if looks := s.Looks(); looks != 3 {
		t.Fatalf("looked for orphans %d times; want a third look once the clock went back", looks)
	}
}
