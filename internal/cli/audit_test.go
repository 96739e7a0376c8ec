package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
)

// writeJournal makes a journal of n transitions and returns its path.
func writeJournal(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	w, err := journal.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, state := range []string{"accepted", "dispatched", "completed", "delivered"}[:n] {
		if err := w.Record(journal.Entry{Execution: "exe_1", Tool: "charge_card", State: state}); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

func TestAuditVerify(t *testing.T) {
	path := writeJournal(t, 4)
	stdout, _, err := run(t, "audit", "verify", path)
	if err != nil || stdout != path+": 4 lines verify\n" {
		t.Fatalf("audit verify of a good journal: %q, %v; want %q", stdout, err, path+": 4 lines verify\n")
	}

	// One byte of line 2 changed: line 2 is named, and the exit status is 1.
	b, _ := os.ReadFile(path)
	i := strings.Index(string(b), "dispatched")
	b[i] = 'D'
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, _, err = run(t, "audit", "verify", path)
	if err == nil || ExitCode(err) != 1 || stdout != "" {
		t.Fatalf("audit verify of a tampered journal: %q, %v (exit %d); want an error, exit 1", stdout, err, ExitCode(err))
	}
	for _, want := range []string{path + ":2: does not verify", "line 2 was changed", "1 line verifies before it"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("audit verify: %v; want it to say %q", err, want)
		}
	}
}

func TestAuditUsage(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"audit"}, 2, "say verify"},
		{[]string{"audit", "check", "f"}, 2, `unknown subcommand "check"`},
		{[]string{"audit", "verify"}, 2, "one FILE"},
		{[]string{"audit", "verify", "a", "b"}, 2, "one FILE"},
		{[]string{"audit", "verify", filepath.Join(t.TempDir(), "none")}, 1, "no such file"},
	}
	for _, tt := range tests {
		_, _, err := run(t, tt.args...)
		if err == nil || ExitCode(err) != tt.code || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Run(%q) = %v; want exit %d saying %q", tt.args, err, tt.code, tt.want)
		}
	}
}

// TestJournalFlagRefuses: a journal another proxy holds, or one whose last
// line is torn, stops the proxy before the upstream starts.
func TestJournalFlagRefuses(t *testing.T) {
	held := writeJournal(t, 1)
	w, err := journal.Open(held)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	torn := writeJournal(t, 2)
	f, err := os.OpenFile(torn, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"prev":"`)
	f.Close()

	missing := filepath.Join(t.TempDir(), "started")
	for _, tt := range []struct {
		path string
		want []string
	}{
		{held, []string{"--journal", held, "another process"}},
		{torn, []string{"--journal", torn, "line 3", "torn"}},
	} {
		// The upstream would create a file if it were started.
		_, _, err := run(t, "--journal", tt.path, "--", "/bin/sh", "-c", "touch "+missing)
		if err == nil {
			t.Fatalf("--journal %s: the proxy ran", tt.path)
		}
		for _, want := range tt.want {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("--journal %s: %v; want it to say %q", tt.path, err, want)
			}
		}
		if _, err := os.Stat(missing); err == nil {
			t.Fatalf("--journal %s: the upstream started", tt.path)
		}
	}
}
