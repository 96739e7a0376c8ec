package sqlitestore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// Now returns the current time; nil means time.Now. Leases and expiry
	// are compared with it, never with a database clock.
	Now func() time.Time
	// Sync is how hard a commit reaches the disk: "normal" (the default,
	// also "") survives the crash of any process; "full" also survives a
	// power loss or an operating system crash, with an fsync per change.
	Sync string
}

const (
	// busyTimeout bounds how long a statement waits for the write lock
	// another process holds, so a stuck peer makes calls fail, not hang.
	busyTimeout = 5 * time.Second

	// Every purgeEvery-th reservation of a Store first drops up to
	// purgeBatch expired records, so the file stays bounded by the
	// retention and no reservation pays for a large backlog.
	purgeEvery = 16
	purgeBatch = 64

	// Wait checks the database on a backoff from minPoll to maxPoll, to
	// see changes made by other processes, which cannot wake it.
	minPoll = 10 * time.Millisecond
	maxPoll = time.Second

	secretName = "fingerprint"
	secretSize = 32
)

// errClosed is what a Wait in progress returns when the Store is closed.
var errClosed = errors.New("sqlite store closed")

// Store is a record.Store kept in a SQLite database file. It is safe for
// concurrent use, and any number of Stores, in this process or others on
// the host, may use one file at once.
type Store struct {
	now func() time.Time
	w   *sql.DB // one connection; every write, each a BEGIN IMMEDIATE transaction
	r   *sql.DB // a pool for reads, which WAL lets run beside the writer
	st  statements

	reserves  atomic.Uint64 // counts Reserve calls, to pace purges
	closed    chan struct{} // closed by Close, to end waits
	closeOnce sync.Once

	mu      sync.Mutex         // protects waiters
	waiters map[string]*waiter // the records some Wait of this Store is waiting for

	secretMu sync.Mutex // protects secret
	secret   []byte     // the fingerprint secret once read

	path string      // the database file's absolute path
	file os.FileInfo // the file at Open, to tell when it is removed or replaced
	// lost is set once the file is found removed or replaced: processes
	// that open the path from then on have a store of their own, so
	// reservations here fail closed rather than dedupe apart from theirs.
	lost atomic.Pointer[error]
}

// A waiter is the wake-up that every Wait of one record shares.
type waiter struct {
	ch chan struct{} // closed when the record settles; one close wakes all
	n  int           // Waits holding ch, so the last to leave removes it
}

var _ record.Store = (*Store)(nil)

// Open opens, creating it if need be, the database file at path. The
// directory must exist. A new file is created with mode 0600, since it
// holds the fingerprint secret; SQLite gives its -wal and -shm files the
// same mode.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	s, err := open(ctx, path, opts)
	if err != nil {
		return nil, fmt.Errorf("opening sqlite store %s: %w", path, err)
	}
	return s, nil
}

// OpenURL opens the store a URL names: "sqlite:PATH", optionally followed by
// "?sync=full" or "?sync=normal", which overrides opts.Sync. PATH is a file
// path (relative or absolute) and may not contain "?".
func OpenURL(ctx context.Context, rawURL string, opts Options) (*Store, error) {
	path, opts, err := ParseURL(rawURL, opts)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", rawURL, err)
	}
	return Open(ctx, path, opts)
}

// ParseURL reads a URL as OpenURL does, without opening anything: the
// database's path, and opts with the URL's parameters applied.
func ParseURL(rawURL string, opts Options) (string, Options, error) {
	rest, ok := strings.CutPrefix(rawURL, "sqlite:")
	if !ok {
		return "", opts, errors.New("not a sqlite:PATH URL")
	}
	path, query, _ := strings.Cut(rest, "?")
	if path == "" {
		return "", opts, errors.New("no database path; want sqlite:PATH")
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", opts, fmt.Errorf("parsing the parameters: %w", err)
	}
	for k, v := range q {
		switch k {
		case "sync":
			if len(v) != 1 {
				return "", opts, fmt.Errorf("sync given %d times", len(v))
			}
			if s := strings.ToLower(v[0]); s != "normal" && s != "full" {
				return "", opts, fmt.Errorf("invalid sync %q: want \"normal\" or \"full\"", v[0])
			}
			opts.Sync = v[0]
		default:
			return "", opts, fmt.Errorf("unknown parameter %q; the only one is sync", k)
		}
	}
	return path, opts, nil
}

