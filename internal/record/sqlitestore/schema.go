package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// schemaVersion is the version of the schema this code reads and writes.
const schemaVersion = 2

// inFlight is record.State.InFlight as an SQL condition, for every
// statement and index that picks the records in flight: derived, so a
// state added to record.States is not left out of one of them. It
// compares the state with each name in turn: an IN list of more than two
// makes SQLite build a table of them every time a write checks whether
// its row is in records_owner, a twentieth of the writer's time.
var inFlight = func() string {
	var terms []string
	for _, st := range record.States {
		if st.InFlight() {
			terms = append(terms, "state = '"+string(st)+"'")
		}
	}
	return "(" + strings.Join(terms, " OR ") + ")"
}()

// renewText's WHERE is records_owner's predicate, so SQLite uses the
// index for it.
var (
	ownerIndex = "CREATE INDEX records_owner ON records (owner) WHERE " + inFlight
	renewText  = "UPDATE records SET lease_until = ? WHERE owner = ? AND " + inFlight
)

// awaitingIndex holds only the executions awaiting an approval (Apply
// clears Awaiting when one leaves Accepted), so List(Awaiting) reads
// those, not the whole table.
const awaitingIndex = "CREATE INDEX records_awaiting ON records (id) WHERE awaiting != ''"

// fingerprintIndex finds a fingerprint's executions, newest first, for
// List(Fingerprint): activity show asks for them on every record, and
// without it each read the whole table (0.8 s at a million records). Its
// columns never change after the insert, so only a reservation pays for
// it. It is made by migrate, in new files and old ones alike, and is
// no schema version: older builds work beside it.
const fingerprintIndex = "CREATE INDEX IF NOT EXISTS records_fingerprint ON records (fingerprint, id)"

// schema is the current schema, for a new file.
var schema = `
CREATE TABLE records (
	id          TEXT PRIMARY KEY,
	key         TEXT NOT NULL,
	holder      INTEGER NOT NULL DEFAULT 0, -- 1: the record a Reserve of key finds
	fingerprint TEXT NOT NULL,
	actor       TEXT NOT NULL,
	scope       TEXT NOT NULL,
	upstream    TEXT NOT NULL,
	tool        TEXT NOT NULL,
	state       TEXT NOT NULL,
	history     TEXT NOT NULL,              -- JSON array of transitions
	attempts    INTEGER NOT NULL,
	attached    INTEGER NOT NULL,
	result      TEXT,                       -- JSON, as the upstream sent it
	error       TEXT,                       -- JSON, as the upstream sent it
	retention   INTEGER NOT NULL,           -- nanoseconds
	expires_at  INTEGER,                    -- unix nanoseconds; NULL in flight
	owner       TEXT NOT NULL,
	lease_until INTEGER,                    -- unix nanoseconds; NULL when none
	awaiting    TEXT NOT NULL DEFAULT ''    -- who is asked to approve; '' when none
);
CREATE UNIQUE INDEX records_holder ON records (key) WHERE holder = 1;
CREATE INDEX records_expiry ON records (expires_at) WHERE expires_at IS NOT NULL;
` + ownerIndex + `;
` + awaitingIndex + `;
CREATE TABLE secrets (
	name  TEXT PRIMARY KEY,
	value BLOB NOT NULL
);
`

// upgrades[v] takes a file of schema version v to v+1.
var upgrades = map[int64]string{
	// Version 2: the approval states. Authorized is in flight, so
	// records_owner is rebuilt by syncOwnerIndex.
	1: "ALTER TABLE records ADD COLUMN awaiting TEXT NOT NULL DEFAULT '';\n" + awaitingIndex,
}

// foreignTables returns the tables of a database file that the store
// did not make: each of them, if none is its schema_version. A new file
// has none.
func foreignTables(ctx context.Context, db *sql.DB) ([]string, error) {
	rows, err := db.QueryContext(ctx, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite!_%' ESCAPE '!' ORDER BY name")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, err
		}
		if name == "schema_version" {
			return nil, nil
		}
		names = append(names, name)
	}
	return names, rows.Err()
}

// migrate creates the schema in a new file, upgrades one written by an
// older version of this code, and refuses one written by a newer one.
// It runs in one BEGIN IMMEDIATE transaction, so processes opening one
// file at once upgrade it once.
func (s *Store) migrate(ctx context.Context) error {
	if s.current(ctx) {
		return nil
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)"); err != nil {
		return err
	}
	var v sql.NullInt64
	if err := tx.QueryRowContext(ctx, "SELECT max(version) FROM schema_version").Scan(&v); err != nil {
		return err
	}
	switch {
	case !v.Valid:
		if _, err := tx.ExecContext(ctx, schema); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO schema_version (version) VALUES (?)", schemaVersion); err != nil {
			return err
		}
	case v.Int64 > schemaVersion:
		return fmt.Errorf("the database has schema version %d; this program knows only up to %d", v.Int64, schemaVersion)
	}
	for ; v.Valid && v.Int64 < schemaVersion; v.Int64++ {
		up, ok := upgrades[v.Int64]
		if !ok {
			return fmt.Errorf("no upgrade from schema version %d", v.Int64)
		}
		if _, err := tx.ExecContext(ctx, up); err != nil {
			return fmt.Errorf("upgrading from schema version %d: %w", v.Int64, err)
		}
		if _, err := tx.ExecContext(ctx, "UPDATE schema_version SET version = ?", v.Int64+1); err != nil {
			return err
		}
	}
	if err := syncOwnerIndex(ctx, tx); err != nil {
		return fmt.Errorf("rebuilding records_owner: %w", err)
	}
	if _, err := tx.ExecContext(ctx, fingerprintIndex); err != nil {
		return fmt.Errorf("making records_fingerprint: %w", err)
	}
	if _, err := tx.ExecContext(ctx, allowancesTable); err != nil {
		return err
	}
	return tx.Commit()
}

