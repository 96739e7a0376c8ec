package redisstore_test

import (
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/redisstore"
)

// TestDecisions: a decision made through one Store wakes the owner
// waiting in another through pub/sub: the waiter's fallback poll is set
// too slow to find it in time.
func TestDecisions(t *testing.T) {
	recordtest.RunDecisions(t, func(t *testing.T) (record.Store, record.Store) {
		url := serverURL(t)
		prefix := newPrefix(t, url)
		s := open(t, url, prefix, nil)
		redisstore.SetPoll(s, time.Hour, time.Hour)
		select {
		case <-redisstore.Subscribed(s):
		case <-time.After(10 * time.Second):
			t.Fatal("the store never subscribed")
		}
		return s, open(t, url, prefix, nil)
	})
}