func open(ctx context.Context, path string, opts Options) (*Store, error) {
	var synchronous string
	switch strings.ToLower(opts.Sync) {
	case "", "normal":
		synchronous = "NORMAL"
	case "full":
		synchronous = "FULL"
	default:
		return nil, fmt.Errorf("invalid sync %q: want \"normal\" or \"full\"", opts.Sync)
	}
	if path == "" {
		return nil, errors.New("no database path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	// SQLite's own message for these is "unable to open database file",
	// which names nothing.
	dir := filepath.Dir(abs)
	switch fi, err := os.Stat(dir); {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("directory %s does not exist", dir)
	case err != nil:
		return nil, err
	case !fi.IsDir():
		return nil, fmt.Errorf("%s is not a directory", dir)
	}
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	file, err := f.Stat()
	f.Close()
	if err != nil {
		return nil, err
	}

	// The path goes in a file: URI so that no character of it is taken
	// for a parameter; SQLite decodes the %XX escapes.
	dsn := "file:" + strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(abs) +
		fmt.Sprintf("?_pragma=busy_timeout(%d)&_pragma=synchronous(%s)", busyTimeout.Milliseconds(), synchronous)
	w, err := sql.Open("sqlite", dsn+"&_txlock=immediate")
	if err != nil {
		return nil, err
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	r, err := sql.Open("sqlite", dsn+"&_pragma=query_only(1)")
	if err != nil {
		w.Close()
		return nil, err
	}
	readers := max(4, runtime.GOMAXPROCS(0))
	r.SetMaxOpenConns(readers)
	r.SetMaxIdleConns(readers)

	now := opts.Now
	if now == nil {
		now = time.Now
	}
	s := &Store{now: now, w: w, r: r, closed: make(chan struct{}), waiters: make(map[string]*waiter), path: abs, file: file}
	if err := s.setup(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// setup switches the file to WAL mode and creates or checks the schema.
func (s *Store) setup(ctx context.Context) error {
	// The switch to WAL needs the file to itself for a moment, and
	// SQLite may report a peer opening it at the same time as busy
	// without waiting; it is a no-op once the file is in WAL mode.
	deadline := time.Now().Add(busyTimeout)
	for {
		var mode string
		err := s.w.QueryRowContext(ctx, "PRAGMA journal_mode = WAL").Scan(&mode)
		if err == nil {
			if !strings.EqualFold(mode, "wal") {
				return fmt.Errorf("switching to WAL mode: the journal mode stayed %q (WAL needs a local file system)", mode)
			}
			break
		}
		if !isBusy(err) || time.Now().After(deadline) {
			return fmt.Errorf("switching to WAL mode: %w", err)
		}
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("switching to WAL mode: %w", ctx.Err())
		}
	}
	if err := s.migrate(ctx); err != nil {
		return fmt.Errorf("creating the schema: %w", err)
	}
	return s.prepare(ctx)
}

func isBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// schemaVersion is the version of the schema this code reads and writes.
const schemaVersion = 1

const schema = `
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
	lease_until INTEGER                     -- unix nanoseconds; NULL when none
);
CREATE UNIQUE INDEX records_holder ON records (key) WHERE holder = 1;
CREATE INDEX records_expiry ON records (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX records_owner ON records (owner) WHERE state IN ('accepted', 'dispatched');
CREATE TABLE secrets (
	name  TEXT PRIMARY KEY,
	value BLOB NOT NULL
);
`

// migrate creates the schema in a new file and refuses one written by a
// newer version of this code.
func (s *Store) migrate(ctx context.Context) error {
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
	if _, err := tx.ExecContext(ctx, allowancesTable); err != nil {
		return err
	}
	return tx.Commit()
}

// Close closes the database and ends every Wait in progress.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	var errs []error
	for _, st := range s.st.all() {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	return errors.Join(append(errs, s.w.Close(), s.r.Close())...)
}

// statements are prepared once, so SQLite parses each once per connection
// rather than once per call. All but get run on the writer.
type statements struct {
	byKey, byID, attach, release, insert, write, purge, renew *sql.Stmt
	get                                                       *sql.Stmt // on the readers
}

func (st *statements) all() []*sql.Stmt {
	return []*sql.Stmt{st.byKey, st.byID, st.attach, st.release, st.insert, st.write, st.purge, st.renew, st.get}
}

// columns are the records columns a Record is read from, in scanRecord's
// order, and written to by insert.
const columns = "id, key, fingerprint, actor, scope, upstream, tool, state, history, attempts, attached, result, error, retention, expires_at, owner, lease_until"

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
		{s.w, &s.st.insert, "INSERT INTO records (" + columns + ", holder) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)"},
		{s.w, &s.st.write, `UPDATE records SET state = ?, history = ?, attempts = ?, attached = ?,
			result = ?, error = ?, expires_at = ?, owner = ?, lease_until = ? WHERE id = ?`},
		{s.w, &s.st.purge, `DELETE FROM records WHERE id IN (
			SELECT id FROM records WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)`},
		// The state list matches records_owner's, so the index serves it.
		{s.w, &s.st.renew, "UPDATE records SET lease_until = ? WHERE owner = ? AND state IN ('accepted', 'dispatched')"},
		{s.r, &s.st.get, "SELECT " + columns + " FROM records WHERE id = ?"},
	} {
		st, err := p.db.PrepareContext(ctx, p.text)
		if err != nil {
			return fmt.Errorf("preparing %q: %w", p.text, err)
		}
		*p.dst = st
	}
	return nil
}

// clock returns the current time, in UTC and without a monotonic reading,
// as it is stored.
func (s *Store) clock() time.Time { return s.now().Round(0).UTC() }

// Reserve implements record.Store.
func (s *Store) Reserve(ctx context.Context, r *record.Record, opts record.ReserveOptions) (*record.Record, bool, error) {
	if lost := s.lost.Load(); lost != nil {
		return nil, false, fmt.Errorf("reserving %s: %w", r.ID, *lost)
	}
	rec, won, orphan, err := s.reserve(ctx, r, opts)
	if err != nil {
		return nil, false, fmt.Errorf("reserving %s: %w", r.ID, err)
	}
	if orphan != "" {
		s.notify(orphan)
	}
	return rec, won, nil
}

// reserve is Reserve's transaction. It also returns the id of an orphan it
// settled, whose waiters are to be woken once it has committed.
func (s *Store) reserve(ctx context.Context, r *record.Record, opts record.ReserveOptions) (rec *record.Record, won bool, orphan string, err error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, false, "", err
	}
	defer tx.Rollback()
	now := s.clock()
	if s.reserves.Add(1)%purgeEvery == 0 {
		if _, err := s.purge(ctx, tx, now, purgeBatch); err != nil {
			return nil, false, "", fmt.Errorf("purging expired records: %w", err)
		}
	}

	cur, err := scanRecord(tx.StmtContext(ctx, s.st.byKey).QueryRowContext(ctx, r.Key))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		cur = nil
	case err != nil:
		return nil, false, "", err
	}
	if cur != nil {
		if cur.Orphaned(now) {
			apply(cur, record.OrphanChange(cur), now)
			orphan = cur.ID
		}
		if !replaceable(cur, r, now, opts) {
			attach := cur.Fingerprint == r.Fingerprint
			if attach {
				cur.Attached++
			}
			switch {
			case orphan != "":
				err = s.writeRecord(ctx, tx, cur)
			case attach:
				_, err = tx.StmtContext(ctx, s.st.attach).ExecContext(ctx, cur.Attached, cur.ID)
			}
			if err != nil {
				return nil, false, "", err
			}
			if err := tx.Commit(); err != nil {
				return nil, false, "", err
			}
			return cur, false, orphan, nil
		}
		if orphan != "" {
			if err := s.writeRecord(ctx, tx, cur); err != nil {
				return nil, false, "", err
			}
		}
		if _, err := tx.StmtContext(ctx, s.st.release).ExecContext(ctx, cur.ID); err != nil {
			return nil, false, "", err
		}
	}

	rec = r.Clone()
	rec.State = record.Accepted
	rec.History = []record.Transition{{State: record.Accepted, At: now}}
	rec.ExpiresAt = time.Time{}
	if err := s.insertRecord(ctx, tx, rec); err != nil {
		var se *sqlite.Error
		if errors.As(err, &se) && se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY {
			return nil, false, "", errors.New("execution id already used")
		}
		return nil, false, "", err
	}
	if err := tx.Commit(); err != nil {
		return nil, false, "", err
	}
	return rec, true, orphan, nil
}

