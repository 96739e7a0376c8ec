//go:build unix

package sqlitestore_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record/sqlitestore"
)

// TestOpenRefusesAPipe: a path that names a named pipe, or a device, is
// refused as not a regular file, and SQLite writes no journal beside it.
func TestOpenRefusesAPipe(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "records.db")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	s, err := sqlitestore.Open(t.Context(), path, sqlitestore.Options{})
	if err == nil {
		s.Close()
		t.Fatal("Open of a named pipe succeeded")
	}
	if !strings.Contains(err.Error(), path+" is not a regular file") {
		t.Errorf("Open of a named pipe: %v; want it to say %s is not a regular file", err, path)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the directory holds %d files; want the pipe alone", len(entries))
	}
}
