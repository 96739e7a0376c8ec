//go:build unix

package sqlitestore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/sqlitestore"
)

// TestReadOnlyCopy: a copy of a store's file, in a directory nothing may
// write (taken for an investigation, or on a read-only mount), opens
// with Options.ReadOnly and lists its records, changing nothing; a write
// to it fails. The copy is of a live store (its -wal and -shm beside it)
// or of a closed one (the database file alone, still in WAL mode, which
// SQLite cannot read without making a -shm). Root writes anywhere, so
// there only the read-only open is tested (the CLI's test runs the
// command as another user).
func TestReadOnlyCopy(t *testing.T) {
	if asNobody(t) {
		return
	}
	for _, live := range []bool{true, false} {
		name := map[bool]string{true: "with its wal and shm", false: "database file alone"}[live]
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			src := dbPath(t)
			w, err := sqlitestore.Open(ctx, src, sqlitestore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			r := newRecord("k")
			if _, won, err := w.Reserve(ctx, r, record.ReserveOptions{}); err != nil || !won {
				t.Fatalf("Reserve = won %v, %v", won, err)
			}
			files := []string{""}
			if live {
				files = append(files, "-wal", "-shm")
			} else if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			copyPath := filepath.Join(dir, "records.db")
			for _, f := range files {
				copyFile(t, src+f, copyPath+f)
			}
			if live {
				w.Close()
			}
			locked := lockDir(t, dir)
			before := listDir(t, dir)
			db := readFile(t, copyPath)

			s, err := sqlitestore.Open(ctx, copyPath, sqlitestore.Options{ReadOnly: true})
			if err != nil {
				t.Fatalf("opening the copy read-only: %v", err)
			}
			recs, err := s.List(ctx, record.Filter{})
			if err != nil || len(recs) != 1 || recs[0].ID != r.ID {
				t.Errorf("List = %v, %v; want %s", recs, err, r.ID)
			}
			if got, err := s.Get(ctx, r.ID); err != nil || got.State != record.Accepted {
				t.Errorf("Get = %v, %v; want %s accepted", got, err, r.ID)
			}
			if _, err := s.Update(ctx, r.ID, record.Change{To: record.Failed, Note: "x"}); err == nil {
				t.Error("Update of a read-only store succeeded")
			}
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if after := listDir(t, dir); locked && !slices.Equal(after, before) {
				t.Errorf("the directory held %q, and %q after a read", before, after)
			}
			if !bytes.Equal(readFile(t, copyPath), db) {
				t.Error("a read-only open changed the database file")
			}
		})
	}
}

// TestReadOnlyRefusesUnreadableWAL: a database whose -wal holds changes,
// copied without its -shm where none can be made, cannot be read whole;
// it is refused with a message naming the -wal, not read without them.
func TestReadOnlyRefusesUnreadableWAL(t *testing.T) {
	if asNobody(t) {
		return
	}
	ctx := t.Context()
	src := dbPath(t)
	w := open(t, src, sqlitestore.Options{})
	if _, _, err := w.Reserve(ctx, newRecord("k"), record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	copyPath := filepath.Join(dir, "records.db")
	copyFile(t, src, copyPath)
	copyFile(t, src+"-wal", copyPath+"-wal")
	if !lockDir(t, dir) {
		t.Skip("root writes in any directory")
	}
	s, err := sqlitestore.Open(ctx, copyPath, sqlitestore.Options{ReadOnly: true})
	if err == nil {
		s.Close()
		t.Fatal("opened a WAL database whose changes it cannot read")
	}
	if !strings.Contains(err.Error(), copyPath+"-wal") {
		t.Errorf("error %q does not name the -wal file", err)
	}
}

// TestReadOnlyNoStore: a file no proxy made is refused, and left as it is.
func TestReadOnlyNoStore(t *testing.T) {
	path := dbPath(t)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := sqlitestore.Open(context.Background(), path, sqlitestore.Options{ReadOnly: true})
	if !errors.Is(err, sqlitestore.ErrNoSchema) || !strings.Contains(err.Error(), path) {
		t.Errorf("error %v; want ErrNoSchema naming the file", err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 0 {
		t.Errorf("the file after a read-only open: %v, %v; want it empty", fi, err)
	}
	if _, err := sqlitestore.Open(context.Background(), path+".missing", sqlitestore.Options{ReadOnly: true}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing file: %v; want ErrNotExist", err)
	}
	if _, err := os.Stat(path + ".missing"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a read-only open made the missing file: %v", err)
	}
}

// asNobody runs the test again as the user nobody (65534), in a process
// of its own, when it runs as root, for whom no directory is read-only;
// it reports whether it did, and the test failed if that run did. A test
// that already runs as another user, or where nobody cannot run it, goes
// on here.
func asNobody(t *testing.T) bool {
	t.Helper()
	if os.Geteuid() != 0 || os.Getenv("MCPI_TEST_AS_NOBODY") != "" {
		return false
	}
	// A copy of the test binary where nobody may run it: the build
	// cache's directories are root's alone.
	dir, err := os.MkdirTemp("", "mcpi-nobody")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "sqlitestore.test")
	copyFile(t, os.Args[0], bin)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run", "^"+t.Name()+"$", "-test.v")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "MCPI_TEST_AS_NOBODY=1", "TMPDIR="+os.TempDir())
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("run as nobody: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("run as nobody did not pass:\n%s", out)
	}
	t.Logf("ran as nobody:\n%s", out)
	return true
}

// lockDir makes dir read-only until the test ends, and says whether
// that holds: root writes in it all the same.
func lockDir(t *testing.T, dir string) bool {
	t.Helper()
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
	return os.Geteuid() != 0
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestOpenNamesUnwritableDirectory: a database file the proxy may write
// in a directory it may not is refused naming the directory: SQLite
// makes its -wal and -shm files there, and says only "attempt to write a
// readonly database".
func TestOpenNamesUnwritableDirectory(t *testing.T) {
	if asNobody(t) {
		return
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "records.db")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if !lockDir(t, dir) {
		t.Skip("root writes in any directory")
	}
	s, err := sqlitestore.Open(t.Context(), path, sqlitestore.Options{})
	if err == nil {
		s.Close()
		t.Fatal("opened a database in a directory it may not write")
	}
	if !strings.Contains(err.Error(), "directory "+dir+" is not writable") {
		t.Errorf("error %q does not say directory %s is not writable", err, dir)
	}
}

// TestOpenNamesUnwritableDirectoryOfStore: so is a store's file, already
// in WAL mode, whose -wal and -shm went at its last close: SQLite needs
// to make them to read the file at all.
func TestOpenNamesUnwritableDirectoryOfStore(t *testing.T) {
	if asNobody(t) {
		return
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "records.db")
	s, err := sqlitestore.Open(t.Context(), path, sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !lockDir(t, dir) {
		t.Skip("root writes in any directory")
	}
	s, err = sqlitestore.Open(t.Context(), path, sqlitestore.Options{})
	if err == nil {
		s.Close()
		t.Fatal("opened a database in a directory it may not write")
	}
	if !strings.Contains(err.Error(), "directory "+dir+" is not writable") {
		t.Errorf("error %q does not say directory %s is not writable", err, dir)
	}
}
