package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
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
// once it has committed. A statement the server refuses rolls the others
// back, and nothing of the batch is written: it is answered with its
// error, as it would have been alone, and the others are sent again as a
// batch. A statement that waits for a row lock longer than
// batchLockTimeout (another transaction holds it), or is chosen to end a
// deadlock, is taken out of the batch in the same way, and runs alone
// once the rest is written, waiting its turn there as it would have
// without batching. An error of the connection, after which the commit
// may or may not have happened, fails every call of the batch, as it
// would have failed a call alone.
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
	// a pooled connection of its own, by a sender or by a caller alone.
	// While one commits, the calls that come wait, and go in the next.
	// On a quiet machine at 32 executions in flight one did better than
	// two: larger batches, fewer commits, 15% less of the server's CPU
	// an execution and 18% less of the client's (bench/storecpu.sh), and
	// 1.05x to 1.10x the executions a second. Under load the two were
	// alike.
	senders = 1
	// minConns is the pool's size unless the URL sets pool_max_conns:
	// the senders' connections, and the rest for waits, a reservation's
	// later passes, renewals and purges.
	minConns = 8
	// batchLockTimeout bounds a batched statement's wait for a row lock,
	// so that one row held long does not hold up the whole batch. Rows
	// that batches hold are free again within a commit: under a heavy
	// load that may take more than a tenth of a second, and a shorter
	// bound split batches there for nothing.
	batchLockTimeout = "1s"
)

// A stmt is one caller's statement, which returns at most one row.
type stmt struct {
	sql string
	// args returns the statement's arguments for a write made at now,
	// the time the statement got its connection: a lease starts when it
	// is written, not before its wait in the queue.
	args    func(now time.Time) ([]any, error)
	order   string              // the row it writes: a batch runs its statements in this order
	scan    func(pgx.Row) error // reads the row
	now     time.Time           // the time of its write, set by prepare
	argv    []any               // args(now), set by prepare
	known   *knownRow           // for an update of a known record, its values, set by prepare
	reserve *reserveRow         // for a reservation's first pass, its values, set by prepare
	err     error               // scan's, or the batch's
}

