package memstore

import (
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