func replaceable(r, next *record.Record, now time.Time, opts record.ReserveOptions) bool {
	if r.State.Settled() && !now.Before(r.ExpiresAt) {
		return true
	}
	return r.Fingerprint == next.Fingerprint && (r.State == record.Failed || slices.Contains(opts.Replace, r.State))
}

// Update implements record.Store.
func (s *Store) Update(ctx context.Context, id string, c record.Change) (*record.Record, error) {
	r, err := s.update(ctx, id, c)
	if err != nil {
		return nil, fmt.Errorf("updating %s: %w", id, err)
	}
	if c.To.Settled() {
		s.notify(id)
	}
	return r, nil
}

func (s *Store) update(ctx context.Context, id string, c record.Change) (*record.Record, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	now := s.clock()
	r, err := getRecord(ctx, tx.StmtContext(ctx, s.st.byID), id)
	if err != nil {
		return nil, err
	}
	if r.State == record.Delivered && c.To == record.Delivered && c.From == "" {
		return r, nil
	}
	if !c.Allowed(r.State) {
		return nil, fmt.Errorf("from %s to %s: %w", r.State, c.To, record.ErrConflict)
	}
	apply(r, c, now)
	if err := s.writeRecord(ctx, tx, r); err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	return r, nil
}

// apply moves r by c, which CanTransition allows; times are kept in UTC
// to the nanosecond, as stored.
func apply(r *record.Record, c record.Change, now time.Time) {
	c.LeaseUntil = c.LeaseUntil.Round(0).UTC()
	r.Apply(c, now)
}

