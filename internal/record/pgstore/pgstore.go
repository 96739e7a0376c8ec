package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/batch"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/idcache"
)

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// Now returns the current time; nil means time.Now. Every time the
	// store writes or compares (history, leases, expiry) comes from it,
	// never from the database server's clock.
	Now func() time.Time
	// Schema is the PostgreSQL schema holding the tables; "" means
	// "mcp_idempotent". Proxies share reservations when they use the same
	// database and schema. Its name is also the LISTEN channel.
	Schema string
	// Logger receives what the store cannot return to a caller (a purge
	// or the listening connection failing); nil discards it.
	Logger *slog.Logger
	// Timeout bounds each operation on the client's side (Wait's each
	// read); zero means a second more than the URL's statement_timeout,
	// or DefaultTimeout. A server that stops answering without closing
	// the connection, which its statement_timeout cannot catch, fails the
	// operation after it.
	Timeout time.Duration
	// Orphaned, if set, is told of each orphan the store settled while it
	// purged (record.Store), once that is stored: no call met it, so no
	// caller learns of it otherwise. It must not block for long.
	Orphaned func(*record.Record)
}

// DefaultTimeout is Options.Timeout's default: a second beyond the
// default statement_timeout, so that a statement the server gives up on
// fails with the server's own error.
const DefaultTimeout = 6 * time.Second

// DefaultSchema is the schema used when Options.Schema is empty.
const DefaultSchema = "mcp_idempotent"

// Defaults that a URL may override (connect_timeout, statement_timeout):
// a store that cannot be reached must fail a call promptly so that the
// proxy fails closed rather than hanging.
const (
	defaultConnectTimeout   = 5 * time.Second
	defaultStatementTimeout = "5s"
)

// Purging: every purgeEvery-th Reserve deletes up to purgeBatch expired
// records, so the table stays bounded by what the retention keeps and no
// single call pays for a large backlog.
//
// The orphans among the records in flight are looked for at most every
// orphanScanEvery: a lease lapses once in tens of seconds, and the scan
// reads every record in flight, whose index keeps the entries of those
// that settled until a vacuum. Run every purgeEvery-th reservation, it
// read thousands of entries each time at 32 executions in flight, and
// took 8% of the server's CPU (bench/storecpu.sh).
const (
	purgeEvery      = 64
	purgeBatch      = 256
	orphanScanEvery = time.Second
)

// Waiting: the fallback poll's backoff, for a notification that cannot
// come while the listening connection is down, and the poll while it is
// up, a safety net only (the notification and the lease's end wake a
// waiter). Thousands of waiters polling every second would take the
// pool from the work they wait for.
const (
	minPoll   = 10 * time.Millisecond
	maxPoll   = time.Second
	heardPoll = 30 * time.Second
)

// Store is a record.Store in a PostgreSQL database.
type Store struct {
	pool     *pgxpool.Pool
	now      func() time.Time
	orphaned func(*record.Record) // Options.Orphaned
	log      *slog.Logger
	schema   string // as given
	quoted   string // schema as an SQL identifier
	name     string // the server and schema, for errors: no credentials

	setupMu chan struct{} // one schema setup at a time
	ready   atomic.Bool   // the schema exists

	reserves atomic.Uint64                  // Reserve calls, to pace purging
	scanned  atomic.Int64                   // when Reserve's purge last looked for orphans, unix ns
	scans    atomic.Uint64                  // the looks for orphans: what the pacing spares, for tests
	attaches record.AttachCounts            // attaches counted and not yet written (attach.go)
	known    *idcache.Cache[*record.Record] // the records this Store last wrote (known.go)
	acquired atomic.Uint64                  // connections acquire took: progress, under load

	q        queries
	reserveQ *batch.Queue[*stmt] // batches Reserve's first statements (batch.go)
	updateQ  *batch.Queue[*stmt] // and Update's

	waiters          waiters
	minPoll, maxPoll time.Duration // Wait's fallback poll
	timeout          time.Duration // Options.Timeout

	ctx    context.Context // cancelled by Close; bounds the listener
	cancel context.CancelFunc

	mu        sync.Mutex // guards closed, listening, flushing and secret; the listener starts under it
	closed    bool
	flushing  bool           // the attach counts' flusher was started
	listening bool           // the listener goroutine was started
	heard     atomic.Bool    // the listener is connected: notifications come
	wg        sync.WaitGroup // the listener goroutine
	secret    []byte         // the fingerprint secret, once read
}

