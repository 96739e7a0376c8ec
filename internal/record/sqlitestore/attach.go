package sqlitestore

import (
	"context"
	"fmt"
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
	cur, err := scanRecord(s.st.holder.QueryRowContext(ctx, r.Key))
	if err != nil {
		return nil, false
	}
	now := s.clock()
	if cur.Orphaned(now) || replaceable(cur, r, now, opts) {
		return nil, false
	}
	if cur.Fingerprint != r.Fingerprint {
		// A client key reused for another action: refused, not attached.
		return s.attaches.Show(cur), true
	}
	cur.Attached += s.attaches.Add(cur.ID)
	s.startFlushing()
	return cur, true
}

// startFlushing starts the writer of the attach counts, once.
func (s *Store) startFlushing() {
	s.flushOnce.Do(func() {
		s.flushed = make(chan struct{})
		go s.flushLoop()
	})
}

// flushLoop writes the counted attaches every attachFlush until Close.
func (s *Store) flushLoop() {
	defer close(s.flushed)
	t := time.NewTicker(attachFlush)
	defer t.Stop()
	for {
		select {
		case <-s.closed:
			return
		case <-t.C:
			// A failure keeps the counts for the next try, and Close
			// reports the last one.
			_ = s.flushAttaches(context.Background())
		}
	}
}

// flushAttaches writes the counted attaches in one transaction.
func (s *Store) flushAttaches(ctx context.Context) error {
	ids, ns := s.attaches.Snapshot()
	if len(ids) == 0 {
		return nil
	}
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

// stopFlushing stops the writer of the attach counts, if it runs (and
// keeps it from starting), and writes what is left; Close calls it
// before the connections close.
func (s *Store) stopFlushing() error {
	s.flushOnce.Do(func() {})
	if s.flushed == nil {
		return nil
	}
	<-s.flushed
	if err := s.flushAttaches(context.Background()); err != nil {
		return fmt.Errorf("writing the counts of attached callers: %w", err)
	}
	return nil
}