// Get implements record.Store.
func (s *Store) Get(ctx context.Context, id string) (*record.Record, error) {
	r, err := getRecord(ctx, s.st.get, id)
	if err != nil {
		return nil, fmt.Errorf("getting %s: %w", id, err)
	}
	return r, nil
}

// Renew implements record.Store, in one statement.
//
// It also checks that the database file is still the one opened (Renew is
// called every few seconds): see ErrFileLost.
func (s *Store) Renew(ctx context.Context, owner string, until time.Time) error {
	// Renewed even on a lost file, which this process still uses: its
	// executions under way are not to be taken for orphans.
	_, err := s.st.renew.ExecContext(ctx, nanos(until.Round(0).UTC()), owner)
	if err != nil {
		return fmt.Errorf("renewing the leases of %s: %w", owner, err)
	}
	if err := s.checkFile(); err != nil {
		return fmt.Errorf("renewing the leases of %s: %w", owner, err)
	}
	return nil
}

// ErrFileLost is the error of a Store whose database file was removed or
// replaced while it was open. SQLite goes on with the file it has open,
// but a process that opens the path now gets another database, which does
// not share this one's records: from then on Reserve fails closed, until
// the proxy is started again.
var ErrFileLost = errors.New("the database file was removed or replaced while in use; start the proxy again")

// checkFile reports ErrFileLost once the file at the path is no longer the
// one opened.
func (s *Store) checkFile() error {
	if lost := s.lost.Load(); lost != nil {
		return *lost
	}
	fi, err := os.Stat(s.path)
	switch {
	case err == nil && os.SameFile(fi, s.file):
		return nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("checking the database file: %w", err) // no verdict
	}
	lost := fmt.Errorf("%s: %w", s.path, ErrFileLost)
	s.lost.Store(&lost)
	return lost
}

// Wait implements record.Store. Waits of this Store for one record share
// one channel, closed when an Update or an orphan takeover of this Store
// settles it; a change made by another Store or process is seen by polling
// on a backoff from 10 ms to 1 s. Wait also wakes when the lease lapses, to
// settle the orphan.
func (s *Store) Wait(ctx context.Context, id string) (*record.Record, error) {
	r, err := s.wait(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("waiting for %s: %w", id, err)
	}
	return r, nil
}

