package redisstore_test

import (
	"context"
	"errors"
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
