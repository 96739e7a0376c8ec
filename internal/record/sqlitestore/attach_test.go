package sqlitestore_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/sqlitestore"
)

// TestReplaysWriteNothing: a replay only reads, so it takes no write lock
// and syncs nothing; the attaches it counts reach the record all the
// same, for this process at once and for others once written (at Close
// at the latest).
func TestReplaysWriteNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.db")
	s := open(t, path, sqlitestore.Options{})
	ctx := t.Context()
	r, _, err := s.Reserve(ctx, newRecord("k"), record.ReserveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []record.Change{{To: record.Dispatched}, {To: record.Completed, Result: json.RawMessage(`{"content":[]}`)}} {
		if _, err := s.Update(ctx, r.ID, c); err != nil {
			t.Fatal(err)
		}
	}
	// PRAGMA data_version, read on one connection, moves when any other
	// connection commits.
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
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
	for i := range 5 {
		got, won, err := s.Reserve(ctx, newRecord("k"), record.ReserveOptions{})
		if err != nil || won || got.Attached != i+1 {
			t.Fatalf("replay %d: won=%v %v, %v; want the record, attached %d", i+1, won, got, err, i+1)
		}
	}
	if after := version(); after != before {
		t.Errorf("five replays committed (data_version %d, then %d); want them only read", before, after)
	}
	if got, err := s.Get(ctx, r.ID); err != nil || got.Attached != 5 {
		t.Errorf("Get after five replays: %v, %v; want attached 5", got, err)
	}
	other := open(t, path, sqlitestore.Options{})
	attached := func() int {
		t.Helper()
		got, err := other.Get(context.Background(), r.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.Attached
	}
	for deadline := time.Now().Add(10 * time.Second); attached() != 5; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("another process sees %d attached callers after 10s; want the 5 counted, written meanwhile", attached())
		}
	}
	if _, _, err := s.Reserve(ctx, newRecord("k"), record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := attached(); n != 6 {
		t.Errorf("another process sees %d attached callers after Close; want 6, the last written at Close", n)
	}
}
