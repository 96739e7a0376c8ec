package memstore

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
)

func TestExpirySecond(t *testing.T) {
	for _, tt := range []struct {
		ns   int64
		want uint32
	}{
		{-5, 0},
		{0, 0},
		{1, 1},
		{int64(time.Second), 1},
		{int64(time.Second) + 1, 2},
		{1796222441324701012, 1796222442},
		{math.MaxInt64, math.MaxUint32},
	} {
		if got := expirySecond(tt.ns); got != tt.want {
			t.Errorf("expirySecond(%d) = %d; want %d", tt.ns, got, tt.want)
		}
	}
}

// TestShortRetentionIsPurged checks that a record kept for less than a
// second, whose expiry the heap rounds up to the next second, is purged
// by then, and not before it expires.
func TestShortRetentionIsPurged(t *testing.T) {
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	s := New(Options{Now: clock.Now})
	ctx := t.Context()
	r := &record.Record{ID: record.NewID(clock.Now()), Key: "k", Retention: 300 * time.Millisecond}
	if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, r.ID, record.Change{To: record.Failed}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(200 * time.Millisecond)
	s.PurgeExpired()
	if s.Len() != 1 {
		t.Fatal("purged before its retention ran out")
	}
	clock.Advance(800 * time.Millisecond)
	s.PurgeExpired()
	if s.Len() != 0 {
		t.Fatal("still held a second after it was settled, with a retention of 300ms")
	}
}

// TestPurgeGivesBackTheTablesRoom: once a purge has let go most of a
// burst of records, the indexes and the expiry heap give back the room
// the burst grew them to, and the records left are still found.
func TestPurgeGivesBackTheTablesRoom(t *testing.T) {
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	s := New(Options{Now: clock.Now})
	ctx := t.Context()
	const n, kept = 50_000, 100
	var ids []string
	for i := range n {
		retention := time.Minute
		if i < kept {
			retention = time.Hour
		}
		r := &record.Record{ID: record.NewID(clock.Now()), Key: fmt.Sprint("k", i), Retention: retention}
		if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Update(ctx, r.ID, record.Change{To: record.Failed}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	byID, byKey, heap := len(s.byID.buckets), len(s.byKey.buckets), cap(s.expires.items)
	clock.Advance(2 * time.Minute)
	s.PurgeExpired()
	if s.Len() != kept {
		t.Fatalf("%d records left; want %d", s.Len(), kept)
	}
	if len(s.byID.buckets)*16 > byID || len(s.byKey.buckets)*16 > byKey || cap(s.expires.items)*16 > heap {
		t.Errorf("after the purge: indexes of %d and %d buckets, a heap of room %d; were %d, %d and %d",
			len(s.byID.buckets), len(s.byKey.buckets), cap(s.expires.items), byID, byKey, heap)
	}
	for i, id := range ids[:kept] {
		if r, err := s.Get(ctx, id); err != nil || r.Key != fmt.Sprint("k", i) {
			t.Fatalf("Get(%s) = %v, %v after the purge; want the record of k%d", id, r, err, i)
		}
	}
}
