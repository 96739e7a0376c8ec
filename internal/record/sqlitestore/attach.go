package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// A replay or an attach is answered from a read on the read pool, with
// no write transaction: it takes no write lock and syncs nothing. Its
// attach is counted here and written with others every attachFlush, and
// at Close, in one transaction. A record this Store returns shows its
// own pending counts; another process sees them up to attachFlush later.
const attachFlush = time.Second

// matchRead answers r's reservation from a read when the key's holder
// can be matched as it is (not an orphan, not replaceable): the holder,
// counted as attached to if it is of r's action. ok is false when the
// reservation needs the write transaction, or the read failed (the
// transaction then meets the failure itself).
func (s *Store) matchRead(ctx context.Context, r *record.Record, opts record.ReserveOptions) (rec *record.Record, ok bool) {
	reading, err := s.attaches.Begin(ctx)
	if err != nil {
		return nil, false
	}
	cur, err := scanRecord(s.st.holder.QueryRowContext(ctx, r.Key))
	if err != nil {
		return nil, false
	}
	now := s.clock()
	if cur.Orphaned(now) || replaceable(cur, r, now, opts) {
		return nil, false
	}
	rec, err = reading.Match(ctx, cur, r.Fingerprint, s.storedAttached)
	return rec, err == nil
}

// Replay implements record.Replayer with matchRead's read, for a holder
// that is delivered. In WAL mode a read takes no lock a writer holds; it
// runs on a connection of its own (Store.p), taken without waiting, that
// fails at once where SQLite would wait for a lock (a recovery). What is
// left is the read itself: pages from the disk, and SQLite's own brief
// retries of a WAL header a writer is changing.
func (s *Store) Replay(ctx context.Context, r *record.Record, opts record.ReserveOptions) (rec *record.Record, unheld, ok bool) {
	if s.lost.Load() != nil {
		return nil, false, false // Reserve says why
	}
	select {
	case s.replays <- struct{}{}:
		defer func() { <-s.replays }()
	default:
		return nil, false, false
	}
	reading, ok := s.attaches.TryBegin()
	if !ok {
		return nil, false, false
	}
	cur, err := scanRecord(s.st.replayHolder.QueryRowContext(ctx, r.Key))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, true, false
	case err != nil:
		return nil, false, false // Reserve meets it, or reads again
	}
	now := s.clock()
	if cur.State != record.Delivered || cur.Fingerprint != r.Fingerprint ||
		cur.Orphaned(now) || replaceable(cur, r, now, opts) || !reading.TryMatch(cur, r.Fingerprint) {
		return nil, false, false
	}
	return cur, false, true
}

// storedAttached reads the attached count of the record id as stored
// (a record.StoredCount).
func (s *Store) storedAttached(ctx context.Context, id string) (n int, err error) {
	err = s.st.attachedOf.QueryRowContext(ctx, id).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		err = record.ErrNotFound
	}
	return n, err
}

// writeAttaches writes counted attaches in one transaction (see
// record.AttachCounts.Start).
func (s *Store) writeAttaches(ctx context.Context, ids []string, ns []int32) error {
	err := s.whileBusy(ctx, func() error {
		tx, err := s.w.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		add := tx.StmtContext(ctx, s.st.addAttached)
		for i, id := range ids {
			if _, err := add.ExecContext(ctx, ns[i], id); err != nil {
				return err
			}
		}
		return tx.Commit()
	})
	if err != nil {
		return err
	}
	s.attaches.Written(ids, ns)
	return nil
}
