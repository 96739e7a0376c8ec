package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

var _ record.Lister = (*Store)(nil)

// List implements record.Lister: newest first, walking the primary key
// backwards (ids are ULIDs, which sort by the time they were made).
func (s *Store) List(ctx context.Context, f record.Filter) ([]*record.Record, error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	const op = "listing executions"
	if err := s.ensure(ctx); err != nil {
		return nil, s.fail(op, err)
	}
	q, args := s.listQuery(f)
	reading, err := s.attaches.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, s.fail(op, err)
	}
	recs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*record.Record, error) {
		return scanRecord(row)
	})
	if err != nil {
		return nil, s.fail(op, err)
	}
	if recs, err = reading.ShowAll(ctx, recs, s.storedAttached); err != nil {
		return nil, s.fail(op, err)
	}
	return recs, nil
}

// listQuery is List's query for f, and its arguments.
func (s *Store) listQuery(f record.Filter) (string, []any) {
	q := s.sql(`SELECT ` + columns + ` FROM {schema}.records WHERE true`)
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if f.Tool != "" {
		q += " AND tool = " + arg(f.Tool)
	}
	if f.Fingerprint != "" {
		q += " AND fingerprint = " + arg(f.Fingerprint)
	}
	if f.State != "" {
		q += " AND state = " + arg(string(f.State))
	}
	if f.Awaiting {
		// awaiting <> '' is records_awaiting's predicate.
		q += " AND awaiting <> '' AND state = 'accepted'"
	}
	if !f.Since.IsZero() {
		q += " AND id >= " + arg(record.IDFloor(f.Since))
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	q += " ORDER BY id DESC LIMIT " + arg(limit)
	return q, args
}