var _ record.Store = (*Store)(nil)

// Open returns a Store for the database at rawURL, a postgres:// or
// postgresql:// URL (pgxpool's parameters such as pool_max_conns are
// understood; without it, the pool holds up to minConns connections, or
// pgxpool's default if larger). It does not connect: the first call
// does, and creates the schema then if it does not exist. Close releases
// the store.
func Open(ctx context.Context, rawURL string, opts Options) (*Store, error) {
	if !strings.HasPrefix(rawURL, "postgres://") && !strings.HasPrefix(rawURL, "postgresql://") {
		return nil, fmt.Errorf("opening postgres store: %q is not a postgres:// or postgresql:// URL", redact(rawURL))
	}
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, fmt.Errorf("opening postgres store %s: the URL does not parse%s", redact(rawURL), parseReason(rawURL, err))
	}
	if cfg.HealthCheckPeriod <= 0 {
		// pgxpool would panic making its ticker.
		return nil, fmt.Errorf("opening postgres store %s: pool_health_check_period=%s: want a duration above zero, such as 1m", redact(rawURL), cfg.HealthCheckPeriod)
	}
	if !strings.Contains(rawURL, "pool_max_conns=") {
		cfg.MaxConns = max(cfg.MaxConns, minConns)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	if strings.Contains(strings.ToLower(cfg.ConnConfig.RuntimeParams["options"]), "statement_timeout") {
		// The store's own statement_timeout, a start parameter, would
		// override it unseen.
		return nil, fmt.Errorf("opening postgres store %s: options= sets statement_timeout; give statement_timeout= as a URL parameter of its own", redact(rawURL))
	}
	cfg.ShouldPing = shouldPing
	timeout := opts.Timeout
	if v, ok := cfg.ConnConfig.RuntimeParams["statement_timeout"]; !ok {
		cfg.ConnConfig.RuntimeParams["statement_timeout"] = defaultStatementTimeout
	} else if d, ok := pgDuration(v); ok && d > 0 && timeout <= 0 {
		// The URL's own limit, and a second for the server to say so.
		timeout = d + time.Second
	}
	if err := readCommitted(cfg.ConnConfig.RuntimeParams); err != nil {
		return nil, fmt.Errorf("opening postgres store %s: %w", redact(rawURL), err)
	}
	schema := opts.Schema
	if schema == "" {
		schema = DefaultSchema
	}
	s := &Store{
		now:      opts.Now,
		orphaned: opts.Orphaned,
		log:      opts.Logger,
		schema:   schema,
		quoted:   pgx.Identifier{schema}.Sanitize(),
		name:     fmt.Sprintf("postgres store %s (schema %s)", redact(rawURL), schema),
		setupMu:  make(chan struct{}, 1),
		waiters:  waiters{m: make(map[string]*waitGen)},
		minPoll:  minPoll,
		maxPoll:  maxPoll,
		timeout:  timeout,
		known:    idcache.New[*record.Record](record.KnownRecords),
	}
	if s.timeout <= 0 {
		s.timeout = DefaultTimeout
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.q = queries{
		reserve: s.sql(reserveSQL), holder: s.sql(holderSQL), release: s.sql(releaseSQL),
		update: s.sql(updateSQL), updateKnown: s.sql(updateKnownSQL), updateKnownSet: s.sql(updateKnownSetSQL), reserveSet: s.sql(reserveSetSQL), get: s.sql(getSQL), watch: s.sql(watchSQL), renew: s.sql(renewSQL), purge: s.sql(purgeSQL), orphans: s.sql(orphansSQL),
		secretInsert: s.sql(secretInsertSQL), secretSelect: s.sql(secretSelectSQL), flushAttaches: s.sql(flushAttachesSQL), attachedOf: s.sql(attachedOfSQL),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", s.name, err)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.startBatches()
	s.attaches.Start(attachFlush, s.writeAttaches, func(err error) {
		s.log.Warn("writing the counts of attached callers; kept for the next try", "store", s.name, "err", err)
	})
	return s, nil
}

// isolationParam is the setting the store's statements need at its
// default, READ COMMITTED: they compare and set, and a row another
// transaction changed meanwhile is read again as it now is. Under
// REPEATABLE READ or SERIALIZABLE they fail with SQLSTATE 40001 instead,
// and setup would read the schema's version from before its lock.
const isolationParam = "default_transaction_isolation"

// readCommitted sets the store's connections to READ COMMITTED: a start
// parameter overrides a default the role, the database or the URL's
// options= give. A URL that names another level itself is refused.
func readCommitted(params map[string]string) error {
	if v, ok := params[isolationParam]; ok && !strings.EqualFold(strings.Join(strings.Fields(v), " "), "read committed") {
		return fmt.Errorf("%s=%s: the store needs read committed; leave the parameter out", isolationParam, v)
	}
	params[isolationParam] = "read committed"
	return nil
}

// redact returns the URL's scheme, host and path: no user, password or
// parameters.
func redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "postgres://(unparsable URL)"
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
}

// parseReason is what pgx said of rawURL, such as "pool_max_conns too
// small", after a colon; or nothing when that could quote a password of
// the URL, or the URL itself.
func parseReason(rawURL string, err error) string {
	u, uerr := url.Parse(rawURL)
	var pce *pgconn.ParseConfigError
	if uerr != nil || !errors.As(err, &pce) {
		return ""
	}
	bare := *pce
	bare.ConnString = ""
	reason := strings.TrimPrefix(bare.Error(), "cannot parse ``: ")
	secrets := append(u.Query()["password"], u.Query()["sslpassword"]...)
	if pw, ok := u.User.Password(); ok {
		secrets = append(secrets, pw)
	}
	for _, secret := range secrets {
		if secret != "" && strings.Contains(reason, secret) {
			return ""
		}
	}
	if strings.Contains(reason, "`") {
		return ""
	}
	return ": " + reason
}

// String names the store: the server, database and schema.
func (s *Store) String() string { return s.name }

// Close stops the listener and closes the connections. Calls made after
// Close fail, and so do the Waits in progress.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	flush, cancel := context.WithTimeout(context.Background(), s.timeout)
	if err := s.attaches.Close(flush); err != nil {
		s.log.Warn("writing the counts of attached callers at close; they are lost", "store", s.name, "err", err)
	}
	cancel()
	s.stopBatches()
	s.pool.Close()
	s.waiters.wakeAll() // to find the pool closed
	return nil
}

