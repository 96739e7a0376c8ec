package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"modernc.org/sqlite"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record/batch"
)

// The writes of Reserve and Update that wait for the writer connection go
// together, in one transaction: one commit for all, which writes each
// page they change to the WAL once (and with sync=full, syncs once). A
// write that fails fails alone; a commit that fails fails them all, as
// it would have one alone. A write that finds none waiting goes at once,
// in a transaction of its own (batch.Queue).
//
// A write that makes more than one change opens a savepoint before its
// first (wtx.save), which undoes them all if it fails. A write that
// makes one, in one statement, opens none: SQLite undoes a statement
// that fails by itself, and the two statements that open and release a
// savepoint, with the copies of the pages it guards, cost more than the
// change did. A reservation opens one only when it does more than
// insert its record: a purge, or a key that has a holder already.
//
// A batch takes the process's turn at the write lock (Store.turn), and
// so does Renew: a sender with writes always waiting would otherwise
// take the lock again the moment it commits, while the renewal, on a
// connection of its own, sleeps in SQLite's busy handler, and the
// process's leases would lapse under load.

// A turn is a lock handed over in the order it was asked for. A
// sync.Mutex lets the goroutine that unlocks it take it again at once,
// ahead of one that has waited, until that one has lost it once: a
// sender with writes waiting would run a batch more before a renewal.
// A channel's senders wait in line, and a receive hands the full buffer
// to the first of them.
type turn chan struct{}

func (t turn) take() { t <- struct{}{} }
func (t turn) give() { <-t }

