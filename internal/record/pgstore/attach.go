package pgstore

import (
	"context"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// Attaches are counted here, not by Reserve's statement: a replay or an
// attach then only reads, and commits no write (no WAL flush), and the
// counts go to the database in one statement every attachFlush. A
// record this Store returns shows its own pending counts; another
// process sees them up to attachFlush later.
const attachFlush = time.Second

// flushAttachesSQL adds counted attaches to their records.
const flushAttachesSQL = `UPDATE {schema}.records AS r SET attached = r.attached + v.n
	FROM unnest($1::text[], $2::integer[]) AS v(id, n) WHERE r.id = v.id`

// countAttach counts a caller attached to rec, which Reserve read, and
// returns rec with its count as it now is.
func (s *Store) countAttach(rec *record.Record) *record.Record {
	rec.Attached += s.attaches.Add(rec.ID)
	s.mu.Lock()
	if !s.flushing && !s.closed {
		s.flushing = true
		s.wg.Go(s.flushLoop)
	}
	s.mu.Unlock()
	return rec
}

// flushLoop writes the counted attaches every attachFlush until Close,
// which writes what is left.
func (s *Store) flushLoop() {
	t := time.NewTicker(attachFlush)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			if err := s.flushAttaches(s.ctx); err != nil && s.ctx.Err() == nil {
				s.log.Warn("writing the counts of attached callers; kept for the next try", "store", s.name, "err", err)
			}
		}
	}
}

// flushAttaches writes the counted attaches in one statement.
func (s *Store) flushAttaches(ctx context.Context) error {
	ids, ns := s.attaches.Snapshot()
	if len(ids) == 0 {
		return nil
	}
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	if _, err := s.pool.Exec(ctx, s.q.flushAttaches, ids, ns); err != nil {
		return err
	}
	s.attaches.Written(ids, ns)
	return nil
}