// fail wraps an error of the database for the operation op ("reserving
// exe_..."), naming the store.
func (s *Store) fail(op string, err error) error {
	return fmt.Errorf("%s in %s: %w", op, s.name, err)
}

// clock returns the current time as stored: UTC, to the microsecond.
func (s *Store) clock() time.Time {
	return s.now().UTC().Truncate(time.Microsecond)
}

// In flight and settled, in SQL, made from record.States so that a new
// state is not forgotten here. The schema's partial index and trigger
// spell the list out; TestSchemaKnowsTheStates holds them to it.
var (
	inFlightStates = stateList(record.State.InFlight)
	inFlight       = `state IN (` + inFlightStates + `)`
	settled        = `state NOT IN (` + inFlightStates + `)`
	// orphan is record.Record.Orphaned at $now.
	orphan = `(` + inFlight + ` AND lease_until IS NOT NULL AND lease_until < $now)`
	// replaceable is what a reservation may supersede: an expired settled
	// record, or one of the same action that failed or is in a state of
	// $replace.
	replaceable = `((fingerprint = $fingerprint AND (state = 'failed' OR state = ANY($replace))) OR (` + settled + ` AND coalesce(expires_at <= $now, true)))`
)

// stateList returns the states of record.States that keep, quoted and
// separated by commas, for an SQL IN list.
func stateList(keep func(record.State) bool) string {
	var quoted []string
	for _, st := range record.States {
		if keep(st) {
			quoted = append(quoted, "'"+string(st)+"'")
		}
	}
	return strings.Join(quoted, ", ")
}

// columns are a record's, in the order scanRecord reads them.
const columns = `id, key, fingerprint, actor, scope, upstream, tool, state, history, attempts, attached, result, error, retention, expires_at, owner, lease_until, awaiting`

const getSQL = `SELECT ` + columns + ` FROM {schema}.records WHERE id = $1`

