package pgstore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// schemaVersion is the version of the layout below. A change to it adds a
// migration from the previous version to setup. A new schema is made by
// ddl and then every migration, so ddl and each migration stay as they
// were released.
const schemaVersion = 3

// ddl creates the tables in {schema}, at version 1.
//
// Ids and keys compare byte by byte (COLLATE "C"): ids are ULIDs, which
// sort by time that way, for List.
//
// The records table leaves room on each page (fillfactor) so that the
// frequent updates of a row that touch no indexed column (attached, history,
// result) stay heap-only tuple updates.
const ddl = `
CREATE TABLE {schema}.records (
	id          text COLLATE "C" PRIMARY KEY,
	key         text COLLATE "C" NOT NULL,
	holds_key   boolean NOT NULL,
	fingerprint text NOT NULL,
	actor       text NOT NULL,
	scope       text NOT NULL,
	upstream    text NOT NULL,
	tool        text NOT NULL,
	state       text NOT NULL,
	history     jsonb NOT NULL,
	attempts    integer NOT NULL,
	attached    integer NOT NULL,
	result      json,
	error       json,
	retention   interval NOT NULL,
	expires_at  timestamptz,
	owner       text NOT NULL,
	lease_until timestamptz,
	watched     boolean NOT NULL DEFAULT false
) WITH (fillfactor = 80);

-- The reservation: at most one record holds a key.
CREATE UNIQUE INDEX records_key_holder ON {schema}.records (key) WHERE holds_key;
-- Renew: an owner's records in flight.
CREATE INDEX records_owner_in_flight ON {schema}.records (owner) WHERE state IN ('accepted', 'dispatched');
-- Purge: settled records by expiry.
CREATE INDEX records_expires_at ON {schema}.records (expires_at) WHERE expires_at IS NOT NULL;

CREATE TABLE {schema}.secrets (
	name  text PRIMARY KEY,
	value bytea NOT NULL
);

-- Waiters listen on the channel named after the schema. The notification
-- is sent at the commit of whatever statement settled the record, if a
-- waiter marked it watched: a commit that notifies takes a lock that
-- serializes it with every other such commit in the database, which the
-- many records that nobody waits for need not pay.
CREATE FUNCTION {schema}.notify_settled() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_notify(TG_TABLE_SCHEMA, NEW.id);
	RETURN NULL;
END
$$;
CREATE TRIGGER records_settled AFTER UPDATE OF state ON {schema}.records FOR EACH ROW
	WHEN (NEW.watched AND OLD.state IN ('accepted', 'dispatched') AND NEW.state NOT IN ('accepted', 'dispatched'))
	EXECUTE FUNCTION {schema}.notify_settled();

INSERT INTO {schema}.schema_version (version) VALUES (1);
`

// ddl2 takes version 1 to 2: the accounts' allowances that every proxy
// sharing the schema takes from (allowance.go). full_at is when the
// account's bucket is next full, in unix nanoseconds (a timestamptz keeps
// only microseconds); last_took is whether the last take found room,
// which is what the take's one statement returns.
const ddl2 = `
CREATE TABLE {schema}.allowances (
	account   text COLLATE "C" PRIMARY KEY,
	full_at   bigint NOT NULL,
	last_took boolean NOT NULL
);

INSERT INTO {schema}.schema_version (version) VALUES (2);
`

