package pgstore

import (
	"context"
	"sync"
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

// attachCounts are the attaches counted and not yet written, by
// execution id.
type attachCounts struct {
	mu      sync.Mutex
	pending map[string]int
	started bool // the flusher runs
}

// of returns the attaches of id not yet written.
func (a *attachCounts) of(id string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pending[id]
}

// snapshot returns the counts to write.
func (a *attachCounts) snapshot() (ids []string, ns []int32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, n := range a.pending {
		ids, ns = append(ids, id), append(ns, int32(n))
	}
	return ids, ns
}

// written takes the counts a snapshot gave, now in the database, off
// the pending ones; attaches counted meanwhile stay.
func (a *attachCounts) written(ids []string, ns []int32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, id := range ids {
		if a.pending[id] -= int(ns[i]); a.pending[id] <= 0 {
			delete(a.pending, id)
		}
	}
}

// countAttach counts a caller attached to rec, which Reserve read, and
// returns rec with its count as it now is.
func (s *Store) countAttach(rec *record.Record) *record.Record {
	a := &s.attaches
	a.mu.Lock()
	if a.pending == nil {
		a.pending = make(map[string]int)
	}
	a.pending[rec.ID]++
	rec.Attached += a.pending[rec.ID]
	start := !a.started
	a.started = true
	a.mu.Unlock()
	if start {
		s.mu.Lock()
		if !s.closed {
			s.wg.Go(s.flushLoop)
		}
		s.mu.Unlock()
	}
	return rec
}

// withAttaches returns rec, just read, with the attaches of it counted
// here and not yet written.
func (s *Store) withAttaches(rec *record.Record) *record.Record {
	if rec != nil {
		rec.Attached += s.attaches.of(rec.ID)
	}
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
	ids, ns := s.attaches.snapshot()
	if len(ids) == 0 {
		return nil
	}
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	if _, err := s.pool.Exec(ctx, s.q.flushAttaches, ids, ns); err != nil {
		return err
	}
	s.attaches.written(ids, ns)
	return nil
}
