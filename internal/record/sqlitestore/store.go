package sqlitestore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
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
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/batch"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/idcache"
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
	// Orphaned, if set, is told of each orphan the store settled while it
	// purged (record.Store), once that is committed: no call met it, so
	// no caller learns of it otherwise. It must not block for long.
	Orphaned func(*record.Record)
	// Logger receives what the store cannot return to a caller; nil
	// discards it.
	Logger *slog.Logger
	// ReadOnly opens an existing file to read it only (readonly.go), for
	// commands that only look: it works in a directory the process may
	// not write, and every write fails.
	ReadOnly bool
}

// busyTimeout bounds how long a statement waits for the write lock
// another process holds, so a stuck peer makes calls fail, not hang (see
// whileBusy). A variable for tests.
var busyTimeout = 5 * time.Second

const (
	// Every purgeEvery-th reservation of a Store first drops up to
	// purgeBatch expired records, so the file stays bounded by the
	// retention and no reservation pays for a large backlog.
	purgeEvery = 16
	purgeBatch = 64
	// It looks for orphans at most every orphanScanEvery: a lease lapses
	// once in tens of seconds, and the scan reads every record in
	// flight. Run with every purge, it took 3.5% of the writer's time at
	// 32 new executions in flight.
	orphanScanEvery = time.Second

	// The Store's poller reads the states of the records its Waits wait
	// on, to see changes made by other processes, which cannot wake them:
	// a round every minPoll while records settle or new Waits begin,
	// backing off to maxPoll while nothing changes.
	minPoll = 10 * time.Millisecond
	maxPoll = time.Second
	// pollChunk bounds the ids of one of its statements; pollPerRecord
	// lengthens the pause between rounds for each record waited on.
	pollChunk     = 500
	pollPerRecord = 20 * time.Microsecond

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
	// orphaned is Options.Orphaned.
	orphaned func(*record.Record)
	log      *slog.Logger // Options.Logger
	w        *sql.DB      // one connection; every write, each a BEGIN IMMEDIATE transaction
	r        *sql.DB      // a pool for reads, which WAL lets run beside the writer
	// l is one connection for Renew alone. Behind w it would wait its
	// turn with every write of the process, for longer than a lease
	// under load, and the leases of live executions would lapse.
	l *sql.DB
	// v is one read connection for PRAGMA data_version, which counts
	// other connections' commits only when read on one connection.
	v *sql.DB
	// p holds Replay's connections, which never wait for a lock
	// (busy_timeout 0), and replays a token for each, taken without
	// waiting: a Replay that gets none, or meets a lock, answers
	// nothing, and its call goes the way of any other.
	p       *sql.DB
	replays chan struct{}
	st      statements

	writes    *batch.Queue[*write]  // Reserve's and Update's writes (batch.go)
	turn      turn                  // the process's turn at the write lock: a batch's, or Renew's
	reserves  atomic.Uint64         // counts Reserve calls, to pace purges
	scanned   atomic.Int64          // when a purge of Reserve's last looked for orphans, unix ns
	scans     atomic.Uint64         // the looks for orphans: what the pacing spares, for tests
	attaches  record.AttachCounts   // counted by matchRead, not yet written
	known     *idcache.Cache[known] // the records this Store last wrote (known.go)
	closed    chan struct{}         // closed by Close, to end waits
	closeOnce sync.Once

	mu      sync.Mutex          // protects waiters and polling
	waiters map[waitKey]*waiter // what some Wait of this Store is waiting for
	polling bool                // the poller runs
	kick    chan struct{}       // a new record to wait for: the poller's next round comes soon

	secretMu sync.Mutex // protects secret
	secret   []byte     // the fingerprint secret once read

	path string      // the database file's absolute path
	file os.FileInfo // the file at Open, to tell when it is removed or replaced
	// wal and shm are the file's -wal and -shm once in WAL mode, nil if
	// absent then: removing either also parts this process from others.
	wal, shm os.FileInfo
	// lost is set once the file is found removed or replaced: processes
	// that open the path from then on have a store of their own, so
	// reservations here fail closed rather than dedupe apart from theirs.
	lost atomic.Pointer[error]
}

// A waiter is the wake-up that every Wait for one change of one record
// shares.
type waiter struct {
	ch chan struct{} // closed when the record changes so; one close wakes all
	n  int           // Waits holding ch, so the last to leave removes it
}

