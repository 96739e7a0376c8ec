package sqlitestore_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/sqlitestore"
)

// rawDB opens the store's file past the store, closed when the test ends.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestReplaysWriteNothing: a replay only reads, so it takes no write lock
// and syncs nothing. PRAGMA data_version, read on one connection, moves
// when any other connection commits; five replays do not move it.
func TestReplaysWriteNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.db")
	s := open(t, path, sqlitestore.Options{})
	ctx := t.Context()
	if _, err := recordtest.Execute(ctx, s, "k"); err != nil {
		t.Fatal(err)
	}
	conn, err := rawDB(t, path).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	version := func() (v int64) {
		t.Helper()
		if err := conn.QueryRowContext(ctx, "PRAGMA data_version").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := version()
	for range 5 {
		r := newRecord("k")
		r.Fingerprint = "k"
		if _, won, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil || won {
			t.Fatalf("replay: won=%v err=%v", won, err)
		}
	}
	if after := version(); after != before {
		t.Errorf("five replays committed (data_version %d, then %d); want them only read", before, after)
	}
}

func TestAttachCounts(t *testing.T) {
	recordtest.RunAttachCounts(t, func(t *testing.T) (record.Store, record.Store, func(string) int) {
		path := filepath.Join(t.TempDir(), "r.db")
		db := rawDB(t, path)
		return open(t, path, sqlitestore.Options{}), open(t, path, sqlitestore.Options{}), func(id string) (n int) {
			if err := db.QueryRowContext(context.Background(), "SELECT attached FROM records WHERE id = ?", id).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
	})
}