// ddl3 takes version 2 to 3: an approval's states (authorized, in
// flight; refused, settled) and who is asked for it.
//
// The in-flight index is rebuilt with authorized in its predicate, which
// must match the inFlight of the statements for the planner to use it.
// records_awaiting finds the executions that await an approval for List
// without a scan: awaiting is cleared as a record leaves accepted.
//
// The trigger now also notifies a watched record that awaited an
// approval as it leaves accepted (WaitDecided), not only one that leaves
// the in-flight states (Wait).
//
// It runs under setup's advisory lock, in one transaction: a proxy of
// this build opening the schema meanwhile waits for the lock, then finds
// version 3; one of an older build blocks on the table's lock until the
// commit.
const ddl3 = `
ALTER TABLE {schema}.records ADD COLUMN awaiting text NOT NULL DEFAULT '';

DROP INDEX {schema}.records_owner_in_flight;
CREATE INDEX records_owner_in_flight ON {schema}.records (owner) WHERE state IN ('accepted', 'dispatched', 'authorized');
CREATE INDEX records_awaiting ON {schema}.records (id) WHERE awaiting <> '';

DROP TRIGGER records_settled ON {schema}.records;
CREATE TRIGGER records_settled AFTER UPDATE OF state ON {schema}.records FOR EACH ROW
	WHEN (NEW.watched AND NEW.state <> OLD.state AND (
		(OLD.state IN ('accepted', 'dispatched', 'authorized') AND NEW.state NOT IN ('accepted', 'dispatched', 'authorized'))
		OR (OLD.state = 'accepted' AND OLD.awaiting <> '')))
	EXECUTE FUNCTION {schema}.notify_settled();

INSERT INTO {schema}.schema_version (version) VALUES (3);
`

// migrations take the schema from version i to i+1, ddl making version 1.
var migrations = []string{ddl, ddl2, ddl3}

// notifyDDL replaces ddl3's trigger by one that notifies the same, for
// less. PostgreSQL reads a trigger's WHEN back from its stored form at
// every statement that may fire it. With ddl3's, and its lists of
// states, a one-row UPDATE of state cost the server about 70 us of CPU
// against 47 us without a trigger (pgbench, one update a transaction,
// synchronous_commit off). This WHEN reads watched alone, false for
// nearly every record, and costs little more than none; the function
// tests the rest for the few that are.
//
// It changes no table and no behaviour, so it is not a version: builds
// of version 3 that came before it work beside it. setup runs it, under
// its lock, on a schema whose function is missing (notifyFunc).
const notifyDDL = `
CREATE OR REPLACE FUNCTION {schema}.` + notifyFunc + `() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.state <> OLD.state AND (
		(OLD.state IN ('accepted', 'dispatched', 'authorized') AND NEW.state NOT IN ('accepted', 'dispatched', 'authorized'))
		OR (OLD.state = 'accepted' AND OLD.awaiting <> '')) THEN
		PERFORM pg_notify(TG_TABLE_SCHEMA, NEW.id);
	END IF;
	RETURN NULL;
END
$$;
DROP TRIGGER records_settled ON {schema}.records;
CREATE TRIGGER records_settled AFTER UPDATE OF state ON {schema}.records FOR EACH ROW
	WHEN (NEW.watched)
	EXECUTE FUNCTION {schema}.` + notifyFunc + `();
`

// notifyFunc is the name of notifyDDL's function, by which setup knows
// that the schema has its trigger.
const notifyFunc = "notify_if_settled"

// ensure creates the schema on the first call that reaches the server.
// Later calls cost an atomic load.
func (s *Store) ensure(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.ready.Load() {
		return nil
	}
	select {
	case s.setupMu <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.setupMu }()
	if s.ready.Load() {
		return nil
	}
	if err := s.setup(ctx); err != nil {
		return fmt.Errorf("creating schema %s: %w", s.schema, err)
	}
	s.ready.Store(true)
	return nil
}