var (
	_ record.Store   = (*Store)(nil)
	_ record.Decider = (*Store)(nil)
)

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
	if after, ok := strings.CutPrefix(path, "//"); ok && after != "" && after[0] != '/' {
		// The system reads //x.db as /x.db, at the file system's root:
		// most likely a path meant to be relative, read as another.
		return "", opts, fmt.Errorf("the path %s is /%s, at the root; want sqlite:%s for a path in the current directory, or sqlite:/%s", path, after, after, after)
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
	if opts.ReadOnly {
		return openReadOnly(ctx, path, opts)
	}
	abs, file, err := createFile(path)
	if err != nil {
		return nil, err
	}
	dsn := fileURI(abs) + "?_pragma=synchronous(" + synchronous + ")"
	s, err := newStore(dsn, abs, file, opts)
	if err != nil {
		return nil, err
	}
	if err := s.setup(ctx); err != nil {
		s.Close()
		return nil, err
	}
	// The writer's connection stays open, so SQLite keeps these files
	// as they are until Close.
	s.wal, _ = os.Stat(abs + "-wal")
	s.shm, _ = os.Stat(abs + "-shm")
	return s, nil
}

// newStore opens the handles of a Store on the database of dsn, at the
// absolute path abs, which was file when opened.
func newStore(dsn, abs string, file os.FileInfo, opts Options) (*Store, error) {
	w, r, l, v, p, err := openHandles(dsn)
	if err != nil {
		return nil, err
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{now: now, orphaned: opts.Orphaned, log: log, w: w, r: r, l: l, v: v, p: p, replays: make(chan struct{}, replayConns), known: idcache.New[known](record.KnownRecords), closed: make(chan struct{}), turn: make(turn, 1), waiters: make(map[waitKey]*waiter), kick: make(chan struct{}, 1), path: abs, file: file}
	// A write that fails keeps its counts for the next, and Close
	// reports the last failure.
	s.attaches.Start(attachFlush, s.writeAttaches, nil)
	s.writes = batch.Start(maxWrites, 1, s.sendWrites)
	return s, nil
}

// fileURI is the file: URI of the absolute path abs, without parameters.
// The path goes in a URI so that no character of it is taken for a
// parameter; SQLite decodes the %XX escapes.
func fileURI(abs string) string {
	return "file:" + strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(abs)
}

// createFile opens the database file at path, creating it with mode 0600
// if need be, and returns its absolute path and what it is.
func createFile(path string) (string, os.FileInfo, error) {
	if path == "" {
		return "", nil, errors.New("no database path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", nil, err
	}
	// SQLite's own message for these is "unable to open database file",
	// which names nothing.
	dir := filepath.Dir(abs)
	switch fi, err := os.Stat(dir); {
	case errors.Is(err, fs.ErrNotExist):
		return "", nil, fmt.Errorf("directory %s does not exist", dir)
	case err != nil:
		return "", nil, err
	case !fi.IsDir():
		return "", nil, fmt.Errorf("%s is not a directory", dir)
	}
	if fi, err := os.Stat(abs); err == nil && !fi.Mode().IsRegular() && !fi.IsDir() {
		// SQLite would write a journal beside a device or a pipe, then
		// fail with "disk I/O error".
		return "", nil, fmt.Errorf("%s is not a regular file", abs)
	}
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return "", nil, err
	}
	file, err := f.Stat()
	f.Close()
	return abs, file, err
}

// replayConns is how many Replays may read at once.
const replayConns = 2

// openHandles opens five handles on the database of dsn, each with
// connections of its own: the writer, the readers, the renewer, the
// data_version reader and Replay's readers, which alone wait for no
// lock.
func openHandles(dsn string) (w, r, l, v, p *sql.DB, err error) {
	wait := fmt.Sprintf("&_pragma=busy_timeout(%d)", busyTimeout.Milliseconds())
	var opened []*sql.DB
	for _, h := range []struct {
		db    **sql.DB
		dsn   string
		conns int
	}{
		{&w, dsn + wait + "&_txlock=immediate", 1},
		{&r, dsn + wait + "&_pragma=query_only(1)", max(4, runtime.GOMAXPROCS(0))},
		{&l, dsn + wait, 1},
		{&v, dsn + wait + "&_pragma=query_only(1)", 1},
		{&p, dsn + "&_pragma=busy_timeout(0)&_pragma=query_only(1)", replayConns},
	} {
		db, err := sql.Open("sqlite", h.dsn)
		if err != nil {
			for _, o := range opened {
				o.Close()
			}
			return nil, nil, nil, nil, nil, err
		}
		db.SetMaxOpenConns(h.conns)
		db.SetMaxIdleConns(h.conns)
		*h.db = db
		opened = append(opened, db)
	}
	return w, r, l, v, p, nil
}

// unwritableDir returns err of op, naming the directory when SQLite
// could not make the -wal and -shm files in it: SQLite says only
// "attempt to write a readonly database".
func (s *Store) unwritableDir(op string, err error) error {
	if se := (*sqlite.Error)(nil); errors.As(err, &se) && se.Code() == sqlite3.SQLITE_READONLY_DIRECTORY {
		return fmt.Errorf("%s: directory %s is not writable, and SQLite makes the database's -wal and -shm files there: %w", op, filepath.Dir(s.path), err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// setup switches the file to WAL mode and creates or checks the schema.
func (s *Store) setup(ctx context.Context) error {
	// Before the switch to WAL, which would stay: a file of another
	// application's is left as it is.
	if tables, err := foreignTables(ctx, s.w); err != nil {
		// A file already in WAL mode needs its -wal and -shm to be read.
		return s.unwritableDir("reading the schema", err)
	} else if len(tables) > 0 {
		return fmt.Errorf("%s holds tables the store did not make (%s); give the store a file of its own", s.path, strings.Join(tables, ", "))
	}
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
		if se := (*sqlite.Error)(nil); errors.As(err, &se) && se.Code() == sqlite3.SQLITE_READONLY_DIRECTORY {
			return s.unwritableDir("switching to WAL mode", err)
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

// Close closes the database and ends every Wait in progress.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.closed)
		s.writes.Close() // once the writes being sent are answered
	})
	var errs []error
	if err := s.attaches.Close(context.Background()); err != nil {
		errs = append(errs, fmt.Errorf("writing the counts of attached callers: %w", err))
	}
	for _, st := range s.st.all() {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	return errors.Join(append(errs, s.w.Close(), s.r.Close(), s.l.Close(), s.v.Close(), s.p.Close())...)
}

// clock returns the current time, in UTC and without a monotonic reading,
// as it is stored.
func (s *Store) clock() time.Time { return s.now().Round(0).UTC() }

// ErrFileLost is the error of a Store whose database file, or its -wal or
// -shm file, was removed or replaced while it was open. SQLite goes on
// with the files it has open, but a process that opens the path now gets
// another database, or other locks on it, and does not share this one's
// records: from then on Reserve fails closed, until the proxy is started
// again.
var ErrFileLost = errors.New("the database file was removed or replaced while in use; start the proxy again")

// checkFile reports ErrFileLost once the file at the path, or its -wal or
// -shm, is no longer the one opened.
func (s *Store) checkFile() error {
	if lost := s.lost.Load(); lost != nil {
		return *lost
	}
	for _, f := range []struct {
		path string
		was  os.FileInfo
	}{{s.path, s.file}, {s.path + "-wal", s.wal}, {s.path + "-shm", s.shm}} {
		if f.was == nil {
			continue
		}
		fi, err := os.Stat(f.path)
		switch {
		case err == nil && os.SameFile(fi, f.was):
			continue
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("checking the database file: %w", err) // no verdict
		}
		lost := fmt.Errorf("%s: %w", f.path, ErrFileLost)
		s.lost.Store(&lost)
		return lost
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

// whileBusy runs write, a write transaction, again when it failed for
// want of the write lock (SQLITE_BUSY once busyTimeout ran out) while
// other connections committed to the file: a file busy with other
// processes' writes is under load, not held by a stuck peer, and SQLite's
// busy handler, which polls, can miss the lock's free moments for longer
// than the timeout. It gives up, as before, when a try finds no commit of
// another's during its wait; the first failure is always tried once more,
// to learn that.
func (s *Store) whileBusy(ctx context.Context, write func() error) error {
	err := write()
	for isBusy(err) && ctx.Err() == nil {
		seen, verr := s.dataVersion(ctx)
		if verr != nil {
			return err
		}
		if err = write(); !isBusy(err) {
			return err
		}
		if now, verr := s.dataVersion(ctx); verr != nil || now == seen {
			return err
		}
	}
	return err
}

// dataVersion is PRAGMA data_version on v: it changes when a connection
// other than v commits to the file.
func (s *Store) dataVersion(ctx context.Context) (int64, error) {
	var n int64
	err := s.v.QueryRowContext(ctx, "PRAGMA data_version").Scan(&n)
	return n, err
}