// watchSQL asks for a notification when the record settles or is
// decided. A change that commits after it sees the flag (the row lock
// orders the two); one that committed before is seen by the read that
// follows it.
var watchSQL = `UPDATE {schema}.records SET watched = true WHERE id = $1 AND NOT watched AND ` + inFlight

// renewSQL locks the owner's rows in id order, as batches of updates do
// (batch.go), so that it and a batch never wait for each other in a
// cycle.
var renewSQL = `UPDATE {schema}.records SET lease_until = $2 WHERE owner = $1 AND ` + inFlight + ` AND id IN (
	SELECT id FROM {schema}.records WHERE owner = $1 AND ` + inFlight + ` ORDER BY id FOR UPDATE)`

// orphansSQL reads records whose owner's lease lapsed.
var orphansSQL = params(`SELECT `+columns+` FROM {schema}.records WHERE `+orphan+` LIMIT $limit`, "now", "limit")

const purgeSQL = `DELETE FROM {schema}.records WHERE id IN (
	SELECT id FROM {schema}.records WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)`

// The secret is made by whoever inserts first; everyone then reads it.
const (
	secretInsertSQL = `INSERT INTO {schema}.secrets (name, value) VALUES ('fingerprint', $1) ON CONFLICT (name) DO NOTHING`
	secretSelectSQL = `SELECT value FROM {schema}.secrets WHERE name = 'fingerprint'`
)

// queries are the statements above for one schema.
type queries struct {
	reserve, reserveSet, holder, release, update, updateKnown, updateKnownSet, get, watch, renew, purge, orphans, secretInsert, secretSelect, flushAttaches, attachedOf string
}

// params replaces the named parameters $name in q by $1, $2... in the
// order of names, so that the long statements above read by name.
func params(q string, names ...string) string {
	byLength := slices.Clone(names)
	// Longest first, so that $tool is not taken for $to.
	slices.SortFunc(byLength, func(a, b string) int { return len(b) - len(a) })
	for _, name := range byLength {
		q = strings.ReplaceAll(q, "$"+name, fmt.Sprintf("$%d", slices.Index(names, name)+1))
	}
	for i := 0; i+1 < len(q); i++ {
		if q[i] == '$' && (q[i+1] < '0' || q[i+1] > '9') {
			panic("pgstore: unnamed parameter at " + q[i:])
		}
	}
	return q
}

// acquire readies the schema, takes a connection from the pool, and
// returns the time it got it. An operation's statements are bounded by
// the store's timeout from then on, and a write's clock starts there: a
// lease that starts then is not spent waiting for a connection.
//
// The wait for a connection is not bounded by the timeout: under load
// the pool's queue takes longer than that while the server answers
// every statement. It fails once a whole timeout passes in which this
// Store got no connection at all, as when the server stops answering.
func (s *Store) acquire(ctx context.Context) (*pgxpool.Conn, time.Time, error) {
	bctx, cancel := s.bounded(ctx)
	err := s.ensure(bctx)
	cancel()
	if err != nil {
		return nil, time.Time{}, err
	}
	for {
		seen := s.acquired.Load()
		bctx, cancel := s.bounded(ctx)
		conn, err := s.pool.Acquire(bctx)
		timedOut := errors.Is(bctx.Err(), context.DeadlineExceeded)
		cancel()
		if err == nil {
			s.acquired.Add(1)
			return conn, s.clock(), nil
		}
		if !timedOut || ctx.Err() != nil || s.acquired.Load() == seen {
			return nil, time.Time{}, err
		}
		// Others got connections meanwhile: a queue, not an outage.
	}
}

// Get implements record.Store.
func (s *Store) Get(ctx context.Context, id string) (*record.Record, error) {
	op := "getting " + id
	reading, err := s.attaches.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	conn, _, err := s.acquire(ctx)
	if err != nil {
		return nil, s.fail(op, err)
	}
	defer conn.Release()
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	rec, err := s.get(ctx, conn, id)
	if err != nil {
		return nil, s.wrap(op, err)
	}
	if rec, err = reading.Show(ctx, rec, s.storedAttached); err != nil {
		return nil, s.wrap(op, err)
	}
	return rec, nil
}

