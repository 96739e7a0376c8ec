package redisstore_test

import (
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/redisstore"
)

// fcalls counts the functions called (FCALL) by the end of their name:
// "settle", "update", ...
func fcalls(cmd redis.Cmder) (string, bool) {
	args := cmd.Args()
	if cmd.Name() != "fcall" || len(args) < 2 {
		return "", false
	}
	fn, _ := args[1].(string)
	return fn[strings.LastIndexByte(fn, '_')+1:], true
}

// A new execution's completed and delivered, which the store makes with
// the settle script when it knows the record, leave the record, its
// holder and index TTLs and what Update returns as the update script
// leaves them.
func TestSettleWritesWhatUpdateWrites(t *testing.T) {
	url := serverURL(t)
	prefix := newPrefix(t, url)
	// Now, as a store that finds a record by its id alone reads an index
	// whose TTL runs to its expiry.
	clock := recordtest.NewClock(time.Now().Truncate(time.Second).Add(999_999_999))
	s := open(t, url, prefix, clock.Now)
	h := newTally(fcalls)
	redisstore.Client(s).AddHook(h)
	raw := rawClient(t, url)
	ctx := t.Context()

	// Record a is settled by s, which reserved it; record b, at the same
	// times, by stores that never saw it, with the update script.
	a, b := newRecord("a"), newRecord("b")
	for _, r := range []*record.Record{a, b} {
		r.Owner, r.LeaseUntil = "proxy-1", clock.Now().Add(time.Minute)
		if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{Dispatch: true}); err != nil {
			t.Fatal(err)
		}
	}
	changes := []record.Change{
		{To: record.Completed, Holder: "proxy-1", Attempts: 1, Result: json.RawMessage(`{"content":[{"type":"text","text":"\u00e9 \"charged\""}]}`)},
		{To: record.Delivered, From: record.Completed},
	}
	for _, c := range changes {
		clock.Advance(1500*time.Millisecond + 1)
		got, err := s.Update(ctx, a.ID, c)
		if err != nil {
			t.Fatalf("%s of a: %v", c.To, err)
		}
		stranger := open(t, url, prefix, clock.Now)
		want, err := stranger.Update(ctx, b.ID, c)
		if err != nil {
			t.Fatalf("%s of b: %v", c.To, err)
		}
		stored, err := stranger.Get(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !sameRecord(got, stored) {
			t.Errorf("%s: Update returned\n%+v\nstored\n%+v", c.To, got, stored)
		}
		if !sameRecord(got, want) {
			t.Errorf("%s: the settle script made\n%+v\nthe update script\n%+v", c.To, got, want)
		}
		ha, ra, ia := redisstore.Keys(s, a.Key, a.ID)
		hb, rb, _ := redisstore.Keys(s, b.Key, b.ID)
		fa, fb := raw.HGetAll(ctx, ra).Val(), raw.HGetAll(ctx, rb).Val()
		for _, f := range []string{"id", "key", "fingerprint"} {
			delete(fa, f)
			delete(fb, f)
		}
		if !maps.Equal(fa, fb) {
			t.Errorf("%s: the settle script wrote\n%v\nthe update script\n%v", c.To, fa, fb)
		}
		// The index expires with the record. (The stranger sets b's
		// from the record's expiry, by this test's clock.)
		for _, k := range [][2]string{{ra, rb}, {ha, hb}, {ia, ra}} {
			ta, tb := raw.PTTL(ctx, k[0]).Val(), raw.PTTL(ctx, k[1]).Val()
			if d := ta - tb; d < -250*time.Millisecond || d > 250*time.Millisecond || ta <= 0 {
				t.Errorf("%s: TTL of %s %v, of %s %v; want the same", c.To, k[0], ta, k[1], tb)
			}
		}
	}
	if n := h.get("settle"); n != 2 {
		t.Errorf("the settle script ran %d times; want 2 (completed, delivered)", n)
	}
}

// sameRecord reports whether a and b are the same but for their ids and
// keys.
func sameRecord(a, b *record.Record) bool {
	c := *b
	c.ID, c.Key, c.Fingerprint = a.ID, a.Key, a.Fingerprint
	return reflect.DeepEqual(a, &c)
}

