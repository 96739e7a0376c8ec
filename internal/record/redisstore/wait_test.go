package redisstore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// TestWaitDeadlineIsCtxError: Wait "blocks until the record id is settled
// and returns it, or returns ctx's error" (record.Store). A caller's
// deadline that passes while Wait's check is on the wire (the server busy
// for a moment) must come back as ctx's error, which callers tell from a
// store failure (intercept's attach window: "still in progress", not "lost
// track of execution"); memstore and pgstore return
// context.DeadlineExceeded.
func TestWaitDeadlineIsCtxError(t *testing.T) {
	url := serverURL(t)
	s := open(t, url, newPrefix(t, url), time.Now)
	ctx := context.Background()
	r := &record.Record{ID: record.NewID(time.Now()), Key: "k", Fingerprint: "k", Tool: "charge_card", Retention: time.Hour,
		Owner: "proxy-1", LeaseUntil: time.Now().Add(time.Minute)}
	if _, won, err := s.Reserve(ctx, r, record.ReserveOptions{Dispatch: true}); err != nil || !won {
		t.Fatal(won, err)
	}
	// Another client keeps the server busy for 100ms.
	opt, _ := redis.ParseURL(url)
	busy := redis.NewClient(opt)
	defer busy.Close()
	done := make(chan error, 1)
	go func() {
		done <- busy.Eval(ctx, `local s = redis.call('TIME')
while true do
  local n = redis.call('TIME')
  if (n[1] - s[1]) * 1000000 + (n[2] - s[2]) > 100000 then return 1 end
end`, nil).Err()
	}()
	time.Sleep(10 * time.Millisecond)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err := s.Wait(wctx, r.ID)
	if berr := <-done; berr != nil {
		t.Fatal(berr)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait past its deadline = %v; want ctx's error (context.DeadlineExceeded)", err)
	}
}

// TestWaitSeesItsSettleThrough: a Wait whose check settles an orphan
// reports it ("exactly one learns of it", record.Record.Orphan), even
// when the caller's deadline passes while the check waits behind a busy
// server: the script runs once sent, so its answer is read. Else the
// orphan would be settled with no caller to report it.
func TestWaitSeesItsSettleThrough(t *testing.T) {
	url := serverURL(t)
	var clock atomic.Int64
	start := time.Now()
	clock.Store(start.UnixNano())
	s := open(t, url, newPrefix(t, url), func() time.Time { return time.Unix(0, clock.Load()) })
	ctx := context.Background()
	r := &record.Record{ID: record.NewID(start), Key: "k", Fingerprint: "k", Tool: "charge_card", Retention: time.Hour,
		Owner: "proxy-1", LeaseUntil: start.Add(time.Second)}
	if _, won, err := s.Reserve(ctx, r, record.ReserveOptions{Dispatch: true}); err != nil || !won {
		t.Fatal(won, err)
	}
	clock.Store(start.Add(time.Minute).UnixNano()) // the lease has lapsed
	done := keepBusy(t, url, 100*time.Millisecond)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	rec, err := s.Wait(wctx, r.ID)
	if berr := <-done; berr != nil {
		t.Fatal(berr)
	}
	switch {
	case err == nil && rec.Orphan == nil:
		t.Fatalf("Wait settled %s as %s and did not report the orphan", r.ID, rec.State)
	case err != nil:
		got, gerr := s.Get(ctx, r.ID)
		if gerr != nil {
			t.Fatal(gerr)
		}
		if got.State.Settled() {
			t.Fatalf("Wait = %v, and the orphan it checked is settled (%s): no one learns of it", err, got.State)
		}
	}
}

// keepBusy keeps the server at url busy for d with a script of another
// client's, and returns that script's outcome once it has run.
func keepBusy(t *testing.T, url string, d time.Duration) <-chan error {
	t.Helper()
	opt, _ := redis.ParseURL(url)
	busy := redis.NewClient(opt)
	t.Cleanup(func() { busy.Close() })
	done := make(chan error, 1)
	go func() {
		done <- busy.Eval(context.Background(), `local s = redis.call('TIME')
while true do
  local n = redis.call('TIME')
  if (n[1] - s[1]) * 1000000 + (n[2] - s[2]) > tonumber(ARGV[1]) then return 1 end
end`, nil, d.Microseconds()).Err()
	}()
	time.Sleep(10 * time.Millisecond) // for the script to start
	return done
}
