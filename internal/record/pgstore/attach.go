package pgstore

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// Attaches are counted here, not by Reserve's statement: a replay or an
// attach then only reads, and commits no write (no WAL flush), and the
// counts go to the database in one statement every attachFlush, and at
// Close. A record this Store returns shows its own pending counts;
// another process sees them up to attachFlush later.
const attachFlush = time.Second

// flushAttachesSQL adds counted attaches to their records. It locks them
// in id order, as batches of updates do (batch.go), so that it and a
// batch never wait for each other in a cycle.
const flushAttachesSQL = `UPDATE {schema}.records AS r SET attached = r.attached + v.n
	FROM unnest($1::text[], $2::integer[]) AS v(id, n) WHERE r.id = v.id AND r.id IN (
		SELECT id FROM {schema}.records WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE)`

// attachedOfSQL reads a record's attached count, for a Reading that a
// write of the counts overlapped (record.AttachCounts).
const attachedOfSQL = `SELECT attached FROM {schema}.records WHERE id = $1`

// storedAttached reads the attached count of the record id as stored
// (a record.StoredCount).
func (s *Store) storedAttached(ctx context.Context, id string) (n int, err error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	err = s.pool.QueryRow(ctx, s.q.attachedOf, id).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		err = record.ErrNotFound
	}
	return n, err
}

// writeAttaches writes counted attaches in one statement (see
// record.AttachCounts.Start).
func (s *Store) writeAttaches(ctx context.Context, ids []string, ns []int32) error {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	if _, err := s.pool.Exec(ctx, s.q.flushAttaches, ids, ns); err != nil {
		return err
	}
	s.attaches.Written(ids, ns)
	return nil
}