// A record another process moved on since the store knew it is settled
// by the update script, with its checks: a completion from an owner
// whose execution was taken over is refused, and a record gone is not
// made again.
func TestSettleOfARecordMovedElsewhere(t *testing.T) {
	url := serverURL(t)
	prefix := newPrefix(t, url)
	s, other := open(t, url, prefix, nil), open(t, url, prefix, nil)
	h := newTally(fcalls)
	redisstore.Client(s).AddHook(h)
	raw := rawClient(t, url)
	ctx := t.Context()

	r := newRecord("taken")
	r.Owner, r.LeaseUntil = "proxy-1", time.Now().Add(time.Minute)
	if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{Dispatch: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Update(ctx, r.ID, record.Change{To: record.Dispatched, Owner: "proxy-2", LeaseUntil: time.Now().Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	_, err := s.Update(ctx, r.ID, record.Change{To: record.Completed, Holder: "proxy-1", Result: json.RawMessage(`{}`)})
	if !errors.Is(err, record.ErrConflict) {
		t.Errorf("completed by the owner it was taken from: %v; want a conflict", err)
	}
	if got, err := other.Get(ctx, r.ID); err != nil || got.State != record.Dispatched || got.Owner != "proxy-2" {
		t.Errorf("after a refused completion: %+v, %v; want dispatched by proxy-2", got, err)
	}

	gone := newRecord("gone")
	gone.Owner, gone.LeaseUntil = "proxy-1", time.Now().Add(time.Minute)
	if _, _, err := s.Reserve(ctx, gone, record.ReserveOptions{Dispatch: true}); err != nil {
		t.Fatal(err)
	}
	_, rk, _ := redisstore.Keys(s, gone.Key, gone.ID)
	if err := raw.Del(ctx, rk).Err(); err != nil {
		t.Fatal(err)
	}
	_, err = s.Update(ctx, gone.ID, record.Change{To: record.Completed, Holder: "proxy-1", Result: json.RawMessage(`{}`)})
	if !errors.Is(err, record.ErrNotFound) {
		t.Errorf("completed once its record is gone: %v; want not found", err)
	}
	if n := raw.Exists(ctx, rk).Val(); n != 0 {
		t.Errorf("completing a record that is gone left a key %s: %v", rk, raw.HGetAll(ctx, rk).Val())
	}
	if n := h.get("settle"); n != 2 {
		t.Errorf("the settle script ran %d times; want 2, each answered that the record moved", n)
	}
}

// A settle the store could make with the settle script is refused as the
// update script refuses it: a completion fenced to another owner or
// another attempt, a delivery of a record not completed. And a record
// that Redis lost a settle of, then moved on to another state whose
// history has the same length, is not settled again over it.
func TestSettleRefusesWhatUpdateRefuses(t *testing.T) {
	url := serverURL(t)
	s := open(t, url, newPrefix(t, url), nil)
	raw := rawClient(t, url)
	ctx := t.Context()
	r := newRecord("fenced")
	r.Owner, r.LeaseUntil = "proxy-1", time.Now().Add(time.Minute)
	if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{Dispatch: true}); err != nil {
		t.Fatal(err)
	}
	result := json.RawMessage(`{"content":[]}`)
	for _, c := range []record.Change{
		{To: record.Completed, Holder: "proxy-2", Result: result},
		{To: record.Completed, Holder: "proxy-1", Attempts: 2, Result: result},
		{To: record.Delivered, From: record.Completed},
		{To: record.Completed, From: record.Completed, Result: result},
	} {
		if _, err := s.Update(ctx, r.ID, c); !errors.Is(err, record.ErrConflict) {
			t.Errorf("%+v of a dispatched record: %v; want a conflict", c, err)
		}
	}
	if _, err := s.Update(ctx, r.ID, record.Change{To: record.Completed, Holder: "proxy-1", Attempts: 1, Result: result}); err != nil {
		t.Fatal(err)
	}

	// Redis loses the completion (a failover), and another process
	// fails the record with a note as long as "completed" is longer
	// than "failed": the history is as long as the one the store knows.
	_, rk, _ := redisstore.Keys(s, r.Key, r.ID)
	hist := raw.HGet(ctx, rk, "history").Val()
	i := strings.LastIndex(hist, `["completed",`)
	lost := hist[:i] + `["failed",` + strings.TrimSuffix(hist[i+len(`["completed",`):], `""]]`) + `"EOF"]]`
	if len(lost) != len(hist) {
		t.Fatalf("the history made up is %d bytes, not %d: %s", len(lost), len(hist), lost)
	}
	if err := raw.HSet(ctx, rk, "state", "failed", "history", lost, "result", "").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, r.ID, record.Change{To: record.Delivered, From: record.Completed}); !errors.Is(err, record.ErrConflict) {
		t.Errorf("delivered of a record another process failed: %v; want a conflict", err)
	}
	if st := raw.HGet(ctx, rk, "state").Val(); st != "failed" {
		t.Errorf("the record is %s; want it failed, as the other process left it", st)
	}
}