// prepare makes st's arguments for a write made at now.
func (st *stmt) prepare(now time.Time) (err error) {
	st.now = now
	st.argv, err = st.args(now)
	return err
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

// errClosed is the error of a call made after Close.
var errClosed = fmt.Errorf("the store is closed: %w", batch.ErrClosed)

// run runs st, batched by q with the statements of other callers, and
// returns scan's error or the batch's. A caller whose ctx ends while its
// statement waits in the queue gets ctx.Err(), and the statement is not
// sent.
func (s *Store) run(ctx context.Context, q *batch.Queue[*stmt], st *stmt) error {
	if err := q.Do(ctx, st); err != nil {
		if errors.Is(err, batch.ErrClosed) {
			return errClosed
		}
		return err
	}
	return st.err
}

// sendBatch runs the statements of calls, together where it can, and
// answers each call.
func (s *Store) sendBatch(ctx context.Context, calls []*batch.Call[*stmt]) {
	l := &link{s: s}
	defer l.release()
	if err := l.get(ctx); err != nil {
		for _, c := range calls {
			c.Job.err = err
		}
		return
	}
	// Arguments first: a call whose own cannot be made fails alone.
	var pending []*batch.Call[*stmt]
	for _, c := range calls {
		if c.Job.err = c.Job.prepare(l.now); c.Job.err == nil {
			pending = append(pending, c)
		}
	}
	slices.SortFunc(pending, func(a, b *batch.Call[*stmt]) int { return strings.Compare(a.Job.order, b.Job.order) })
	var alone []*batch.Call[*stmt]
	for len(pending) > 1 {
		pending, alone = s.tryBatch(ctx, l, pending, alone)
	}
	for _, c := range append(alone, pending...) {
		if err := l.get(c.Ctx); err != nil {
			c.Job.err = err
			continue
		}
		bctx, cancel := s.bounded(c.Ctx)
		if c.Job.now.Equal(l.now) {
			runPrepared(bctx, l.conn, c.Job)
		} else {
			runAlone(bctx, l.conn, c.Job, l.now)
		}
		cancel()
	}
}

// tryBatch runs pending in one transaction and answers its calls, but
// for what it returns to run still: after a rollback, the rest of the
// batch, and added to alone the statement the server refused, if it may
// go through alone (retryAlone); that one's caller is answered with its
// error otherwise.
func (s *Store) tryBatch(ctx context.Context, l *link, pending, alone []*batch.Call[*stmt]) (rest, alone2 []*batch.Call[*stmt]) {
	if err := l.get(ctx); err != nil {
		for _, c := range pending {
			c.Job.err = err
		}
		return nil, alone
	}
	bctx, cancel := s.bounded(ctx)
	rows, err := s.runBatch(bctx, l.conn, pending)
	cancel()
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		// Committed: each call reads its own row, and an error reading
		// it is its own.
		for i, c := range pending {
			c.Job.err = c.Job.scan(&rows[i])
		}
		return nil, alone
	case ctx.Err() != nil:
		// Every caller has left, or the latest deadline has passed.
		for _, c := range append(pending, alone...) {
			c.Job.err = ctx.Err()
		}
		return nil, nil
	case !errors.As(err, &pgErr):
		// The connection's: the commit may have happened.
		for _, c := range pending {
			c.Job.err = err
		}
		return nil, alone
	}
	s.log.Debug("a batch of statements rolled back", "store", s.name, "statements", len(pending), "err", err)
	for i := range rows {
		if err := rows[i].err; err != nil && !errors.Is(err, pgx.ErrNoRows) {
			if retryAlone(err) {
				alone = append(alone, pending[i])
			} else {
				pending[i].Job.err = err
			}
			return slices.Delete(slices.Clone(pending), i, i+1), alone
		}
	}
	return nil, append(alone, pending...) // no statement named: each alone
}

// A link is the pooled connection a batch is sent on, taken again when
// an error closed it.
type link struct {
	s    *Store
	conn *pgxpool.Conn
	now  time.Time // when the connection was taken: the writes' time
}

// get makes l's connection ready. Its error is marked
// record.ErrNotSent: a statement without a connection was not sent, and
// one sent before in a batch that rolled back left nothing either.
func (l *link) get(ctx context.Context) (err error) {
	if l.conn != nil && !l.conn.Conn().IsClosed() {
		return nil
	}
	l.release()
	if l.conn, l.now, err = l.s.acquire(ctx); err != nil {
		return record.NotSent(err)
	}
	return nil
}

func (l *link) release() {
	if l.conn != nil {
		l.conn.Release()
		l.conn = nil
	}
}

// runBatch runs the statements of calls in one implicit transaction and
// returns their rows, read but not yet decoded, and the batch's error.
// Decoding waits for the commit: pgx fails every later row of a batch
// after one it could not decode, whose statements commit all the same.
// A batch of one kind may go as one statement (set.go), unless the
// server refuses it.
func (s *Store) runBatch(ctx context.Context, conn *pgxpool.Conn, calls []*batch.Call[*stmt]) ([]rawRow, error) {
	if sql, args, ok := s.setOf(calls); ok {
		rows, err := runSet(ctx, conn, sql, args, len(calls))
		if ctx.Err() != nil || conn.Conn().IsClosed() || !resendable(err) {
			return rows, err
		}
		// It rolled back whole. A statement each tells which one the
		// server refuses.
	}
	return runStatements(ctx, conn, calls)
}

