//go:build unix

package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/sqlitestore"
)

// TestReadingCommandsOnAReadOnlyCopy: activity list and show read a
// store's file copied into a directory nobody may write (a copy taken for
// an investigation, a read-only mount), whether copied with its -wal and
// -shm from a live store or alone from a stopped one; a command that
// writes fails, naming the file. The binary runs as an unprivileged user
// when the test runs as root, whom permissions do not stop.
func TestReadingCommandsOnAReadOnlyCopy(t *testing.T) {
	base := worldDir(t)
	bin := filepath.Join(base, "mcp-idempotent")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/mcp-idempotent").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, live := range []bool{true, false} {
		name := map[bool]string{true: "live store with its wal and shm", false: "stopped store, database file alone"}[live]
		t.Run(name, func(t *testing.T) {
			src := filepath.Join(t.TempDir(), "records.db")
			s, err := sqlitestore.Open(t.Context(), src, sqlitestore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			r := &record.Record{ID: record.NewID(time.Now()), Key: "k", Fingerprint: "f", Actor: "alice", Tool: "charge_card", Retention: time.Hour}
			if _, _, err := s.Reserve(t.Context(), r, record.ReserveOptions{}); err != nil {
				t.Fatal(err)
			}
			suffixes := []string{"", "-wal", "-shm"}
			if !live {
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				suffixes = suffixes[:1]
			}
			dir, err := os.MkdirTemp(base, "copy")
			if err != nil {
				t.Fatal(err)
			}
			db := filepath.Join(dir, "records.db")
			for _, suf := range suffixes {
				copyReadOnly(t, src+suf, db+suf)
			}
			if err := os.Chmod(dir, 0o555); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Chmod(dir, 0o755) })

			store := "sqlite:" + db
			for _, args := range [][]string{
				{"activity", "list", "--store", store},
				{"activity", "show", r.ID, "--store", store},
			} {
				stdout, stderr, code := runAsOther(t, bin, args...)
				if code != 0 || !strings.Contains(stdout, r.ID) {
					t.Errorf("%s: exit %d, stdout:\n%s\nstderr:\n%s\nwant %s listed", strings.Join(args[:2], " "), code, stdout, stderr, r.ID)
				}
			}
			_, stderr, code := runAsOther(t, bin, "activity", "resolve", r.ID, "--as", "failed", "--store", store)
			if code == 0 || !strings.Contains(stderr, db) {
				t.Errorf("activity resolve on a read-only copy: exit %d, stderr:\n%s\nwant a failure naming %s", code, stderr, db)
			}
		})
	}
}

// worldDir returns a new directory that any user may read and enter,
// removed when the test ends.
func worldDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mcpi-readonly")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// copyReadOnly copies the file from to a new file to, of mode 0444.
func copyReadOnly(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o444); err != nil {
		t.Fatal(err)
	}
}

// runAsOther runs bin with args, as the user nobody (65534) if the test
// runs as root, and returns its output and exit status.
func runAsOther(t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.Dir = "/"
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}