// current reports whether the file's schema is already what migrate
// makes, read without the write lock. A proxy that opens a file while
// another process holds that lock then starts, and its side-effecting
// calls fail closed until the lock is free, as with any store that does
// not answer; BEGIN IMMEDIATE would fail its start after busyTimeout.
func (s *Store) current(ctx context.Context) bool {
	var v sql.NullInt64
	if err := s.v.QueryRowContext(ctx, "SELECT max(version) FROM schema_version").Scan(&v); err != nil || v.Int64 != schemaVersion {
		return false
	}
	var owner string
	if err := s.v.QueryRowContext(ctx, "SELECT sql FROM sqlite_schema WHERE type = 'index' AND name = 'records_owner'").Scan(&owner); err != nil || owner != ownerIndex {
		return false
	}
	var n int
	err := s.v.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'allowances' OR type = 'index' AND name = 'records_fingerprint'").Scan(&n)
	return err == nil && n == 2
}

// syncOwnerIndex rebuilds records_owner if its predicate is not
// ownerIndex's, the in-flight states of this code: renew's WHERE must
// match it for SQLite to use the index, and a state added to record.States
// then needs no upgrade of its own for it.
func syncOwnerIndex(ctx context.Context, tx *sql.Tx) error {
	var text string
	err := tx.QueryRowContext(ctx, "SELECT sql FROM sqlite_schema WHERE type = 'index' AND name = 'records_owner'").Scan(&text)
	if err == nil && text == ownerIndex {
		return nil
	}
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if _, err := tx.ExecContext(ctx, "DROP INDEX IF EXISTS records_owner"); err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, ownerIndex)
	return err
}

// statements are prepared once, so SQLite parses each once per connection
// rather than once per call. All but get, holder and renew run on the
// writer.
type statements struct {
	byKey, byID, attach, release, insert, write, purge *sql.Stmt
	writeKnown                                         *sql.Stmt // known.go
	// savepoint, rollbackTo and releaseSavepoint are a write's in a
	// batch (wtx.save, runBeside): parsed for each write, they were
	// prepared and finalized each time.
	savepoint, rollbackTo, releaseSavepoint *sql.Stmt
	// orphans reads the records in flight whose lease lapsed: parsing
	// it on every purge was four fifths of the purge's time.
	orphans *sql.Stmt
	// holder reads a key's holder and attachedOf a record's attached
	// count from the read pool, and addAttached writes counted attaches
	// (attach.go).
	holder, attachedOf, addAttached *sql.Stmt
	get                             *sql.Stmt // on the readers
	renew                           *sql.Stmt // on the renewer
	replayHolder                    *sql.Stmt // holder, on Replay's readers
}

func (st *statements) all() []*sql.Stmt {
	return []*sql.Stmt{st.byKey, st.byID, st.attach, st.release, st.insert, st.write, st.writeKnown, st.purge, st.orphans, st.renew, st.get, st.holder, st.attachedOf, st.addAttached, st.replayHolder,
		st.savepoint, st.rollbackTo, st.releaseSavepoint}
}

// columns are the records columns a Record is read from, in scanRecord's
// order, and written to by insert.
const columns = "id, key, fingerprint, actor, scope, upstream, tool, state, history, attempts, attached, result, error, retention, expires_at, owner, lease_until, awaiting"

