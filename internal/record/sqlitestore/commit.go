package sqlitestore

import (
	"context"
	"database/sql"
	"runtime"
	"sync/atomic"
)

// Reservations and transitions are committed in groups: a writer
// goroutine takes every write waiting in the queue, up to maxBatch, and
// runs them in one BEGIN IMMEDIATE transaction, one commit (and under
// sync=full one fsync) for all. It never waits for more to come, so a
// write alone is committed as soon as the writer is free. Each write runs
// inside a savepoint of its own: one that fails (ErrConflict, not found)
// is rolled back to it and reported to its caller alone, and the rest of
// the group commits. A caller is answered once the transaction holding
// its write has committed; if that fails, every write of the group gets
// the error.
const (
	maxBatch = 64
	// queueLen is how many writes may wait beyond the one group the
	// writer is running; callers past it wait to join the queue.
	queueLen = 2 * maxBatch
)

// A writeOp is one caller's write, queued for the writer.
type writeOp struct {
	ctx context.Context // the caller's: a write whose caller left before it ran is not run
	// run does the write in tx; it is run again if its group's
	// transaction is tried again (whileBusy), and sets the caller's
	// results, which the caller reads once done is closed.
	run   func(ctx context.Context, tx *sql.Tx) error
	state atomic.Int32 // opQueued, then opTaken by the writer or opLeft by the caller
	err   error        // written by the writer before it closes done
	done  chan struct{}
}

const (
	opQueued = iota
	opTaken
	opLeft
)

func (op *writeOp) finish(err error) {
	op.err = err
	close(op.done)
}

// write queues run for the writer and returns its error once the
// transaction that ran it has committed or failed. A caller whose ctx
// ends, or whose Store closes, while its write still waits in the queue
// gets ctx.Err() (errClosed) and its write is not run; once the writer
// has taken it, it is seen through.
func (s *Store) write(ctx context.Context, run func(ctx context.Context, tx *sql.Tx) error) error {
	return s.enqueue(ctx, s.queue, run)
}

// writeFirst is write for a write that goes in the writer's next group,
// ahead of every write queued: a lease renewal, which must not wait
// behind a storm of writes until the leases it renews have lapsed.
func (s *Store) writeFirst(ctx context.Context, run func(ctx context.Context, tx *sql.Tx) error) error {
	return s.enqueue(ctx, s.first, run)
}

func (s *Store) enqueue(ctx context.Context, q chan<- *writeOp, run func(ctx context.Context, tx *sql.Tx) error) error {
	op := &writeOp{ctx: ctx, run: run, done: make(chan struct{})}
	select {
	case q <- op:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.closed:
		return errClosed
	}
	select {
	case <-op.done:
		return op.err
	case <-ctx.Done():
	case <-s.closed:
	}
	if op.state.CompareAndSwap(opQueued, opLeft) {
		if err := ctx.Err(); err != nil {
			return err
		}
		return errClosed
	}
	<-op.done
	return op.err
}

// writer runs the queued writes in groups until the Store closes.
func (s *Store) writer() {
	defer close(s.writerDone)
	batch := make([]*writeOp, 0, maxBatch)
	for {
		batch = batch[:0]
		select {
		case op := <-s.first:
			batch = take(batch, op)
		case op := <-s.queue:
			batch = take(batch, op)
		case <-s.closed:
			// What is left in the queue is answered by its callers,
			// which also watch s.closed.
			return
		}
		// Callers answered by the last group, ready to queue their next
		// write, run first: a yield, not a wait, so a lone write goes at
		// once. Without it a group held at times only what came in while
		// the writer was busy: 3 writes, not 16, with 32 executions in
		// flight under sync=normal.
		runtime.Gosched()
	fill:
		for len(batch) < maxBatch {
			select {
			case op := <-s.first:
				batch = take(batch, op)
				continue
			default:
			}
			select {
			case op := <-s.queue:
				batch = take(batch, op)
			default:
				break fill
			}
		}
		s.commit(batch)
	}
}

// take adds op to batch unless its caller has left.
func take(batch []*writeOp, op *writeOp) []*writeOp {
	if !op.state.CompareAndSwap(opQueued, opTaken) {
		return batch // opLeft: its caller has returned
	}
	if err := op.ctx.Err(); err != nil {
		op.finish(err)
		return batch
	}
	return append(batch, op)
}

// commit runs batch in one transaction and answers each write.
func (s *Store) commit(batch []*writeOp) {
	if len(batch) == 0 {
		return
	}
	// The group's statements run to the end whatever its callers do;
	// the busy timeout bounds them.
	ctx := context.Background()
	err := s.whileBusy(ctx, func() error {
		// Between tries nothing of the group is written: a write whose
		// caller left meanwhile is dropped, as a lone one was before.
		live := batch[:0]
		for _, op := range batch {
			if err := op.ctx.Err(); err != nil {
				op.finish(err)
				continue
			}
			live = append(live, op)
		}
		batch = live
		if len(batch) == 0 {
			return nil
		}
		return s.runBatch(ctx, batch)
	})
	for _, op := range batch {
		if err != nil {
			op.err = err
		}
		close(op.done)
	}
}

// runBatch runs batch in one BEGIN IMMEDIATE transaction, setting the
// error of each write, and returns the transaction's.
func (s *Store) runBatch(ctx context.Context, batch []*writeOp) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if len(batch) == 1 {
		// Alone, a write needs no savepoint: if it fails, so does the
		// transaction, which it alone is in.
		op := batch[0]
		if op.err = op.run(ctx, tx); op.err != nil {
			if isBusy(op.err) {
				return op.err // tried again by whileBusy
			}
			return nil
		}
		return tx.Commit()
	}
	for _, op := range batch {
		if _, err := tx.ExecContext(ctx, "SAVEPOINT op"); err != nil {
			return err
		}
		if op.err = op.run(ctx, tx); op.err != nil {
			if isBusy(op.err) {
				return op.err
			}
			// An error that rolled back the whole transaction (SQLITE_FULL,
			// an I/O error) leaves no savepoint to return to, and fails
			// the group here.
			if _, err := tx.ExecContext(ctx, "ROLLBACK TO op"); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, "RELEASE op"); err != nil {
			return err
		}
	}
	return tx.Commit()
}
