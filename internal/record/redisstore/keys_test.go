package redisstore_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/redisstore"
)

// TestReplaysLeaveNoKeys: a reservation that does not win (a replay, an
// attach) writes no key of its own; the won one is found by its id from
// another process.
func TestReplaysLeaveNoKeys(t *testing.T) {
	url := serverURL(t)
	prefix := newPrefix(t, url)
	s := open(t, url, prefix, nil)
	ctx := t.Context()
	first := newRecord("charge")
	first.Owner, first.LeaseUntil = "proxy-1", time.Now().Add(time.Minute)
	if _, won, err := s.Reserve(ctx, first, record.ReserveOptions{}); err != nil || !won {
		t.Fatalf("first reservation: won=%v err=%v", won, err)
	}
	keys := func() []string {
		t.Helper()
		all, err := keysUnder(redisstore.Client(s), prefix)
		if err != nil {
			t.Fatal(err)
		}
		return all
	}
	before := keys()
	for range 100 {
		if _, won, err := s.Reserve(ctx, newRecord("charge"), record.ReserveOptions{}); err != nil || won {
			t.Fatalf("replay: won=%v err=%v", won, err)
		}
	}
	if after := keys(); !slices.Equal(before, after) {
		t.Errorf("100 replays left %d keys more: before %v, after %v", len(after)-len(before), before, after)
	}
	other := open(t, url, prefix, nil)
	if got, err := other.Get(ctx, first.ID); err != nil || got.ID != first.ID {
		t.Errorf("another process's Get(%s) = %v, %v; want the record, by its index", first.ID, got, err)
	}
}

