package sqlitestore_test

import (
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/sqlitestore"
)

// TestUnreadableRecordNamed: a record whose column another program set to
// what the store cannot read is refused, by Get and by a Reserve of its
// key, with an error that names the record and the column: not taken for
// no record, which would run its call again.
func TestUnreadableRecordNamed(t *testing.T) {
	for _, set := range []string{"attempts = 'abc'", "retention = 'x'", "expires_at = 'soon'", "lease_until = 'later'"} {
		t.Run(set, func(t *testing.T) {
			ctx := t.Context()
			path := dbPath(t)
			s, err := sqlitestore.Open(ctx, path, sqlitestore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			r := newRecord("k")
			if _, won, err := s.Reserve(ctx, r, record.ReserveOptions{Dispatch: true}); err != nil || !won {
				t.Fatalf("Reserve = won %v, %v", won, err)
			}
			if _, err := s.Update(ctx, r.ID, record.Change{To: record.Completed, Result: json.RawMessage(`{"content":[]}`)}); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			db, err := sql.Open("sqlite", path)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec("UPDATE records SET " + set); err != nil {
				t.Fatal(err)
			}
			db.Close()

			s = open(t, path, sqlitestore.Options{})
			column := strings.Fields(set)[0]
			if _, err := s.Get(ctx, r.ID); err == nil || !strings.Contains(err.Error(), r.ID) || !strings.Contains(err.Error(), column) {
				t.Errorf("Get = %v; want an error naming %s and %s", err, r.ID, column)
			}
			if got, won, err := s.Reserve(ctx, newRecord("k"), record.ReserveOptions{}); err == nil || won || !strings.Contains(err.Error(), r.ID) || !strings.Contains(err.Error(), column) || !errors.Is(err, record.ErrUnreadable) {
				t.Errorf("Reserve = %v won=%v %v; want an error naming %s and %s", got, won, err, r.ID, column)
			}
		})
	}
}
