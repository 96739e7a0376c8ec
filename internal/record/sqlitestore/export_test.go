package sqlitestore

import (
	"context"
	"strings"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// Synchronous returns the writer connection's PRAGMA synchronous: 1 is
// NORMAL, 2 is FULL.
func (s *Store) Synchronous(ctx context.Context) (int, error) {
	var n int
	err := s.w.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&n)
	return n, err
}

// JournalMode returns the database's journal mode.
func (s *Store) JournalMode(ctx context.Context) (string, error) {
	var mode string
	err := s.r.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode)
	return mode, err
}

// HoldWriter takes the writer's one connection until the returned func
// is called, as a long queue of writes would.
func (s *Store) HoldWriter(ctx context.Context) (release func(), err error) {
	c, err := s.w.Conn(ctx)
	if err != nil {
		return nil, err
	}
	return func() { c.Close() }, nil
}

// SetBusyTimeout sets the busy timeout of the Stores opened from now on,
// and returns a func that restores it.
func SetBusyTimeout(d time.Duration) (restore func()) {
	old := busyTimeout
	busyTimeout = d
	return func() { busyTimeout = old }
}

// RenewPlan returns SQLite's query plan for Renew's statement.
func (s *Store) RenewPlan(ctx context.Context) (string, error) {
	return s.plan(ctx, renewText, 0, "proxy-1")
}

// ListPlan returns SQLite's query plan for List's query of f.
func (s *Store) ListPlan(ctx context.Context, f record.Filter) (string, error) {
	q, args := listQuery(f)
	return s.plan(ctx, q, args...)
}

func (s *Store) plan(ctx context.Context, q string, args ...any) (string, error) {
	rows, err := s.r.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q, args...)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			return "", err
		}
		plan = append(plan, detail)
	}
	return strings.Join(plan, "; "), rows.Err()
}

// FlushAttaches writes the attaches counted and not yet written
// (recordtest.Flusher).
func (s *Store) FlushAttaches(ctx context.Context) error { return s.attaches.Flush(ctx) }