// get reads the record id; it returns record.ErrNotFound unwrapped.
func (s *Store) get(ctx context.Context, q db, id string) (*record.Record, error) {
	rec, err := scanRecord(q.QueryRow(ctx, s.q.get, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, record.ErrNotFound
	}
	return rec, err
}

// wrap wraps an error of get: ErrNotFound plainly, the others naming the
// store.
func (s *Store) wrap(op string, err error) error {
	if errors.Is(err, record.ErrNotFound) {
		return fmt.Errorf("%s: %w", op, err)
	}
	return s.fail(op, err)
}

// pgDuration reads a PostgreSQL time setting such as statement_timeout:
// a number of milliseconds, or a number with a unit (us, ms, s, min, h, d).
func pgDuration(v string) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	i := strings.IndexFunc(v, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := v, "ms"
	if i >= 0 {
		num, unit = v[:i], strings.TrimSpace(v[i:])
	}
	n, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, false
	}
	units := map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second,
		"min": time.Minute, "h": time.Hour, "d": 24 * time.Hour}
	u, ok := units[unit]
	if !ok {
		return 0, false
	}
	return time.Duration(n * float64(u)), true
}

// bounded returns ctx bounded by the store's timeout, for one operation.
func (s *Store) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

// Renew implements record.Store, in one statement for all of owner's
// records in flight.
func (s *Store) Renew(ctx context.Context, owner string, until time.Time) error {
	op := "renewing the leases of " + owner
	conn, _, err := s.acquire(ctx)
	if err != nil {
		return s.fail(op, err)
	}
	defer conn.Release()
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	if _, err := conn.Exec(ctx, s.q.renew, owner, timestamp(until)); err != nil {
		return s.fail(op, err)
	}
	return nil
}

// Purge deletes up to limit settled records whose retention has run out
// and returns how many it deleted, after settling up to limit orphans.
// Reserve purges every so often, looking for orphans at most every
// orphanScanEvery; an operator may call Purge to clear a backlog.
func (s *Store) Purge(ctx context.Context, limit int) (int, error) {
	return s.purge(ctx, limit, true)
}

// purge is Purge, settling orphans first only if orphans is set.
func (s *Store) purge(ctx context.Context, limit int, orphans bool) (int, error) {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	if err := s.ensure(ctx); err != nil {
		return 0, s.fail("purging", err)
	}
	now := s.clock()
	if orphans {
		if err := s.settleOrphans(ctx, now, limit); err != nil {
			return 0, s.fail("purging", err)
		}
	}
	tag, err := s.pool.Exec(ctx, s.q.purge, now, limit)
	if err != nil {
		return 0, s.fail("purging", err)
	}
	return int(tag.RowsAffected()), nil
}

// orphanScanDue reports whether Reserve's purge is to look for orphans:
// whether orphanScanEvery has passed since it last did, or the clock went
// back.
func (s *Store) orphanScanDue() bool {
	now, last := s.now().UnixNano(), s.scanned.Load()
	return (now-last >= int64(orphanScanEvery) || now < last) && s.scanned.CompareAndSwap(last, now)
}

// settleOrphans settles up to limit records whose owner's lease lapsed.
// Orphans nobody calls again would stay in flight for ever, out of reach
// of the purge that retention promises: they are settled as a
// reservation or a waiter meeting them would settle them.
func (s *Store) settleOrphans(ctx context.Context, now time.Time, limit int) error {
	s.scans.Add(1)
	rows, err := s.pool.Query(ctx, s.q.orphans, now, limit)
	if err != nil {
		return err
	}
	orphans, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*record.Record, error) { return scanRecord(row) })
	if err != nil {
		return err
	}
	// Together, in the batches of updates: one commit for up to
	// maxBatch of them. One by one, each paid a commit, and the
	// reservation whose purge found 256 waited 0.7 s for them all.
	settled := make([]*record.Record, len(orphans))
	errs := make([]error, len(orphans))
	var wg sync.WaitGroup
	for i, r := range orphans {
		wg.Go(func() {
			st, out := s.change(r.ID, record.OrphanChange(r), []record.State{r.State}, true)
			switch err := s.run(ctx, s.updateQ, st); {
			case err == nil:
				settled[i] = *out
			case !errors.Is(err, pgx.ErrNoRows): // settled or changed meanwhile
				errs[i] = err
			}
		})
	}
	wg.Wait()
	for _, r := range settled {
		if r != nil && s.orphaned != nil {
			s.orphaned(r)
		}
	}
	for _, err := range errs {
		if err != nil {
			return err // the first: a lost connection fails them all alike
		}
	}
	return nil
}