func (s *Store) prepare(ctx context.Context) error {
	for _, p := range []struct {
		db   *sql.DB
		dst  **sql.Stmt
		text string
	}{
		{s.w, &s.st.byKey, "SELECT " + columns + " FROM records WHERE key = ? AND holder = 1"},
		{s.w, &s.st.byID, "SELECT " + columns + " FROM records WHERE id = ?"},
		{s.w, &s.st.attach, "UPDATE records SET attached = ? WHERE id = ?"},
		{s.w, &s.st.release, "UPDATE records SET holder = 0 WHERE id = ?"},
		{s.w, &s.st.insert, "INSERT INTO records (" + columns + ", holder) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)"},
		{s.w, &s.st.write, `UPDATE records SET state = ?, history = ?, attempts = ?, attached = ?,
			result = ?, error = ?, expires_at = ?, owner = ?, lease_until = ?, awaiting = ? WHERE id = ?`},
		{s.w, &s.st.writeKnown, writeKnownText},
		{s.w, &s.st.savepoint, "SAVEPOINT write"},
		{s.w, &s.st.rollbackTo, "ROLLBACK TO write"},
		{s.w, &s.st.releaseSavepoint, "RELEASE write"},
		{s.w, &s.st.purge, `DELETE FROM records WHERE id IN (
			SELECT id FROM records WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)`},
		{s.w, &s.st.orphans, "SELECT " + columns + " FROM records WHERE " + inFlight + " AND lease_until IS NOT NULL AND lease_until < ? LIMIT ?"},
		{s.l, &s.st.renew, renewText},
		{s.r, &s.st.get, "SELECT " + columns + " FROM records WHERE id = ?"},
		{s.r, &s.st.holder, "SELECT " + columns + " FROM records WHERE key = ? AND holder = 1"},
		{s.p, &s.st.replayHolder, "SELECT " + columns + " FROM records WHERE key = ? AND holder = 1"},
		{s.r, &s.st.attachedOf, "SELECT attached FROM records WHERE id = ?"},
		{s.w, &s.st.addAttached, "UPDATE records SET attached = attached + ? WHERE id = ?"},
	} {
		st, err := p.db.PrepareContext(ctx, p.text)
		if err != nil {
			return fmt.Errorf("preparing %q: %w", p.text, err)
		}
		*p.dst = st
	}
	return nil
}

// getRecord reads the record id with the statement byID (or get), or
// returns record.ErrNotFound.
func getRecord(ctx context.Context, byID *sql.Stmt, id string) (*record.Record, error) {
	r, err := scanRecord(byID.QueryRowContext(ctx, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, record.ErrNotFound
	}
	return r, err
}

// A scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

func scanRecord(row scanner) (*record.Record, error) {
	var (
		r                     record.Record
		history               []byte
		result, rpcErr        []byte
		retention             int64
		expiresAt, leaseUntil sql.NullInt64
	)
	err := row.Scan(&r.ID, &r.Key, &r.Fingerprint, &r.Actor, &r.Scope, &r.Upstream, &r.Tool, &r.State,
		&history, &r.Attempts, &r.Attached, &result, &rpcErr, &retention, &expiresAt, &r.Owner, &leaseUntil, &r.Awaiting)
	if err != nil {
		if r.ID != "" {
			// Scan fills the columns in order up to the one it cannot
			// read, the id first: the error names the record.
			return nil, fmt.Errorf("reading record %s: %w: %w", r.ID, record.ErrUnreadable, err)
		}
		return nil, err
	}
	if err := json.Unmarshal(history, &r.History); err != nil {
		return nil, fmt.Errorf("reading the history of %s: %w: %w", r.ID, record.ErrUnreadable, err)
	}
	r.Result, r.Error = result, rpcErr
	r.Retention = time.Duration(retention)
	r.ExpiresAt, r.LeaseUntil = fromNanos(expiresAt), fromNanos(leaseUntil)
	return &r, nil
}

// insertRecord stores r and returns its history as stored.
func (s *Store) insertRecord(ctx context.Context, tx *wtx, r *record.Record) (string, error) {
	history, err := historyText(r.History)
	if err != nil {
		return "", err
	}
	_, err = tx.stmt(ctx, s.st.insert).ExecContext(ctx,
		r.ID, r.Key, r.Fingerprint, r.Actor, r.Scope, r.Upstream, r.Tool, r.State,
		history, r.Attempts, r.Attached, jsonText(r.Result), jsonText(r.Error), int64(r.Retention),
		nanos(r.ExpiresAt), r.Owner, nanos(r.LeaseUntil.Round(0).UTC()), r.Awaiting)
	return history, err
}

// historyText is h as the history column holds it: what json.Marshal
// writes.
func historyText(h []record.Transition) (string, error) {
	b, err := record.AppendHistoryJSON(make([]byte, 0, 128*len(h)), h)
	return string(b), err
}

// writeRecord stores the fields of r that a change moves, and returns
// its history as stored.
func (s *Store) writeRecord(ctx context.Context, tx *wtx, r *record.Record) (string, error) {
	history, err := historyText(r.History)
	if err != nil {
		return "", err
	}
	_, err = tx.stmt(ctx, s.st.write).ExecContext(ctx,
		r.State, history, r.Attempts, r.Attached, jsonText(r.Result), jsonText(r.Error),
		nanos(r.ExpiresAt), r.Owner, nanos(r.LeaseUntil), r.Awaiting, r.ID)
	return history, err
}

// jsonText is m as a TEXT value, so SQLite's JSON functions can read it,
// or NULL.
func jsonText(m json.RawMessage) any {
	if m == nil {
		return nil
	}
	return string(m)
}

// nanos is t as unix nanoseconds, or NULL for the zero time. The range
// covers the years 1678 to 2262.
func nanos(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixNano()
}

func fromNanos(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.Unix(0, n.Int64).UTC()
}
