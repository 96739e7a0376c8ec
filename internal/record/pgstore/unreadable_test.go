package pgstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// TestUnreadableRecordNamed: a record whose row another program set to
// what the store cannot read is refused by a Reserve of its key with an
// error that names the record and the column: not taken for no record,
// which would run its call again.
func TestUnreadableRecordNamed(t *testing.T) {
	for _, tt := range []struct{ name, edit, column string }{
		{"attempts NULL", `ALTER TABLE %s.records ALTER COLUMN attempts DROP NOT NULL; UPDATE %[1]s.records SET attempts = NULL`, "attempts"},
		{"history an object", `UPDATE %s.records SET history = '{"a": 1}'`, "history"},
		{"history of numbers", `UPDATE %s.records SET history = '[1, 2]'`, "history"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			u, schema := serverURL(t), newSchema(t)
			s := open(t, u, schema, nil)
			r := newRecord("k", time.Now())
			if _, won, err := s.Reserve(ctx, r, record.ReserveOptions{Dispatch: true}); err != nil || !won {
				t.Fatalf("Reserve = won %v, %v", won, err)
			}
			if _, err := s.Update(ctx, r.ID, record.Change{To: record.Completed, Result: json.RawMessage(`{"content":[]}`)}); err != nil {
				t.Fatal(err)
			}
			conn, err := connect(ctx, u)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			if _, err := conn.Exec(ctx, fmt.Sprintf(tt.edit, pgx.Identifier{schema}.Sanitize())); err != nil {
				t.Fatal(err)
			}

			other := open(t, u, schema, nil) // no record of its own in memory
			if got, won, err := other.Reserve(ctx, newRecord("k", time.Now()), record.ReserveOptions{}); err == nil || won || !strings.Contains(err.Error(), r.ID) || !strings.Contains(err.Error(), tt.column) || !errors.Is(err, record.ErrUnreadable) {
				t.Errorf("Reserve = %v won=%v %v; want an error naming %s and %s", got, won, err, r.ID, tt.column)
			}
		})
	}
}