// resendable reports whether err, which rolled back a batch sent as one
// statement, is one that the server would name a single statement of
// the batch for, had each been sent alone: a row held past
// batchLockTimeout, a deadlock, a serialization failure, or a value the
// server refuses (classes 22 and 23). Any other error (a timeout, the
// end of the session) fails each of its calls alone (tryBatch).
func resendable(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || cmp.Or(pgErr.SeverityUnlocalized, pgErr.Severity) != "ERROR" {
		return false // FATAL: the session is over, and the transaction with it
	}
	return retryAlone(err) || strings.HasPrefix(pgErr.Code, "22") || strings.HasPrefix(pgErr.Code, "23")
}

// runStatements is runBatch, with a statement for each call.
func runStatements(ctx context.Context, conn *pgxpool.Conn, calls []*batch.Call[*stmt]) ([]rawRow, error) {
	var b pgx.Batch
	b.Queue("SELECT set_config('lock_timeout', $1, true)", batchLockTimeout)
	for _, c := range calls {
		b.Queue(c.Job.sql, c.Job.argv...)
	}
	br := conn.SendBatch(ctx, &b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return nil, err
	}
	types := conn.Conn().TypeMap()
	rows := make([]rawRow, len(calls))
	for i := range rows {
		rows[i] = readRow(br, types)
	}
	return rows, br.Close()
}

// retryAlone reports whether err, which rolled a batch back, is one that
// the statement may not meet alone: a lock another transaction held past
// batchLockTimeout, or a deadlock or serialization failure.
func retryAlone(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "55P03", "40P01", "40001": // lock_not_available, deadlock_detected, serialization_failure
		return true
	}
	return false
}

// runAlone runs st in a transaction of its own, its write made at now.
func runAlone(ctx context.Context, conn db, st *stmt, now time.Time) {
	if st.err = st.prepare(now); st.err == nil {
		runPrepared(ctx, conn, st)
	}
}

// runPrepared runs st, prepared, in a transaction of its own.
func runPrepared(ctx context.Context, conn db, st *stmt) {
	st.err = st.scan(conn.QueryRow(ctx, st.sql, st.argv...))
}

// A rawRow is the row a batched statement returned, as the server sent
// it, to decode once the batch has committed. It is a pgx.Row.
type rawRow struct {
	types  *pgtype.Map
	fields []pgconn.FieldDescription
	values [][]byte // nil for no row
	err    error    // the statement's
}

// readRow reads the next statement's row of br.
func readRow(br pgx.BatchResults, types *pgtype.Map) rawRow {
	rows, err := br.Query()
	if err != nil {
		return rawRow{err: err}
	}
	defer rows.Close()
	r := rawRow{types: types}
	if rows.Next() {
		r = ownRow(types, rows.FieldDescriptions(), rows.RawValues())
	}
	rows.Close()
	if r.err = rows.Err(); r.err == nil && r.values == nil {
		r.err = pgx.ErrNoRows
	}
	return r
}

// ownRow returns the row of fields and raw, copied: pgx's are its own
// only until the next row.
func ownRow(types *pgtype.Map, fields []pgconn.FieldDescription, raw [][]byte) rawRow {
	r := rawRow{types: types, fields: slices.Clone(fields)}
	// The values are copied into one buffer: a row is about twenty of
	// them, and an allocation each was a twentieth of the client's CPU
	// at 32 executions in flight.
	n := 0
	for _, v := range raw {
		n += len(v)
	}
	buf := make([]byte, 0, n)
	r.values = make([][]byte, len(raw))
	for i, v := range raw {
		if v != nil { // a NULL stays nil
			buf = append(buf, v...)
			r.values[i] = buf[len(buf)-len(v) : len(buf) : len(buf)]
		}
	}
	return r
}

// Scan implements pgx.Row.
func (r *rawRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	if len(dest) != len(r.values) {
		return fmt.Errorf("the row has %d values; %d destinations", len(r.values), len(dest))
	}
	for i, d := range dest {
		if err := r.types.Scan(r.fields[i].DataTypeOID, r.fields[i].Format, r.values[i], d); err != nil {
			return fmt.Errorf("scanning column %s: %w", r.fields[i].Name, err)
		}
	}
	return nil
}
