package redisstore_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/redisstore"
)

// A tally is a client hook that counts the commands it sees by what key
// names them, those it names.
type tally struct {
	key func(redis.Cmder) (string, bool)
	mu  sync.Mutex
	n   map[string]int
}

func newTally(key func(redis.Cmder) (string, bool)) *tally {
	return &tally{key: key, n: make(map[string]int)}
}

// replies counts the replies of the scripts by their first member
// ("applied", "ok", ...).
func replies(cmd redis.Cmder) (string, bool) {
	c, ok := cmd.(*redis.Cmd)
	if !ok {
		return "", false
	}
	v, ok := c.Val().([]any)
	if !ok || len(v) == 0 {
		return "", false
	}
	s, ok := v[0].(string)
	return s, ok
}

func (h *tally) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *tally) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.count(cmd)
		return err
	}
}

func (h *tally) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return err
	}
}

func (h *tally) count(cmd redis.Cmder) {
	if k, ok := h.key(cmd); ok {
		h.mu.Lock()
		h.n[k]++
		h.mu.Unlock()
	}
}

func (h *tally) get(k string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[k]
}

// An update of a record the store knows is answered with what changed,
// not the whole record, and returns the record as stored all the same:
// with decisions, notes JSON escapes, claims, renewals and attaches in
// between, and after another process moved the record on.
func TestUpdatesAnswerWhatChanged(t *testing.T) {
	url := serverURL(t)
	prefix := newPrefix(t, url)
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 999_999_999, time.UTC))
	s, other := open(t, url, prefix, clock.Now), open(t, url, prefix, clock.Now)
	h := newTally(replies)
	redisstore.Client(s).AddHook(h)
	ctx := t.Context()
	r := newRecord("k")
	r.Owner, r.LeaseUntil = "proxy-1", clock.Now().Add(time.Minute)
	if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	step := recordtest.Steps(t, clock, s, other, r.ID)
	step("authorized", record.Change{To: record.Authorized, From: record.Accepted, By: "alice", Via: record.ApproverOperator,
		Note: "a \"quoted\" note / with \\ slashes, é, \u2028 and a tab\t"})
	// Counted by another process, and written at its Close.
	attach := open(t, url, prefix, clock.Now)
	if got, won, err := attach.Reserve(ctx, newRecord("k"), record.ReserveOptions{}); err != nil || won || got.ID != r.ID {
		t.Fatalf("attach: %v won=%v err=%v", got, won, err)
	}
	if err := attach.Close(); err != nil {
		t.Fatal(err)
	}
	step("dispatched by a new owner", record.Change{To: record.Dispatched, Owner: "proxy-2", LeaseUntil: clock.Now().Add(time.Hour)})
	if err := s.Renew(ctx, "proxy-2", clock.Now().Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	step("unknown", record.Change{To: record.Unknown, Note: "\x01 no answer"})
	step("dispatched again", record.Change{To: record.Dispatched, Note: "retry"})
	if n := h.get("applied"); n != 4 {
		t.Errorf("%d updates were answered with what changed; want 4", n)
	}
	// Another process moves the record on: this one's copy is stale.
	if _, err := other.Update(ctx, r.ID, record.Change{To: record.Unknown}); err != nil {
		t.Fatal(err)
	}
	ok := h.get("ok")
	step("completed after another process's change", record.Change{To: record.Completed, Result: json.RawMessage(`{"content":[]}`)})
	if h.get("ok") != ok+1 {
		t.Error("an update of a record another process changed was not answered with the whole record")
	}
	step("delivered", record.Change{To: record.Delivered, From: record.Completed})
}