// setup creates the schema and its tables unless they exist, and takes a
// schema an older build made to the current version.
func (s *Store) setup(ctx context.Context) error {
	// Most opens find the schema made: check without taking the lock or
	// needing the right to create anything. (One whose trigger is the
	// older one takes the lock, to replace it: replaceTrigger.)
	v, notifies, indexed, err := s.version(ctx, s.pool)
	switch {
	case err == nil && v == schemaVersion && notifies && indexed:
		return nil
	case err == nil && v > schemaVersion:
		return versionError(v)
	case err != nil && !undefined(err):
		return err
	}

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	// Two proxies creating one schema at once would fail on the catalog's
	// unique indexes (CREATE ... IF NOT EXISTS is not safe against a
	// concurrent creation), so they take turns; the lock ends with the
	// transaction.
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockKey(s.schema)); err != nil {
		return err
	}
	if v == schemaVersion {
		// Only the trigger to replace or the index to make: no right
		// to create a schema is needed, nor asked for.
		_, notifies, indexed, err := s.version(ctx, tx)
		if err != nil {
			return err
		}
		if err := s.complete(ctx, tx, notifies, indexed); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	if _, err := tx.Exec(ctx, s.sql("CREATE SCHEMA IF NOT EXISTS {schema}; CREATE TABLE IF NOT EXISTS {schema}.schema_version (version integer NOT NULL)")); err != nil {
		return err
	}
	v, notifies, indexed, err = s.version(ctx, tx)
	if err != nil {
		return err
	}
	if v > schemaVersion {
		return versionError(v)
	}
	// At schemaVersion, another process made it or took it there while
	// this one waited for the lock: nothing is left to run.
	for _, m := range migrations[v:] {
		if _, err := tx.Exec(ctx, s.sql(m)); err != nil {
			return err
		}
	}
	if err := s.complete(ctx, tx, notifies, indexed); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// complete adds to a schema at schemaVersion what is no version of its
// own: notifyDDL's trigger, unless notifies, and fingerprintDDL's index,
// unless indexed.
func (s *Store) complete(ctx context.Context, tx pgx.Tx, notifies, indexed bool) error {
	if !notifies {
		if err := s.replaceTrigger(ctx, tx); err != nil {
			return err
		}
	}
	if !indexed {
		return s.addIndex(ctx, tx)
	}
	return nil
}

// fingerprintDDL makes the index that finds a fingerprint's executions,
// newest first, for List(Fingerprint): activity show asks for them on
// every record, and without it each read the whole table (a quarter of
// a second, and every page, at a million records). Its columns never
// change after the insert, so updates stay heap-only. Builds before it
// work beside it: it is no version.
const fingerprintDDL = `CREATE INDEX IF NOT EXISTS records_fingerprint ON {schema}.records (fingerprint, id)`

// indexBuildMax bounds the records of a table addIndex indexes: the
// build holds every write to the table back, about 1.5 s per million
// records, and a larger one is left to an operator's CREATE INDEX
// CONCURRENTLY, which holds none.
const indexBuildMax = 1_000_000

// addIndex runs fingerprintDDL in a savepoint of tx, if it can: List
// works without the index, only slower, so a failure here fails no call.
// As replaceTrigger, it waits at most triggerLockWait for the table, and
// says in a warning what it could not do.
func (s *Store) addIndex(ctx context.Context, tx pgx.Tx) error {
	var rows float64
	if err := tx.QueryRow(ctx, "SELECT coalesce(max(reltuples), 0) FROM pg_class WHERE oid = to_regclass($1)", s.quoted+".records").Scan(&rows); err != nil {
		return err
	}
	const warning = "making no index by fingerprint, which activity show reads; make it with "
	concurrently := s.sql(strings.Replace(fingerprintDDL, "INDEX IF", "INDEX CONCURRENTLY IF", 1))
	if rows > indexBuildMax {
		s.log.Warn(warning+concurrently, "store", s.name, "records", int64(rows))
		return nil
	}
	failed, err := s.tryDDL(ctx, tx, s.sql(fingerprintDDL))
	if failed != nil {
		s.log.Warn(warning+concurrently, "store", s.name, "err", failed)
	}
	return err
}

// replaceTrigger runs notifyDDL in a savepoint of tx, if it can: the
// older trigger notifies the same, for more, so a failure here fails no
// call. A role that may use the schema but not alter its table keeps it,
// as does one that finds the table busy: dropping the trigger waits for
// every transaction that touched the table, and while it waits every
// statement on the table waits behind it, so it waits at most
// triggerLockWait. A warning says so, and the next Store to open the
// schema tries again.
func (s *Store) replaceTrigger(ctx context.Context, tx pgx.Tx) error {
	failed, err := s.tryDDL(ctx, tx, s.sql(notifyDDL))
	if failed != nil {
		s.log.Warn("keeping the schema's older notify trigger, which costs each update more", "store", s.name, "err", failed)
	}
	return err
}

// tryDDL runs ddl in a savepoint of tx, waiting at most triggerLockWait
// for the locks it takes. failed is ddl's error, the savepoint rolled
// back and tx fit to go on; err is one that leaves tx unusable.
func (s *Store) tryDDL(ctx context.Context, tx pgx.Tx, ddl string) (failed, err error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	_, failed = sp.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", fmt.Sprintf("%dms", triggerLockWait.Milliseconds()))
	if failed == nil {
		_, failed = sp.Exec(ctx, ddl)
	}
	if failed == nil {
		return nil, sp.Commit(ctx)
	}
	if err := sp.Rollback(ctx); err != nil {
		return nil, errors.Join(failed, err)
	}
	return failed, nil
}

// triggerLockWait bounds replaceTrigger's wait for the table.
const triggerLockWait = 100 * time.Millisecond

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// version returns the schema's version, 0 when it has none yet,
// whether its trigger is notifyDDL's, and whether it has fingerprintDDL's
// index.
func (s *Store) version(ctx context.Context, q querier) (v int, notifies, indexed bool, err error) {
	err = q.QueryRow(ctx, s.sql("SELECT coalesce(max(version), 0), to_regprocedure($1) IS NOT NULL, to_regclass($2) IS NOT NULL FROM {schema}.schema_version"),
		s.quoted+"."+notifyFunc+"()", s.quoted+".records_fingerprint").Scan(&v, &notifies, &indexed)
	return v, notifies, indexed, err
}

func versionError(v int) error { return newerSchemaError(v) }

// newerSchemaError is a schema version this build does not know.
type newerSchemaError int

func (v newerSchemaError) Error() string {
	return fmt.Sprintf("the schema is at version %d; this build knows versions up to %d", int(v), schemaVersion)
}

// refusal marks err record.ErrStoreRefused when the server answered and
// refuses the URL's user, password or database (SQLSTATE class 28,
// 3D000), a run-time parameter it names (42704) or that parameter's value
// (22023, as the connection starts), the role's right to the schema
// (42501), or the schema's making (class 42: as 42P07, a table of
// another application named as the store's), or the schema is of a newer
// build: none of which a retry ends. A server that takes no writes
// (25006) is marked record.ErrWritesRefused instead: a failover may end
// that.
func refusal(err error) error {
	var pgErr *pgconn.PgError
	if readOnly(err) {
		return record.WritesRefused(err)
	}
	if errors.As(err, &pgErr) && (strings.HasPrefix(pgErr.Code, "28") || pgErr.Code == "3D000" || strings.HasPrefix(pgErr.Code, "42") ||
		pgErr.Code == "22023" && errors.As(err, new(*pgconn.ConnectError))) ||
		errors.As(err, new(newerSchemaError)) {
		return record.StoreRefused(err)
	}
	return err
}

// readOnly reports whether err is a server's that takes no writes: a
// standby, or one in read-only mode (default_transaction_read_only).
func readOnly(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "25006" // read_only_sql_transaction
}

// undefined reports whether err says the schema or the version table does
// not exist.
func undefined(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000")
}

// lockKey is the advisory lock that serializes the creation of schema.
func lockKey(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("mcp-idempotent schema " + schema))
	return int64(h.Sum64())
}

// sql returns q with {schema} replaced by the quoted schema name.
func (s *Store) sql(q string) string {
	return strings.ReplaceAll(q, "{schema}", s.quoted)
}

// ErrNoSchema says the store's schema has not been made: no proxy has
// used it.
var ErrNoSchema = errors.New("no proxy has used this schema: it has no schema_version table")

// Made returns nil if the store's schema has been made, by a proxy or an
// earlier call, and ErrNoSchema if not, without making it: for a command
// that reads a store a proxy used, where a mistyped schema= would
// otherwise be made empty and read as "no executions".
func (s *Store) Made(ctx context.Context) error {
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	_, _, _, err := s.version(ctx, s.pool)
	switch {
	case undefined(err):
		return fmt.Errorf("schema %s: %w", s.schema, ErrNoSchema)
	case err != nil:
		return fmt.Errorf("reading %s: %w", s.name, err)
	}
	return nil
}