func (s *Store) wait(ctx context.Context, id string) (*record.Record, error) {
	poll := minPoll
	for {
		// Subscribed before the read, so a settle after it is not missed.
		w := s.subscribe(id)
		r, err := getRecord(ctx, s.st.get, id)
		if err == nil && r.Orphaned(s.clock()) {
			r, err = s.settleOrphan(ctx, id)
		}
		if err != nil || r.State.Settled() {
			s.unsubscribe(id, w)
			return r, err
		}
		// The poll ends early when the lease lapses, so the orphan is
		// settled on time.
		wake, lapse := poll, false
		if !r.LeaseUntil.IsZero() {
			if d := r.LeaseUntil.Sub(s.clock()) + time.Millisecond; d < wake {
				wake, lapse = d, true
			}
		}
		t := time.NewTimer(wake)
		select {
		case <-w.ch:
		case <-t.C:
			if !lapse {
				poll = min(2*poll, maxPoll)
			}
		case <-s.closed:
			err = errClosed
		case <-ctx.Done():
			err = ctx.Err()
		}
		t.Stop()
		s.unsubscribe(id, w)
		if err != nil {
			return nil, err
		}
	}
}

// settleOrphan settles the record id with OrphanChange if it is still an
// orphan once it holds the write lock, and returns the record.
func (s *Store) settleOrphan(ctx context.Context, id string) (*record.Record, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	now := s.clock()
	r, err := getRecord(ctx, tx.StmtContext(ctx, s.st.byID), id)
	if err != nil || !r.Orphaned(now) {
		return r, err
	}
	apply(r, record.OrphanChange(r), now)
	if err := s.writeRecord(ctx, tx, r); err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	s.notify(id)
	return r, nil
}

// subscribe returns the wake-up for record id that this Store's Waits
// share, holding it until unsubscribe.
func (s *Store) subscribe(id string) *waiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.waiters[id]
	if w == nil {
		w = &waiter{ch: make(chan struct{})}
		s.waiters[id] = w
	}
	w.n++
	return w
}

func (s *Store) unsubscribe(id string, w *waiter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.n--
	if w.n == 0 && s.waiters[id] == w {
		delete(s.waiters, id)
	}
}

// notify wakes every Wait of this Store for record id.
func (s *Store) notify(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.waiters[id]; w != nil {
		close(w.ch)
		delete(s.waiters, id)
	}
}

// List implements record.Lister: newest first, from the read pool.
func (s *Store) List(ctx context.Context, f record.Filter) ([]*record.Record, error) {
	q := "SELECT " + columns + " FROM records WHERE 1=1"
	var args []any
	if f.Tool != "" {
		q += " AND tool = ?"
		args = append(args, f.Tool)
	}
	if f.State != "" {
		q += " AND state = ?"
		args = append(args, string(f.State))
	}
	if !f.Since.IsZero() {
		// Ids are ULIDs, which sort by the time they were made.
		q += " AND id >= ?"
		args = append(args, record.IDFloor(f.Since))
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	q += " ORDER BY id DESC LIMIT ?"
	args = append(args, limit)
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("listing executions: %w", err)
	}
	defer rows.Close()
	var recs []*record.Record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, fmt.Errorf("listing executions: %w", err)
		}
		recs = append(recs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing executions: %w", err)
	}
	return recs, nil
}

// Purge drops up to limit settled records whose retention ran out, oldest
// first, and returns how many it dropped. Reserve calls it now and then;
// it is exported for an operator's cleanup and for tests.
func (s *Store) Purge(ctx context.Context, limit int) (int, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("purging expired records: %w", err)
	}
	defer tx.Rollback()
	n, err := s.purge(ctx, tx, s.clock(), limit)
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		return 0, fmt.Errorf("purging expired records: %w", err)
	}
	return n, nil
}

