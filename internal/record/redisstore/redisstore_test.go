package redisstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/redisstore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/skipnote"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		skipnote.Report("internal/record/redisstore")
		os.Exit(code)
	}))
}

func TestSemantics(t *testing.T) {
	url := serverURL(t)
	recordtest.Run(t, func(t *testing.T, now func() time.Time) record.Store {
		return open(t, url, newPrefix(t, url), now)
	})
}

func TestRoundTrips(t *testing.T) {
	url := serverURL(t)
	s := open(t, url, newPrefix(t, url), nil)
	ctx := t.Context()
	var c counter
	redisstore.Client(s).AddHook(&c)

	execute := func(key string, count bool) {
		t.Helper()
		r := newRecord(key)
		r.Owner, r.LeaseUntil = "proxy-1", time.Now().Add(time.Minute)
		steps := []struct {
			name string
			do   func() error
		}{
			{"Reserve and dispatch", func() error {
				got, won, err := s.Reserve(ctx, r, record.ReserveOptions{Dispatch: true})
				if err == nil && (!won || got.State != record.Dispatched) {
					err = fmt.Errorf("won=%v, %s; want won, dispatched", won, got.State)
				}
				return err
			}},
			{"Update completed", func() error {
				_, err := s.Update(ctx, r.ID, record.Change{To: record.Completed, Result: json.RawMessage(`{}`)})
				return err
			}},
			{"Update delivered", func() error { _, err := s.Update(ctx, r.ID, record.Change{To: record.Delivered}); return err }},
		}
		for _, st := range steps {
			before := c.n.Load()
			if err := st.do(); err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
			if n := c.n.Load() - before; count && n != 1 {
				t.Errorf("%s took %d round trips (%v); want 1", st.name, n, c.seen(before))
			}
		}
	}
	execute("warm-up", false) // connections made; their handshakes are not counted
	c.reset()
	execute("one", true)
	if n := c.n.Load(); n != 3 {
		t.Errorf("a new execution took %d round trips; want 3 (Reserve, dispatched with it, and 2 Updates)", n)
	}

	before := c.n.Load()
	if _, won, err := s.Reserve(ctx, newRecord("one"), record.ReserveOptions{}); err != nil || won {
		t.Fatalf("replay: won=%v err=%v", won, err)
	}
	if n := c.n.Load() - before; n != 1 {
		t.Errorf("a replay took %d round trips; want 1", n)
	}

	for i := range 3 {
		r := newRecord("renew" + strconv.Itoa(i))
		r.Owner, r.LeaseUntil = "proxy-1", time.Now().Add(time.Minute)
		if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	before = c.n.Load()
	if err := s.Renew(ctx, "proxy-1", time.Now().Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if n := c.n.Load() - before; n != 1 {
		t.Errorf("Renew of 3 records took %d round trips; want 1", n)
	}
}

func TestAttachCounts(t *testing.T) {
	recordtest.RunAttachCounts(t, func(t *testing.T) (record.Store, record.Store, func(string) int) {
		url := serverURL(t)
		prefix := newPrefix(t, url)
		s := open(t, url, prefix, nil)
		return s, open(t, url, prefix, nil), func(id string) int {
			_, rec, _ := redisstore.Keys(s, "attached", id)
			n, err := redisstore.Client(s).HGet(context.Background(), rec, "attached").Int()
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	})
}

// List keeps the newest records across scan batches.
func TestListNewestFirst(t *testing.T) {
	url := serverURL(t)
	s := open(t, url, newPrefix(t, url), nil)
	ctx := t.Context()
	var ids []string
	for i := range 250 {
		r := newRecord("list" + strconv.Itoa(i))
		if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	got, err := s.List(ctx, record.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 100 {
		t.Fatalf("List returned %d records; want the default limit, 100", len(got))
	}
	for i, r := range got {
		if want := ids[len(ids)-1-i]; r.ID != want {
			t.Fatalf("List[%d] = %s; want %s, newest first", i, r.ID, want)
		}
	}
}

func TestAllowances(t *testing.T) {
	url := serverURL(t)
	recordtest.RunAllowances(t, func(t *testing.T) (recordtest.AllowanceStore, recordtest.AllowanceStore) {
		prefix := newPrefix(t, url)
		return open(t, url, prefix, nil), open(t, url, prefix, nil)
	})
}
