package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// ErrNoSchema is the error of a read-only open of a file that holds no
// store: no proxy made it, and reading does not make one.
var ErrNoSchema = errors.New("the file holds no mcp-idempotent store: no proxy made it")

// openReadOnly opens the existing database file at path to read it only
// (Options.ReadOnly), as a command that looks at a store does: on a copy
// taken for an investigation, a read-only mount or directory, or the file
// of proxies at work. Nothing in the database is changed: no switch to
// WAL, no schema; the schema is only checked. In a directory it may write,
// SQLite may leave a -shm and an empty -wal beside a file that had none,
// as any reader of a WAL database does.
//
// SQLite reads a WAL file through its -shm file, which it makes when
// missing, and so cannot open, even to read, a WAL database whose -shm is
// missing in a directory it may not write. Such a file is opened
// immutable, which reads the database file alone: right when there is no
// -wal, or an empty one, to read; a -wal with changes is refused, since
// they would go unseen.
func openReadOnly(ctx context.Context, path string, opts Options) (*Store, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	file, err := os.Stat(abs)
	if err != nil {
		return nil, err // names the file
	}
	if !file.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", abs)
	}
	dsn := fileURI(abs) + "?mode=ro&_pragma=query_only(1)"
	s, err := openReader(ctx, dsn, abs, file, opts)
	if err == nil || errors.Is(err, ErrNoSchema) || !needsShm(err) {
		return s, err
	}
	if fi, werr := os.Stat(abs + "-wal"); werr == nil && fi.Size() > 0 {
		return nil, fmt.Errorf("reading it needs its -shm file, which cannot be made beside it (%v), since %s-wal holds changes not yet in the database; copy the database and its -wal to a directory you may write, and open the copy", err, abs)
	}
	return openReader(ctx, dsn+"&immutable=1", abs, file, opts)
}

// openReader opens a read-only Store on dsn and checks its schema.
func openReader(ctx context.Context, dsn, abs string, file os.FileInfo, opts Options) (*Store, error) {
	s, err := newStore(dsn, abs, file, opts)
	if err != nil {
		return nil, err
	}
	if err := s.checkSchema(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.prepare(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// checkSchema checks, without changing anything, that the file holds a
// store of this code's schema version.
func (s *Store) checkSchema(ctx context.Context) error {
	var n int
	if err := s.r.QueryRowContext(ctx, "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'schema_version'").Scan(&n); err != nil {
		return fmt.Errorf("reading the schema: %w", err)
	}
	if n == 0 {
		return ErrNoSchema
	}
	var v sql.NullInt64
	if err := s.r.QueryRowContext(ctx, "SELECT max(version) FROM schema_version").Scan(&v); err != nil {
		return fmt.Errorf("reading the schema version: %w", err)
	}
	switch {
	case !v.Valid:
		return ErrNoSchema
	case v.Int64 > schemaVersion:
		return fmt.Errorf("the database has schema version %d; this program knows only up to %d", v.Int64, schemaVersion)
	case v.Int64 < schemaVersion:
		// Upgrading is a write; a proxy of this build does it on open.
		return fmt.Errorf("the database has schema version %d, older than this program's %d, and reading does not upgrade it; a proxy of this version upgrades it when it starts", v.Int64, schemaVersion)
	}
	return nil
}

// needsShm reports SQLite's failure to open or make the -shm file, which
// a read of a WAL database needs, beside a database it may not write.
func needsShm(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() {
	case sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY_DIRECTORY, sqlite3.SQLITE_READONLY_CANTINIT:
		return true
	}
	return false
}
