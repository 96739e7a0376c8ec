package sqlitestore_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/sqlitestore"
)

// The tests below run in a synctest bubble, whose clock moves only when
// every goroutine in it waits: SQLite's busy handler (the driver's, under
// a context that can end) and the store's timers wait on it, so the
// waits they measure are exact. A time.Sleep there is the scenario's
// pace, not a wait for another goroutine.

// maxLockWait is how long a write waits at most for a lock no one commits
// under: twice the busy timeout of 5 s (docs/stores.md).
const maxLockWait = 10 * time.Second

// A lockHolder holds the write lock of a database file from a connection
// of its own, as another process would.
type lockHolder struct {
	t    *testing.T
	conn *sql.Conn
}

// holdLock takes the write lock of the file at path, with a change to
// commit, until the test ends.
func holdLock(t *testing.T, path string) *lockHolder {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() }) // rolls back what is not committed
	h := &lockHolder{t, conn}
	h.take()
	return h
}

func (h *lockHolder) exec(q string) {
	h.t.Helper()
	if _, err := h.conn.ExecContext(h.t.Context(), q); err != nil {
		h.t.Fatalf("%s: %v", q, err)
	}
}

// take takes the lock and makes a change under it.
func (h *lockHolder) take() {
	h.exec("BEGIN IMMEDIATE")
	h.exec("INSERT INTO secrets (name, value) VALUES ('held', x'00') ON CONFLICT (name) DO UPDATE SET value = value || x'00'")
}

func (h *lockHolder) commit() { h.exec("COMMIT") }

// reserveNew reserves a new key in a goroutine: its error comes on the
// channel returned.
func reserveNew(ctx context.Context, s *sqlitestore.Store, key string) <-chan error {
	errc := make(chan error, 1)
	go func() {
		_, _, err := s.Reserve(ctx, newRecord(key), record.ReserveOptions{})
		errc <- err
	}()
	return errc
}

// wantGaveUp fails the test unless err is the error of a write that gave
// up on a lock held without commits, and waited is maxLockWait.
func wantGaveUp(t *testing.T, err error, waited time.Duration) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), "SQLITE_BUSY") || !strings.Contains(err.Error(), "another process holds without committing") {
		t.Fatalf("a write facing a lock held without commits returned %v; want it to say so, with SQLITE_BUSY", err)
	}
	if waited != maxLockWait {
		t.Fatalf("the write gave up after %v; want %v", waited, maxLockWait)
	}
}

// TestStuckLockWhileOtherWritesWait: a write facing a lock another process holds
// without committing gives up maxLockWait after it began, whatever the
// process's other writes, which wait for the same lock, do meanwhile: a
// replay's attach count written a second later on the writer connection,
// or a renewal of its leases taking the process's turn at the lock.
func TestStuckLockWhileOtherWritesWait(t *testing.T) {
	for _, tt := range []struct {
		name  string
		other func(ctx context.Context, t *testing.T, s *sqlitestore.Store, done *record.Record)
	}{
		{"nothing", func(context.Context, *testing.T, *sqlitestore.Store, *record.Record) {}},
		{"replay", func(ctx context.Context, t *testing.T, s *sqlitestore.Store, done *record.Record) {
			got, won, err := s.Reserve(ctx, newRecord(done.Key), record.ReserveOptions{})
			if err != nil || won || got.ID != done.ID {
				t.Fatalf("the replay reserved %v, won %v, %v; want %s", got, won, err, done.ID)
			}
		}},
		{"renewal", func(ctx context.Context, t *testing.T, s *sqlitestore.Store, _ *record.Record) {
			go s.Renew(ctx, "proxy-1", time.Now().Add(time.Minute)) // fails too
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, path := t.Context(), dbPath(t)
				s := open(t, path, sqlitestore.Options{})
				done := newRecord("done")
				if _, _, err := s.Reserve(ctx, done, record.ReserveOptions{}); err != nil {
					t.Fatal(err)
				}
				for _, to := range []record.State{record.Dispatched, record.Completed} {
					if _, err := s.Update(ctx, done.ID, record.Change{To: to, Result: []byte(`{}`)}); err != nil {
						t.Fatal(err)
					}
				}
				holdLock(t, path)
				start := time.Now()
				errc := reserveNew(ctx, s, "new")
				time.Sleep(500 * time.Millisecond)
				tt.other(ctx, t, s, done)
				err := <-errc
				wantGaveUp(t, err, time.Since(start))
			})
		})
	}
}

// TestStuckLockQueued: a write that queues behind another waiting for a
// lock no one commits under gives up maxLockWait after it queued, not
// after the one before it gave up.
func TestStuckLockQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, path := t.Context(), dbPath(t)
		s := open(t, path, sqlitestore.Options{})
		holdLock(t, path)
		first := reserveNew(ctx, s, "first")
		time.Sleep(time.Second)
		start := time.Now()
		err := <-reserveNew(ctx, s, "queued")
		wantGaveUp(t, err, time.Since(start))
		if err := <-first; err == nil {
			t.Fatal("the first write succeeded under a stuck lock")
		}
	})
}

// TestLockUnderLoadWaits: a lock that another process commits under,
// again and again, is busy, not stuck: a write waits its turn past
// maxLockWait, and gets it. The process's other writes hold the writer
// meanwhile: the write cannot take the lock between a commit and the
// next, and must count the commits it saw.
func TestLockUnderLoadWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, path := t.Context(), dbPath(t)
		s := open(t, path, sqlitestore.Options{})
		h := holdLock(t, path)
		release, err := s.HoldWriter(ctx)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		errc := reserveNew(ctx, s, "k")
		for range 20 {
			time.Sleep(700 * time.Millisecond)
			h.commit()
			h.take()
		}
		time.Sleep(300 * time.Millisecond)
		h.commit()
		release()
		if err := <-errc; err != nil {
			t.Fatalf("the write under load returned %v; want it to wait its turn", err)
		}
		if waited, want := time.Since(start), 14300*time.Millisecond; waited != want {
			t.Fatalf("the write succeeded after %v; want it once let go, after %v", waited, want)
		}
	})
}
