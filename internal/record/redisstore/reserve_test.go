package redisstore_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/redisstore"
)

// TestWonReservationSurvivesTheOrphansCount: a reservation that settled
// an orphan and won reads the orphan's attach count again when a write
// of the counts overlapped it. That read failing leaves the reservation
// made, and the orphan reported as the script read it: its caller alone
// journals the takeover.
func TestWonReservationSurvivesTheOrphansCount(t *testing.T) {
	url := serverURL(t)
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	var (
		s                  *redisstore.Store
		armed              atomic.Bool
		other              *record.Record // attached to meanwhile
		nextKey, orphanKey string
		mu                 sync.Mutex
		logs               bytes.Buffer
	)
	// Once the script has written the next record, and before the
	// orphan's count is read again, the orphan goes and a write of the
	// counts overlaps: the count, read again, is not found.
	now := func() time.Time {
		if armed.Load() {
			c := redisstore.Client(s)
			if n, err := c.Exists(t.Context(), nextKey).Result(); err != nil {
				t.Error(err)
			} else if n == 1 && armed.CompareAndSwap(true, false) {
				if err := c.Del(t.Context(), orphanKey).Err(); err != nil {
					t.Error(err)
				}
				if err := redisstore.OverlapWrite(t.Context(), s, other); err != nil {
					t.Error(err)
				}
			}
		}
		return clock.Now()
	}
	s = openWith(t, url, redisstore.Options{Now: now, Prefix: newPrefix(t, url) + "redisorphan:",
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))})
	ctx := t.Context()
	other = newRecord("other")
	if _, _, err := s.Reserve(ctx, other, record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	orphan := newRecord("k")
	orphan.Owner, orphan.LeaseUntil = "proxy-1", clock.Now().Add(time.Second)
	if _, _, err := s.Reserve(ctx, orphan, record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second) // proxy-1 died
	next := newRecord("k")
	next.Owner, next.LeaseUntil = "proxy-2", clock.Now().Add(time.Minute)
	_, nextKey, _ = redisstore.Keys(s, "k", next.ID)
	_, orphanKey, _ = redisstore.Keys(s, "k", orphan.ID)
	armed.Store(true)
	got, won, err := s.Reserve(ctx, next, record.ReserveOptions{})
	if armed.Swap(false) {
		t.Fatal("the store read no time between its script and the orphan's count: the test no longer overlaps them")
	}
	if err != nil || !won {
		t.Fatalf("Reserve: won=%v err=%v; want the reservation, which is made", won, err)
	}
	if got.Orphan == nil || got.Orphan.ID != orphan.ID || got.Orphan.State != record.Failed {
		t.Errorf("the reservation reports the orphan %+v; want %s failed, as read", got.Orphan, orphan.ID)
	}
	if stored, err := s.Get(ctx, next.ID); err != nil || stored.State != record.Accepted {
		t.Errorf("the reserved record: %+v, %v; want it accepted", stored, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), orphan.ID) {
		t.Errorf("logged %q; want a warning naming the orphan %s", logs.String(), orphan.ID)
	}
}
