package cli

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/sqlitestore"
)

// TestShowFindsTheExecutionThatExpiredBefore: an execution of the same
// fingerprint that replayed until its retention ran out, just before
// this one was accepted, is what an investigation of a second charge
// looks for. It was accepted more than a retention earlier: its
// retention counts from when it settled.
func TestShowFindsTheExecutionThatExpiredBefore(t *testing.T) {
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	s, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "records.db"),
		sqlitestore.Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fp := strings.Repeat("f1", 32)
	reserve := func() *record.Record {
		r := &record.Record{ID: record.NewID(now), Key: "k", Fingerprint: fp, Actor: "alice",
			Scope: "actor", Tool: "charge_card", Retention: time.Hour}
		got, won, err := s.Reserve(t.Context(), r, record.ReserveOptions{Dispatch: true})
		if err != nil || !won {
			t.Fatalf("Reserve = %v, won %v; want it won", err, won)
		}
		return got
	}
	earlier := reserve()
	now = now.Add(10 * time.Minute) // a long call
	if _, err := s.Update(t.Context(), earlier.ID, record.Change{To: record.Completed, Result: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Hour + time.Second) // its retention ran out
	later := reserve()
	p, err := laterOf(t.Context(), s, later)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Related) != 1 || p.Related[0].ID != earlier.ID {
		t.Fatalf("related executions %+v, searched %s; want %s, which replayed until a second before", p.Related, p.Searched, earlier.ID)
	}
}