// takeCtx is take, or ctx's error if ctx ends first. A select waits in
// the same line as a plain send.
func (t turn) takeCtx(ctx context.Context) error {
	select {
	case t <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A wtx is a transaction of the writer, with the Store's statements bound
// to it once each: Tx.StmtContext makes a statement at each call, and
// the transaction's end closes each, 6% of the writer's time at 32 new
// executions at a time.
type wtx struct {
	*sql.Tx
	st    *statements
	bound []boundStmt
	// saving says that the write running goes beside others, so that a
	// savepoint is to undo its changes if it fails; saved, that it
	// opened one (save).
	saving, saved bool
}

// A boundStmt is a statement of the Store's and its binding to a wtx.
type boundStmt struct{ of, to *sql.Stmt }

// begin begins a transaction of the writer.
func (s *Store) begin(ctx context.Context) (*wtx, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	return &wtx{Tx: tx, st: &s.st}, nil
}

// stmt returns st bound to tx. A batch uses a handful of statements:
// looking them up in turn costs less than a map.
func (tx *wtx) stmt(ctx context.Context, st *sql.Stmt) *sql.Stmt {
	for _, b := range tx.bound {
		if b.of == st {
			return b.to
		}
	}
	to := tx.StmtContext(ctx, st)
	tx.bound = append(tx.bound, boundStmt{st, to})
	return to
}

// save opens a savepoint for the write running, if it goes beside other
// writes and has none yet. A write calls it before a change that may not
// be its only one, so that if it fails, its changes are undone and the
// other writes' are not.
func (tx *wtx) save(ctx context.Context) error {
	if !tx.saving || tx.saved {
		return nil
	}
	if _, err := tx.stmt(ctx, tx.st.savepoint).ExecContext(ctx); err != nil {
		return err
	}
	tx.saved = true
	return nil
}

// maxWrites bounds the writes of one transaction: the write lock is held
// while it runs, and other processes wait for it.
const maxWrites = 64

// A write is one call's work in a batch's transaction.
type write struct {
	// run does the work in tx, at now (the batch's, taken with the write
	// lock held). Before a change that may not be its only one, it opens
	// a savepoint (wtx.save); a change made with none is made by one
	// statement, and an error after it is an errChanged.
	run func(ctx context.Context, tx *wtx, now time.Time) error
	err error // run's, or the batch's
}

// errStoreClosed is the error of a write made after Close.
var errStoreClosed = fmt.Errorf("the store is closed: %w", batch.ErrClosed)

// write runs run (write.run) in a transaction, batched with other
// callers' writes, and returns its error or the batch's; its effects are
// committed once it returns nil. A caller whose ctx ends while its write
// waits in the queue gets ctx.Err(), and the write is not run.
func (s *Store) write(ctx context.Context, run func(ctx context.Context, tx *wtx, now time.Time) error) error {
	w := &write{run: run}
	if err := s.writes.Do(ctx, w); err != nil {
		if errors.Is(err, batch.ErrClosed) {
			return errStoreClosed
		}
		return err
	}
	return w.err
}

// sendWrites runs the writes of calls in one transaction and answers each
// call. A transaction that cannot begin for want of the write lock is
// tried again as whileBusy says.
func (s *Store) sendWrites(ctx context.Context, calls []*batch.Call[*write]) {
	if err := s.whileBusy(ctx, func() error { return s.writeBatch(ctx, calls) }); err != nil {
		for _, c := range calls {
			c.Job.err = err
		}
	}
}

// writeBatch runs the writes of calls in one transaction and commits
// what succeeded. It returns the error that ended the batch, which every
// write is then told; each write's own is in its Job.
func (s *Store) writeBatch(ctx context.Context, calls []*batch.Call[*write]) error {
	s.turn.take()
	defer s.turn.give()
	tx, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	// The statements run without ctx's end: under a context that can
	// end, the driver starts a goroutine for each statement to watch it,
	// which cost 7% of the time of new executions 32 at a time. They
	// wait for nothing but the disk, and ctx still ends the transaction:
	// database/sql rolls it back.
	ctx = context.WithoutCancel(ctx)
	now := s.clock()
	if len(calls) == 1 {
		w := calls[0].Job
		if w.err = w.run(ctx, tx, now); w.err != nil {
			return nil // rolled back, as the write alone would be
		}
		return tx.Commit()
	}
	for _, c := range calls {
		if err := runBeside(ctx, tx, now, c.Job); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// runBeside runs w in tx, beside other writes. A savepoint w opened is
// rolled back if w failed, and released. It returns an error that ends
// the batch:
//   - an error from ROLLBACK TO or RELEASE of its savepoint;
//   - after an error that came once a change made with no savepoint was
//     made (errChanged: the count of rows an update of a known record
//     changed, unread), since only ending the batch undoes the change;
//   - after an error from SQLite, which undid its statement (the schema
//     has no trigger and no OR FAIL, whose statements keep what they
//     changed), if the transaction is no longer open. After some
//     failures (a full disk, an I/O error) SQLite rolls it back whole,
//     and the statements after would each commit alone while the batch
//     reported them failed.
//
// Any other error came before the change (a conflict, a record that
// cannot be read), and the batch goes on.
func runBeside(ctx context.Context, tx *wtx, now time.Time, w *write) error {
	tx.saving = true
	w.err = w.run(ctx, tx, now)
	saved := tx.saved
	tx.saving, tx.saved = false, false
	switch {
	case saved:
		if w.err != nil {
			if _, err := tx.stmt(ctx, tx.st.rollbackTo).ExecContext(ctx); err != nil {
				return err
			}
		}
		_, err := tx.stmt(ctx, tx.st.releaseSavepoint).ExecContext(ctx)
		return err
	case w.err == nil:
		return nil
	case errors.As(w.err, new(errChanged)):
		return w.err
	case isSQLite(w.err):
		return stillOpen(ctx, tx.Tx, w.err)
	default:
		return nil
	}
}

// errChanged is the error of a write that failed after its statement
// made its change.
type errChanged struct{ err error }

func (e errChanged) Error() string { return e.err.Error() }
func (e errChanged) Unwrap() error { return e.err }

// stillOpen returns nil if tx's transaction is open after the error
// err, else err. A BEGIN fails within a transaction, with SQLite's
// "cannot start a transaction within a transaction"; after SQLite rolled
// the transaction back it begins another, which the batch's end rolls
// back. (A savepoint around the batch would tell too, but while one is
// open SQLite journals every page the batch changes: a new execution
// took half as long again.)
func stillOpen(ctx context.Context, tx *sql.Tx, err error) error {
	if _, berr := tx.ExecContext(ctx, "BEGIN"); berr != nil && strings.Contains(berr.Error(), "within a transaction") {
		return nil
	}
	return err
}

// isSQLite reports whether err is SQLite's.
func isSQLite(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se)
}