func (s *Store) purge(ctx context.Context, tx *sql.Tx, now time.Time, limit int) (int, error) {
	if err := s.settleOrphans(ctx, tx, now, limit); err != nil {
		return 0, err
	}
	res, err := tx.StmtContext(ctx, s.st.purge).ExecContext(ctx, nanos(now), limit)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// settleOrphans settles up to limit records whose owner's lease lapsed,
// as a reservation or a waiter meeting them would (record.OrphanChange):
// an orphan nobody calls again would otherwise stay in flight for ever,
// out of reach of the purge that retention promises.
func (s *Store) settleOrphans(ctx context.Context, tx *sql.Tx, now time.Time, limit int) error {
	rows, err := tx.QueryContext(ctx, "SELECT "+columns+" FROM records WHERE state IN ('accepted', 'dispatched') AND lease_until IS NOT NULL AND lease_until < ? LIMIT ?", nanos(now), limit)
	if err != nil {
		return err
	}
	var orphans []*record.Record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			rows.Close()
			return err
		}
		orphans = append(orphans, r)
	}
	if err := rows.Close(); err != nil {
		return err
	}
	for _, r := range orphans {
		apply(r, record.OrphanChange(r), now)
		if err := s.writeRecord(ctx, tx, r); err != nil {
			return err
		}
	}
	return nil
}

// Secret returns the fingerprint secret that every proxy sharing this
// database uses: 32 random bytes, stored by whichever process asks first.
func (s *Store) Secret(ctx context.Context) ([]byte, error) {
	s.secretMu.Lock()
	defer s.secretMu.Unlock()
	if s.secret == nil {
		secret, err := s.loadSecret(ctx)
		if err != nil {
			return nil, fmt.Errorf("reading the fingerprint secret: %w", err)
		}
		s.secret = secret
	}
	return slices.Clone(s.secret), nil
}

func (s *Store) loadSecret(ctx context.Context) ([]byte, error) {
	fresh := make([]byte, secretSize)
	rand.Read(fresh)
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	// The first process to get here stores its secret; the rest read it.
	if _, err := tx.ExecContext(ctx, "INSERT INTO secrets (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING", secretName, fresh); err != nil {
		return nil, err
	}
	var secret []byte
	if err := tx.QueryRowContext(ctx, "SELECT value FROM secrets WHERE name = ?", secretName).Scan(&secret); err != nil {
		return nil, err
	}
	if len(secret) != secretSize {
		return nil, fmt.Errorf("the stored secret is %d bytes; want %d", len(secret), secretSize)
	}
	return secret, tx.Commit()
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
		&history, &r.Attempts, &r.Attached, &result, &rpcErr, &retention, &expiresAt, &r.Owner, &leaseUntil)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(history, &r.History); err != nil {
		return nil, fmt.Errorf("reading the history of %s: %w", r.ID, err)
	}
	r.Result, r.Error = result, rpcErr
	r.Retention = time.Duration(retention)
	r.ExpiresAt, r.LeaseUntil = fromNanos(expiresAt), fromNanos(leaseUntil)
	return &r, nil
}

func (s *Store) insertRecord(ctx context.Context, tx *sql.Tx, r *record.Record) error {
	history, err := json.Marshal(r.History)
	if err != nil {
		return err
	}
	_, err = tx.StmtContext(ctx, s.st.insert).ExecContext(ctx,
		r.ID, r.Key, r.Fingerprint, r.Actor, r.Scope, r.Upstream, r.Tool, r.State,
		string(history), r.Attempts, r.Attached, jsonText(r.Result), jsonText(r.Error), int64(r.Retention),
		nanos(r.ExpiresAt), r.Owner, nanos(r.LeaseUntil.Round(0).UTC()))
	return err
}

// writeRecord stores the fields of r that a change moves.
func (s *Store) writeRecord(ctx context.Context, tx *sql.Tx, r *record.Record) error {
	history, err := json.Marshal(r.History)
	if err != nil {
		return err
	}
	_, err = tx.StmtContext(ctx, s.st.write).ExecContext(ctx,
		r.State, string(history), r.Attempts, r.Attached, jsonText(r.Result), jsonText(r.Error),
		nanos(r.ExpiresAt), r.Owner, nanos(r.LeaseUntil), r.ID)
	return err
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
