package redisstore_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/redisstore"
)

// TestRecordWithoutStateNamed: a record hash another program took the
// state field from is refused by a Reserve of its key with an error that
// names the record: not taken for no record, which would run its call
// again.
func TestRecordWithoutStateNamed(t *testing.T) {
	ctx := t.Context()
	url := serverURL(t)
	prefix := newPrefix(t, url)
	s := open(t, url, prefix, nil)
	r := newRecord("k")
	if _, won, err := s.Reserve(ctx, r, record.ReserveOptions{Dispatch: true}); err != nil || !won {
		t.Fatalf("Reserve = won %v, %v", won, err)
	}
	if _, err := s.Update(ctx, r.ID, record.Change{To: record.Completed, Result: json.RawMessage(`{"content":[]}`)}); err != nil {
		t.Fatal(err)
	}
	_, key, _ := redisstore.Keys(s, r.Key, r.ID)
	if err := redisstore.Client(s).HDel(ctx, key, "state").Err(); err != nil {
		t.Fatal(err)
	}
	other := open(t, url, prefix, nil) // no record of its own in memory
	if got, won, err := other.Reserve(ctx, newRecord("k"), record.ReserveOptions{}); err == nil || won || !strings.Contains(err.Error(), r.ID) || !strings.Contains(err.Error(), "no state") || !errors.Is(err, record.ErrUnreadable) {
		t.Errorf("Reserve = %v won=%v %v; want an error naming %s and saying it has no state", got, won, err, r.ID)
	}
}