// Secret returns the fingerprint HMAC key that every proxy sharing this
// store uses: 32 random bytes, made by the first caller of any process
// (the insert of a second is ignored) and read by all.
func (s *Store) Secret(ctx context.Context) ([]byte, error) {
	const op = "reading the fingerprint secret"
	s.mu.Lock()
	secret := s.secret
	s.mu.Unlock()
	if secret != nil {
		return secret, nil
	}
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	if err := s.ensure(ctx); err != nil {
		return nil, refusal(s.fail(op, err))
	}
	fresh := make([]byte, 32)
	rand.Read(fresh)
	_, ierr := s.pool.Exec(ctx, s.q.secretInsert, fresh)
	if ierr != nil && !readOnly(ierr) {
		return nil, s.fail(op, ierr)
	}
	// A server that takes no writes refuses the insert even of a secret
	// it holds: read, the secret is known, as on a Redis replica, and
	// the calls fail closed naming the server's error, not the secret.
	if err := s.pool.QueryRow(ctx, s.q.secretSelect).Scan(&secret); err != nil {
		if ierr != nil {
			return nil, record.WritesRefused(s.fail(op, ierr))
		}
		return nil, s.fail(op, err)
	}
	if len(secret) != 32 {
		return nil, fmt.Errorf("%s in %s: the stored secret has %d bytes; want 32", op, s.name, len(secret))
	}
	s.mu.Lock()
	s.secret = secret
	s.mu.Unlock()
	return secret, nil
}

// Check connects, and creates the schema unless it exists, within the
// store's timeout: what a first call would do. An error the server gives
// that waiting does not end is marked record.ErrStoreRefused.
func (s *Store) Check(ctx context.Context) error {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	if err := s.ensure(ctx); err != nil {
		return refusal(s.fail("connecting", err))
	}
	return nil
}

// scanRecord reads a row of columns, after the values of head if any.
func scanRecord(row pgx.Row, head ...any) (*record.Record, error) {
	var (
		r                        record.Record
		state                    string
		history, result, errJSON []byte
		expires, leaseEnd        pgtype.Timestamptz
	)
	dest := append(head,
		&r.ID, &r.Key, &r.Fingerprint, &r.Actor, &r.Scope, &r.Upstream, &r.Tool, &state, &history,
		&r.Attempts, &r.Attached, &result, &errJSON, &r.Retention, &expires, &r.Owner, &leaseEnd, &r.Awaiting)
	if err := row.Scan(dest...); err != nil {
		if r.ID != "" {
			// Scan fills the columns in order up to the one it cannot
			// read, the id first: the error names the record.
			return nil, fmt.Errorf("reading record %s: %w: %w", r.ID, record.ErrUnreadable, err)
		}
		return nil, err
	}
	r.State = record.State(state)
	h, err := decodeHistory(history)
	if err != nil {
		return nil, fmt.Errorf("reading record %s: %w: scanning column history: %w", r.ID, record.ErrUnreadable, err)
	}
	r.History = h
	if result != nil {
		r.Result = result
	}
	if errJSON != nil {
		r.Error = errJSON
	}
	if expires.Valid {
		r.ExpiresAt = expires.Time.UTC()
	}
	if leaseEnd.Valid {
		r.LeaseUntil = leaseEnd.Time.UTC()
	}
	return &r, nil
}

// timestamp is t for a timestamptz parameter, NULL for the zero time.
func timestamp(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// rawJSON is m for a json parameter, NULL when absent. PostgreSQL
// refuses text that is not UTF-8, which an upstream's result or error may
// hold in a string, and the outcome could then never be recorded: each
// byte that is not part of a UTF-8 sequence is stored as U+FFFD, as a
// JSON decoder reads it.
func rawJSON(m json.RawMessage) any {
	if len(m) == 0 {
		return nil
	}
	if utf8.Valid(m) {
		return []byte(m)
	}
	out := make([]byte, 0, len(m)+16)
	for len(m) > 0 {
		r, n := utf8.DecodeRune(m)
		if r == utf8.RuneError && n == 1 {
			out = utf8.AppendRune(out, utf8.RuneError)
		} else {
			out = append(out, m[:n]...)
		}
		m = m[n:]
	}
	return out
}

func isUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}
