package pgstore

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record/batch"
)

// The first statement of Reserve and of Update is sent in batches
// (package batch): the statements of every call waiting, up to maxBatch,
// go to the server in one round trip and run in one implicit
// transaction, with one commit and one WAL flush for all. Alone, each
// paid a commit of its own, and the server's and the client's work for
// it.
//
// A batch's transaction is all or nothing, and its callers are answered
// once it has committed. An error in one statement (a statement timeout,
// a lock wait ended by the server) rolls the others back; they are then
// run again alone, each in its own transaction as without batching:
// nothing of the batch was written. An error of the connection, after
// which the commit may or may not have happened, fails every call of the
// batch, as it would have failed a call alone.
//
// Reservations and updates go in batches of their own, each sorted by
// the row it writes, a reservation's key or an update's id, and Renew
// and the attach counts lock their rows in id order too. So two batches,
// of this process or of another, never wait for each other in a cycle:
// a batch of reservations may wait for a batch of updates, never the
// reverse, and batches of one kind take their locks in one order.
const (
	maxBatch = 64
	// senders is how many batches of each kind are sent at once, each on
	// a pooled connection of its own, by a sender or by a caller alone:
	// while one commits, the next is sent.
	senders = 2
	// minConns is the pool's size unless the URL sets pool_max_conns:
	// the senders' connections, and as many for the rest (waits, a
	// reservation's later passes, renewals, purges).
	minConns = 2 * 2 * senders
)

// A stmt is one caller's statement, which returns at most one row.
type stmt struct {
	sql   string
	args  []any
	order string              // the row it writes: a batch runs its statements in this order
	scan  func(pgx.Row) error // reads the row; run again if the statement is
	err   error               // scan's, or the batch's
}

// startBatches starts the queues of reservations and of updates.
func (s *Store) startBatches() {
	s.reserveQ = batch.Start(maxBatch, senders, s.sendBatch)
	s.updateQ = batch.Start(maxBatch, senders, s.sendBatch)
}

// stopBatches stops the queues once the batches being sent are answered.
func (s *Store) stopBatches() {
	s.reserveQ.Close()
	s.updateQ.Close()
}

// run runs st, batched by q with the statements of other callers, and
// returns scan's error or the batch's. A caller whose ctx ends while its
// statement waits in the queue gets ctx.Err(), and the statement is not
// sent.
func (s *Store) run(ctx context.Context, q *batch.Queue[*stmt], st *stmt) error {
	if err := q.Do(ctx, st); err != nil {
		if errors.Is(err, batch.ErrClosed) {
			return errors.New("the store is closed")
		}
		return err
	}
	return st.err
}

// sendBatch runs the statements of calls in one transaction, or each
// alone if that one rolled back, and answers each call.
func (s *Store) sendBatch(ctx context.Context, calls []*batch.Call[*stmt]) {
	conn, _, err := s.acquire(ctx)
	if err != nil {
		for _, c := range calls {
			c.Job.err = err
		}
		return
	}
	defer conn.Release()
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	if len(calls) == 1 {
		runAlone(ctx, conn, calls[0].Job)
		return
	}
	slices.SortFunc(calls, func(a, b *batch.Call[*stmt]) int { return strings.Compare(a.Job.order, b.Job.order) })
	var b pgx.Batch
	for _, c := range calls {
		b.Queue(c.Job.sql, c.Job.args...)
	}
	br := conn.SendBatch(ctx, &b)
	for _, c := range calls {
		c.Job.err = c.Job.scan(br.QueryRow())
	}
	err = br.Close()
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		// Committed: each call has its own row, or its own error
		// reading it.
	case errors.As(err, &pgErr) && ctx.Err() == nil:
		// The server refused a statement, and so rolled all back.
		s.log.Debug("a batch of statements rolled back; running each alone", "store", s.name, "statements", len(calls), "err", err)
		for _, c := range calls {
			runAlone(ctx, conn, c.Job)
		}
	default:
		for _, c := range calls {
			c.Job.err = err
		}
	}
}

// runAlone runs st in a transaction of its own.
func runAlone(ctx context.Context, conn db, st *stmt) {
	st.err = st.scan(conn.QueryRow(ctx, st.sql, st.args...))
}