// pttl returns a function that reads a key's Redis TTL (-1 for none).
func pttl(t *testing.T, url string) func(key string) time.Duration {
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	raw := redis.NewClient(opt)
	t.Cleanup(func() { raw.Close() })
	return func(key string) time.Duration {
		t.Helper()
		d, err := raw.PTTL(t.Context(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
}

// A Renew that finds a record it tracked settled or taken over leaves
// the record's index the TTL its record gave it: a day past the record
// was a key left behind. The index of one in flight for over half a day
// it gives another day.
func TestRenewLeavesASettledIndex(t *testing.T) {
	url := serverURL(t)
	prefix := newPrefix(t, url)
	clock := recordtest.NewClock(time.Now())
	p1, p2 := open(t, url, prefix, clock.Now), open(t, url, prefix, clock.Now)
	ctx := t.Context()
	ttl := pttl(t, url)
	r := newRecord("k")
	r.Retention = time.Second
	r.Owner, r.LeaseUntil = "proxy-1", clock.Now().Add(10*time.Second)
	if _, _, err := p1.Reserve(ctx, r, record.ReserveOptions{Dispatch: true}); err != nil {
		t.Fatal(err)
	}
	_, rec, index := redisstore.Keys(p1, "k", r.ID)
	clock.Advance(11 * time.Second)
	if got, _, err := p2.Reserve(ctx, newRecord("k"), record.ReserveOptions{}); err != nil || got.State != record.Unknown {
		t.Fatalf("takeover: %+v, %v", got, err)
	}
	long := newRecord("long")
	long.Owner, long.LeaseUntil = "proxy-1", clock.Now().Add(10*time.Second)
	if _, _, err := p1.Reserve(ctx, long, record.ReserveOptions{Dispatch: true}); err != nil {
		t.Fatal(err)
	}
	_, _, longIndex := redisstore.Keys(p1, "long", long.ID)
	if err := p1.Renew(ctx, "proxy-1", clock.Now().Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if ttl(index) > ttl(rec)+time.Second {
		t.Errorf("after a Renew by its former owner, the index of settled %s lives %v, its record %v", r.ID, ttl(index), ttl(rec))
	}
	// The day its reservation gave the index of the other nearly over:
	if err := rawClient(t, url).PExpire(ctx, longIndex, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	clock.Advance(13 * time.Hour)
	if err := p1.Renew(ctx, "proxy-1", clock.Now().Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if d := ttl(longIndex); d < 23*time.Hour {
		t.Errorf("the index of %s, in flight for 13 hours, lives %v after a Renew; want a day", long.ID, d)
	}
}

// An update that a settled record refuses leaves its index expiring with
// it, though the update's round trip wrote the index: a second delivery
// a while after the first (two callers, each delivering) kept the index
// that while past the record.
func TestRefusedUpdateLeavesTheIndex(t *testing.T) {
	url := serverURL(t)
	prefix := newPrefix(t, url)
	p1, p2 := open(t, url, prefix, time.Now), open(t, url, prefix, time.Now)
	ctx := t.Context()
	ttl := pttl(t, url)
	r := newRecord("k")
	if _, _, err := p1.Reserve(ctx, r, record.ReserveOptions{Dispatch: true}); err != nil {
		t.Fatal(err)
	}
	mustUpdate(t, p1, r.ID, record.Change{To: record.Completed, Result: json.RawMessage(`{}`)})
	mustUpdate(t, p2, r.ID, record.Change{To: record.Delivered, From: record.Completed})
	time.Sleep(1500 * time.Millisecond)
	if _, err := p1.Update(ctx, r.ID, record.Change{To: record.Delivered, From: record.Completed}); !errors.Is(err, record.ErrConflict) {
		t.Fatalf("a second delivery: %v; want ErrConflict", err)
	}
	_, rec, index := redisstore.Keys(p1, "k", r.ID)
	if d, want := ttl(index), ttl(rec); d > want+500*time.Millisecond {
		t.Errorf("after a refused update, the index of %s lives %v, its record %v", r.ID, d, want)
	}
}

// Settled records, their holder and their index carry a Redis TTL of their
// retention and a grace; records in flight without a lease (which never
// become orphans) and their holder carry none.
func TestSettledRecordsExpireInRedis(t *testing.T) {
	url := serverURL(t)
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	s := open(t, url, newPrefix(t, url), clock.Now)
	ctx := t.Context()
	ttl := pttl(t, url)
	settled := func(what, key string) {
		t.Helper()
		if d := ttl(key); d <= time.Hour || d > time.Hour+redisstore.TTLGrace {
			t.Errorf("%s TTL = %v; want the retention and a grace", what, d)
		}
	}
	inFlight := func(what, key string) {
		t.Helper()
		if d := ttl(key); d != -1 {
			t.Errorf("%s TTL = %v; want none (-1)", what, d)
		}
	}
	indexInFlight := func(what, key string) {
		t.Helper()
		if d := ttl(key); d <= 23*time.Hour || d > 24*time.Hour {
			t.Errorf("%s TTL = %v; want a day, renewed while in flight", what, d)
		}
	}

	r, _, err := s.Reserve(ctx, newRecord("k"), record.ReserveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	holder, rec, index := redisstore.Keys(s, "k", r.ID)
	inFlight("accepted record", rec)
	inFlight("holder of an accepted record", holder)
	mustUpdate(t, s, r.ID, record.Change{To: record.Dispatched})
	indexInFlight("index of a dispatched record", index)
	mustUpdate(t, s, r.ID, record.Change{To: record.Unknown})
	settled("unknown record", rec)
	settled("holder of an unknown record", holder)
	settled("index of an unknown record", index)
	mustUpdate(t, s, r.ID, record.Change{To: record.Dispatched, Note: "retry"})
	inFlight("re-dispatched record", rec)
	inFlight("holder of a re-dispatched record", holder)
	indexInFlight("index of a re-dispatched record", index)
	mustUpdate(t, s, r.ID, record.Change{To: record.Completed, Result: json.RawMessage(`{}`)})
	settled("completed record", rec)

	// A replaced record that moves on leaves its successor's holder alone.
	next, won, err := s.Reserve(ctx, newRecord("k"), record.ReserveOptions{Replace: []record.State{record.Completed}})
	if err != nil || !won {
		t.Fatalf("Reserve with Replace: won=%v err=%v", won, err)
	}
	inFlight("holder of the successor", holder)
	mustUpdate(t, s, r.ID, record.Change{To: record.Delivered})
	inFlight("holder of the successor after its predecessor's delivery", holder)

	// An orphan settled by another caller's reservation: its index expires
	// with it.
	mustUpdate(t, s, next.ID, record.Change{To: record.Dispatched, Owner: "proxy-1", LeaseUntil: clock.Now().Add(10 * time.Second)})
	_, _, nextIndex := redisstore.Keys(s, "k", next.ID)
	indexInFlight("index of a dispatched record", nextIndex)
	clock.Advance(11 * time.Second)
	if got, _, err := s.Reserve(ctx, newRecord("k"), record.ReserveOptions{}); err != nil || got.State != record.Unknown {
		t.Fatalf("Reserve over an orphan = %+v, %v", got, err)
	}
	settled("index of a settled orphan", nextIndex)
}

// A record in flight with a lease, and its holder, expire one retention
// and the grace after the lease ends, so that an orphan no one asks for
// again is dropped as if it had been settled then; a renewal or a new
// claim moves that along with the lease.
func TestOrphansExpireInRedis(t *testing.T) {
	url := serverURL(t)
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	s := open(t, url, newPrefix(t, url), clock.Now)
	ctx := t.Context()
	ttl := pttl(t, url)
	// want checks that key's TTL is lease, the retention (an hour) and
	// the grace, less the few seconds a slow test may take.
	want := func(what, key string, lease time.Duration) {
		t.Helper()
		d := ttl(key)
		full := lease + time.Hour + redisstore.TTLGrace
		if d > full || d < full-10*time.Second {
			t.Errorf("%s TTL = %v; want %v: the lease, the retention and the grace", what, d, full)
		}
	}

	r := newRecord("k")
	r.Owner, r.LeaseUntil = "proxy-1", clock.Now().Add(30*time.Second)
	if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	holder, rec, _ := redisstore.Keys(s, "k", r.ID)
	want("accepted record", rec, 30*time.Second)
	want("holder of an accepted record", holder, 30*time.Second)

	clock.Advance(10 * time.Second)
	if err := s.Renew(ctx, "proxy-1", clock.Now().Add(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	want("renewed record", rec, 10*time.Minute)
	want("holder of a renewed record", holder, 10*time.Minute)
	mustUpdate(t, s, r.ID, record.Change{To: record.Dispatched})
	want("dispatched record", rec, 10*time.Minute)

	// Settled unknown, then claimed again by another owner: in flight
	// under the new lease.
	mustUpdate(t, s, r.ID, record.Change{To: record.Unknown})
	mustUpdate(t, s, r.ID, record.Change{To: record.Dispatched, Owner: "proxy-2", LeaseUntil: clock.Now().Add(time.Minute)})
	want("record re-dispatched by another owner", rec, time.Minute)
	want("holder of a re-dispatched record", holder, time.Minute)

	// A lease already over when the TTL is set leaves the retention and
	// the grace.
	clock.Advance(5 * time.Minute)
	late := newRecord("late")
	late.Owner, late.LeaseUntil = "proxy-3", clock.Now().Add(-time.Second)
	if _, _, err := s.Reserve(ctx, late, record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	_, lateRec, _ := redisstore.Keys(s, "late", late.ID)
	want("record whose lease is over", lateRec, 0)
}

// Times are kept to the nanosecond: expiry is exact, with a carry into
// the seconds, and a lease lapses one nanosecond after its end, not at it.
func TestTimesAreExact(t *testing.T) {
	url := serverURL(t)
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 999_999_999, time.UTC))
	s := open(t, url, newPrefix(t, url), clock.Now)
	ctx := t.Context()
	r := newRecord("k")
	r.Retention = 1500*time.Millisecond + 1
	r.Owner, r.LeaseUntil = "proxy-1", clock.Now().Add(time.Nanosecond)
	if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Nanosecond) // at the lease's end: still held
	got, _, err := s.Reserve(ctx, newRecord("k"), record.ReserveOptions{})
	if err != nil || got.ID != r.ID || got.State != record.Accepted {
		t.Fatalf("Reserve at the lease's end = %+v, %v; want the record still accepted", got, err)
	}
	clock.Advance(time.Nanosecond) // past it: an orphan
	next, won, err := s.Reserve(ctx, newRecord("k"), record.ReserveOptions{})
	if err != nil || !won {
		t.Fatalf("Reserve past the lease = %+v won=%v, %v; want the orphan failed and replaced", next, won, err)
	}
	old, err := s.Get(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	settledAt := time.Date(2026, 7, 28, 12, 0, 1, 1, time.UTC)
	if len(old.History) != 2 || !old.History[1].At.Equal(settledAt) {
		t.Fatalf("History = %+v; want failed at %v", old.History, settledAt)
	}
	if want := settledAt.Add(r.Retention); !old.ExpiresAt.Equal(want) {
		t.Errorf("ExpiresAt = %v; want %v", old.ExpiresAt, want)
	}
	if want := "owner proxy-1 went away before sending it"; old.History[1].Note != want {
		t.Errorf("note = %q; want %q", old.History[1].Note, want)
	}
}

func mustUpdate(t *testing.T, s *redisstore.Store, id string, c record.Change) *record.Record {
	t.Helper()
	got, err := s.Update(t.Context(), id, c)
	if err != nil {
		t.Fatalf("Update(%s): %v", c.To, err)
	}
	return got
}

// The keys one script touches share a hash tag: one Redis Cluster slot.
func TestKeysShareAHashTag(t *testing.T) {
	s, err := redisstore.Open(t.Context(), "redis://127.0.0.1:1/0", redisstore.Options{Prefix: "p:"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tag := func(key string) string {
		_, after, ok := strings.Cut(key, "{")
		tag, _, ok2 := strings.Cut(after, "}")
		if !ok || !ok2 || tag == "" {
			t.Fatalf("key %q has no hash tag", key)
		}
		return tag
	}
	holder, rec, _ := redisstore.Keys(s, "some key {with braces}", "exe_1")
	_, other, _ := redisstore.Keys(s, "some key {with braces}", "exe_2")
	if tag(holder) != tag(rec) || tag(rec) != tag(other) {
		t.Errorf("keys %s %s %s do not share a hash tag", holder, rec, other)
	}
	if h2, _, _ := redisstore.Keys(s, "another key", "exe_1"); tag(h2) == tag(holder) {
		t.Errorf("two record keys share the tag %s", tag(h2))
	}
	if !strings.HasPrefix(holder, "p:") || !strings.HasPrefix(rec, "p:") {
		t.Errorf("keys %s %s do not begin with the prefix", holder, rec)
	}
	if _, err := redisstore.Open(t.Context(), "redis://127.0.0.1:1/0", redisstore.Options{Prefix: "a{b}:"}); err == nil {
		t.Error("Open accepted a prefix with braces")
	}
}
