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
