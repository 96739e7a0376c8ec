package cli

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

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
		{[]string{"audit"}, 2, "say verify, checkpoint or keygen"},
		{[]string{"audit", "check", "f"}, 2, `unknown subcommand "check"`},
		{[]string{"audit", "verify"}, 2, "one FILE or more"},
		{[]string{"audit", "verify", "--key", "k", "--since", "c", "a", "b"}, 2, "--since takes one FILE"},
		{[]string{"audit", "verify", filepath.Join(t.TempDir(), "none")}, 1, "no such file"},
	}
	for _, tt := range tests {
		_, _, err := run(t, tt.args...)
		if err == nil || ExitCode(err) != tt.code || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Run(%q) = %v; want exit %d saying %q", tt.args, err, tt.code, tt.want)
		}
	}
}

// TestAuditVerifySeveral: each journal is checked on its own, with the
// same key: one that does not verify is named, the others still pass,
// and the exit status says that one failed.
func TestAuditVerifySeveral(t *testing.T) {
	dir := t.TempDir()
	signer, verifier := keygen(t, dir, "proxy1")
	other, _ := keygen(t, dir, "proxy2")
	good, forged, broken := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl"), writeJournal(t, 4)
	writeSignedJournal(t, good, signer, 0, 3, 10)
	writeSignedJournal(t, forged, other, 0, 3, 10)
	b, _ := os.ReadFile(broken)
	b[strings.Index(string(b), "dispatched")] = 'D'
	if err := os.WriteFile(broken, b, 0o600); err != nil {
		t.Fatal(err)
	}

	stdout, stderr, err := run(t, "audit", "verify", "--key", verifier, good, forged, broken)
	if err == nil || ExitCode(err) != 1 || !strings.Contains(err.Error(), "2 of 3 journals do not verify") {
		t.Fatalf("audit verify of three journals, two bad = %v (exit %d); want exit 1 saying 2 of 3 do not verify", err, ExitCode(err))
	}
	for _, want := range []string{good + ": 4 lines verify", good + ": 1 checkpoint verifies; the newest, at line 4, signed by proxy1+", "covers lines 1-3\n"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout %q; want it to say %q", stdout, want)
		}
	}
	for _, want := range []string{forged + ":4: does not verify", "not signed by the key given", broken + ":2: does not verify"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr %q; want it to say %q", stderr, want)
		}
	}
	if stdout, _, err := run(t, "audit", "verify", "--key", verifier, good, good); err != nil || strings.Count(stdout, "4 lines verify") != 2 {
		t.Errorf("audit verify of two good journals = %q, %v; want a line each, exit 0", stdout, err)
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

// keygen makes a key pair in dir and returns the signer and verifier key
// files.
func keygen(t *testing.T, dir, name string) (signer, verifier string) {
	t.Helper()
	signer = filepath.Join(dir, name+".key")
	stdout, _, err := run(t, "audit", "keygen", name, "--out", signer)
	if err != nil {
		t.Fatal(err)
	}
	verifier = filepath.Join(dir, name+".pub")
	if err := os.WriteFile(verifier, []byte(stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	return signer, verifier
}

// entryAt is the i-th transition of a journal, at a fixed time, so that
// two journals written alike are alike byte for byte.
func entryAt(i int) journal.Entry {
	return journal.Entry{Time: time.Date(2026, 12, 1, 9, 0, i, 0, time.UTC), Execution: fmt.Sprintf("exe_%d", i), Tool: "charge_card", State: "completed"}
}

// writeSignedJournal appends entries from..to-1 to the journal at path,
// signed with the key in keyFile every `every` lines and at the end.
func writeSignedJournal(t *testing.T, path, keyFile string, from, to, every int) {
	t.Helper()
	s, err := readSigner(t.Context(), keyFile)
	if err != nil {
		t.Fatal(err)
	}
	w, err := journal.OpenWith(path, journal.Options{Signer: s, CheckpointLines: every})
	if err != nil {
		t.Fatal(err)
	}
	for i := from; i < to; i++ {
		if err := w.Record(entryAt(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestAuditVerifyOneOfEach: one checkpoint over one line is spoken of in
// the singular, not as "1 checkpoint verify" covering "lines 1-1".
func TestAuditVerifyOneOfEach(t *testing.T) {
	dir := t.TempDir()
	signer, verifier := keygen(t, dir, "proxy1")
	path := filepath.Join(dir, "j.jsonl")
	writeSignedJournal(t, path, signer, 0, 1, 10)
	stdout, _, err := run(t, "audit", "verify", "--key", verifier, path)
	want := path + ": 1 checkpoint verifies; the newest, at line 2, signed by proxy1+"
	if err != nil || !strings.Contains(stdout, want) || !strings.HasSuffix(stdout, ", covers line 1\n") {
		t.Errorf("audit verify = %v, stdout %q; want %q, covering line 1", err, stdout, want)
	}
}

func TestAuditKeygen(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	stdout, stderr, err := run(t, "audit", "keygen", "proxy1.example.com")
	if err != nil {
		t.Fatal(err)
	}
	v, err := note.NewVerifier(strings.TrimSpace(stdout))
	if err != nil || v.Name() != "proxy1.example.com" {
		t.Fatalf("keygen printed %q: %v; want the verifier key of proxy1.example.com", stdout, err)
	}
	fi, err := os.Stat("proxy1.example.com.key")
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the signer key: %v, mode %v; want proxy1.example.com.key, mode 0600", err, fi.Mode().Perm())
	}
	if !strings.Contains(stderr, "--journal-key proxy1.example.com.key") {
		t.Errorf("keygen said %q; want it to say how the key is used", stderr)
	}
	key, _ := os.ReadFile("proxy1.example.com.key")
	if s, err := readSigner(t.Context(), "proxy1.example.com.key"); err != nil || s.KeyHash() != v.KeyHash() {
		t.Fatalf("the signer key does not match the verifier key printed: %v", err)
	}

	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"proxy1.example.com"}, 1, "proxy1.example.com.key exists: keygen never overwrites a key"},
		{[]string{"other", "--out", "proxy1.example.com.key"}, 1, "proxy1.example.com.key exists"},
		{[]string{"a b"}, 2, `NAME "a b"`},
		{[]string{"a+b"}, 2, `NAME "a+b"`},
		// note.Open refuses a note whose origin has a control character:
		// its checkpoints could never be verified.
		{[]string{"proxy1\x01example"}, 2, `NAME "proxy1\x01example"`},
		{[]string{""}, 2, `NAME ""`},
		{[]string{"example.com/journal"}, 2, "give --out FILE"},
		{[]string{}, 2, "audit keygen takes one NAME"},
		{[]string{"a", "b"}, 2, "audit keygen takes one NAME"},
		{[]string{"a", "--out", filepath.Join(dir, "none", "a.key")}, 1, "no such file"},
	}
	for _, tt := range tests {
		stdout, _, err := run(t, append([]string{"audit", "keygen"}, tt.args...)...)
		if err == nil || ExitCode(err) != tt.code || !strings.Contains(err.Error(), tt.want) || stdout != "" {
			t.Errorf("audit keygen %q = %v (exit %d), stdout %q; want exit %d saying %q", tt.args, err, ExitCode(err), stdout, tt.code, tt.want)
		}
	}
	if again, _ := os.ReadFile("proxy1.example.com.key"); string(again) != string(key) {
		t.Error("a refused keygen changed the existing key")
	}
}

// failingWriter fails every write, as stdout redirected to a full disk.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, syscall.ENOSPC }

// TestAuditKeygenStdoutFails: a verifier key that cannot be printed is an
// error, and the signer key is not left behind: it would sign checkpoints
// that no key at hand checks, and keep keygen from making the pair again.
func TestAuditKeygenStdoutFails(t *testing.T) {
	t.Chdir(t.TempDir())
	var stderr bytes.Buffer
	err := Run(t.Context(), []string{"audit", "keygen", "proxy1"}, strings.NewReader(""), failingWriter{}, &stderr)
	if err == nil || !strings.Contains(err.Error(), "printing the verifier key") || !strings.Contains(err.Error(), "no space left on device") {
		t.Errorf("audit keygen with stdout failing = %v; want an error saying the verifier key was not printed", err)
	}
	if _, serr := os.Stat("proxy1.key"); !os.IsNotExist(serr) {
		t.Errorf("after the verifier key failed to print, proxy1.key is there (%v); want it removed", serr)
	}
	if strings.Contains(stderr.String(), "wrote the signer key") {
		t.Errorf("keygen said %q; want no word of a key written", stderr.String())
	}
}

// rechain gives every line from line from (counted from 1) on the prev
// that the line before it hashes to, as a writer who rewrites the file
// after changing a line, without the key, would.
func rechain(ls []string, from int) string {
	for i := from - 1; i < len(ls); i++ {
		s := sha256.Sum256([]byte(strings.TrimSuffix(ls[i-1], "\n")))
		at := len(`{"prev":"`)
		ls[i] = ls[i][:at] + hex.EncodeToString(s[:]) + ls[i][at+64:]
	}
	return strings.Join(ls, "")
}

// TestAuditVerifyKey: with --key, audit verify names the line of each kind
// of tampering that one file can show, and warns of the lines no
// checkpoint covers, which it cannot vouch for.
func TestAuditVerifyKey(t *testing.T) {
	dir := t.TempDir()
	signer, verifier := keygen(t, dir, "proxy1.example.com")
	otherSigner, _ := keygen(t, dir, "other.example.com")
	good := filepath.Join(dir, "good.jsonl")
	writeSignedJournal(t, good, signer, 0, 7, 3) // e e e C4 e e e C8 e C10
	b, _ := os.ReadFile(good)
	ls := strings.SplitAfter(string(b), "\n")[:10]
	changed := append([]string(nil), ls...)
	changed[1] = strings.Replace(changed[1], "exe_1", "exe_X", 1)

	tests := []struct {
		name   string
		in     string
		code   int      // 0: it verifies
		want   []string // in stdout, or in the error
		warn   string   // in stderr
		forged string   // a key that signs more lines after in
	}{
		{"intact", string(b), 0, []string{"10 lines verify", "3 checkpoints verify; the newest, at line 10, signed by proxy1.example.com+", "covers lines 1-9"}, "", ""},
		{"last 3 lines removed", strings.Join(ls[:7], ""), 0, []string{"7 lines verify", "the newest, at line 4"}, "3 lines after the newest checkpoint (lines 5-7): no signature covers them, and they could", ""},
		{"a byte changed in the last line a checkpoint covers", strings.Replace(string(b), "exe_6", "exe_Y", 1), 1, []string{":10: does not verify", "line 9 or line 10 was changed"}, "", ""},
		{"rewritten after a change, without the key", rechain(changed, 3), 1, []string{":4: does not verify", "line 3 or a line before it was changed"}, "", ""},
		{"a checkpoint forged with another key", string(b), 1, []string{":12: does not verify", "not signed by the key given, only by other.example.com+"}, "", otherSigner},
		{"an unsigned tail", string(b), 0, []string{"11 lines verify"}, "1 line after the newest checkpoint (line 11): no signature covers it, and it could", "-"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "j")
			os.WriteFile(path, []byte(tt.in), 0o600)
			switch tt.forged {
			case "":
			case "-":
				w, _ := journal.Open(path) // a writer without the key
				w.Record(entryAt(7))
				w.Close()
			default:
				writeSignedJournal(t, path, tt.forged, 7, 8, 1000)
			}
			stdout, stderr, err := run(t, "audit", "verify", path, "--key", verifier)
			got := stdout
			if tt.code != 0 {
				if err == nil || ExitCode(err) != tt.code {
					t.Fatalf("audit verify = %v (exit %d); want exit %d", err, ExitCode(err), tt.code)
				}
				got = err.Error()
			} else if err != nil {
				t.Fatalf("audit verify: %v", err)
			}
			for _, want := range tt.want {
				if !strings.Contains(got, want) {
					t.Errorf("audit verify said %q; want %q", got, want)
				}
			}
			if !strings.Contains(stderr, tt.warn) || tt.warn == "" && stderr != "" || tt.warn != "" && !strings.Contains(stderr, "warning:") {
				t.Errorf("audit verify warned %q; want %q", stderr, tt.warn)
			}
		})
	}
}

// TestAuditVerifyWithoutKey: a journal with checkpoints verifies without
// a key, which says the checkpoints are there and unchecked; a journal
// without checkpoints still says only that its lines verify.
func TestAuditVerifyWithoutKey(t *testing.T) {
	dir := t.TempDir()
	signer, _ := keygen(t, dir, "proxy1.example.com")
	path := filepath.Join(dir, "j")
	writeSignedJournal(t, path, signer, 0, 4, 1000)
	stdout, stderr, err := run(t, "audit", "verify", path)
	want := path + ": 5 lines verify\n" + path + ": 1 checkpoint, the newest at line 5; signatures not checked: give --key\n"
	if err != nil || stdout != want || stderr != "" {
		t.Errorf("audit verify = %v; stdout %q, stderr %q; want %q", err, stdout, stderr, want)
	}
	// With a key, a journal without a checkpoint passes with a warning.
	_, verifier := keygen(t, dir, "other.example.com")
	stdout, stderr, err = run(t, "audit", "verify", "--key", verifier, writeJournal(t, 2))
	if err != nil || !strings.Contains(stdout, "2 lines verify") || !strings.Contains(stderr, "warning: no checkpoint: no signature covers its 2 lines") {
		t.Errorf("audit verify --key of an unsigned journal = %v; stdout %q, stderr %q; want a pass with a warning", err, stdout, stderr)
	}
	_, stderr, err = run(t, "audit", "verify", "--key", verifier, writeJournal(t, 1))
	if err != nil || !strings.Contains(stderr, "no signature covers its 1 line,") {
		t.Errorf("audit verify --key of an unsigned line = %v; stderr %q; want its 1 line counted as one", err, stderr)
	}
}

// TestAuditCheckpointSince: a checkpoint printed by audit checkpoint and
// kept elsewhere proves later that the journal still extends it: a
// rewrite by a writer who holds the key, and a cut below it, are named.
func TestAuditCheckpointSince(t *testing.T) {
	dir := t.TempDir()
	signer, verifier := keygen(t, dir, "proxy1.example.com")
	path := filepath.Join(dir, "j")
	writeSignedJournal(t, path, signer, 0, 5, 1000) // 5 lines, C6
	saved := filepath.Join(dir, "saved")
	stdout, _, err := run(t, "audit", "checkpoint", path)
	if err != nil || !strings.HasPrefix(stdout, "proxy1.example.com\n5\n") || !strings.Contains(stdout, "\n\n— proxy1.example.com ") {
		t.Fatalf("audit checkpoint = %v, %q; want the signed note of 5 lines", err, stdout)
	}
	// Kept with a newline more, as jq -r or an editor would.
	os.WriteFile(saved, []byte(stdout+"\n"), 0o600)
	// The proxy runs on, from another process.
	writeSignedJournal(t, path, signer, 5, 8, 1000)
	b, _ := os.ReadFile(path)
	ls := strings.SplitAfter(string(b), "\n")

	// The same journal, written again by one who holds the key, with line
	// 2 changed: a journal that verifies on its own.
	rewritten := filepath.Join(dir, "rewritten")
	s, _ := readSigner(t.Context(), signer)
	w, _ := journal.OpenWith(rewritten, journal.Options{Signer: s})
	for i := range 5 {
		e := entryAt(i)
		if i == 1 {
			e.State = "failed"
		}
		w.Record(e)
	}
	w.Close()
	writeSignedJournal(t, rewritten, signer, 5, 8, 1000)
	if _, _, err := run(t, "audit", "verify", "--key", verifier, rewritten); err != nil {
		t.Fatalf("the rewritten journal does not verify on its own: %v", err)
	}
	cut := filepath.Join(dir, "cut")
	os.WriteFile(cut, []byte(strings.Join(ls[:3], "")), 0o600)

	tests := []struct {
		name string
		file string
		code int
		want string
	}{
		{"extended", path, 0, "line 5 is the line the checkpoint saved in " + saved + " signs: the journal extends it"},
		{"saved under a name with control characters", path, 0, `saved in ` + dir + `/saved\x1b[2J\nFAKE signs`},
		{"rewritten with the key", rewritten, 1, rewritten + ":5: does not verify: its SHA-256"},
		{"cut below the saved checkpoint", cut, 1, cut + ":4: does not verify: missing: the saved checkpoint counts 5 lines, and the journal holds 3"},
	}
	// The same note under a name that would clear a terminal, or fake a
	// line of the output, printed raw.
	if err := os.WriteFile(filepath.Join(dir, "saved\x1b[2J\nFAKE"), []byte(stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		saved := saved
		if strings.HasPrefix(tt.name, "saved under") {
			saved = filepath.Join(dir, "saved\x1b[2J\nFAKE")
		}
		stdout, _, err := run(t, "audit", "verify", "--key", verifier, "--since", saved, tt.file)
		got := stdout
		if err != nil {
			got = err.Error()
		}
		if ExitCode(err) != tt.code && err != nil || tt.code != 0 && err == nil || !strings.Contains(got, tt.want) {
			t.Errorf("%s: audit verify --since = %v; %q; want exit %d saying %q", tt.name, err, got, tt.code, tt.want)
		}
	}

	// Kept through Windows, each newline made \r\n.
	crlf := filepath.Join(dir, "saved-crlf")
	os.WriteFile(crlf, []byte(strings.ReplaceAll(stdout, "\n", "\r\n")), 0o600)
	if _, _, err := run(t, "audit", "verify", "--key", verifier, "--since", crlf, path); err != nil {
		t.Errorf("audit verify --since a checkpoint kept with \\r\\n = %v; want it to verify", err)
	}

	// A proxy writing as it is read: the torn line is left out.
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"prev":"`)
	f.Close()
	if stdout, _, err := run(t, "audit", "checkpoint", path); err != nil || !strings.HasPrefix(stdout, "proxy1.example.com\n9\n") {
		t.Errorf("audit checkpoint of a journal being written = %v, %q; want the checkpoint of 9 lines", err, stdout)
	}
}

// TestAuditVerifyEmpty: an empty journal passes, as a proxy that took
// no call leaves one, but not silently: one cut to nothing looks the
// same, with a key or without.
func TestAuditVerifyEmpty(t *testing.T) {
	dir := t.TempDir()
	_, verifier := keygen(t, dir, "proxy1.example.com")
	empty := filepath.Join(dir, "empty.jsonl")
	os.WriteFile(empty, nil, 0o600)
	for _, args := range [][]string{{empty}, {"--key", verifier, empty}} {
		stdout, stderr, err := run(t, append([]string{"audit", "verify"}, args...)...)
		if err != nil || !strings.Contains(stdout, empty+": 0 lines verify") ||
			!strings.Contains(stderr, empty+": warning: empty: no line to verify") || strings.Contains(stderr, "its 0 lines") {
			t.Errorf("audit verify %v = %v; stdout %q, stderr %q; want a pass with one warning that it is empty", args, err, stdout, stderr)
		}
	}
}

// TestAuditCheckpointTornOnly: a journal whose one checkpoint was cut
// short, as a crash at the proxy's stop leaves it, has no checkpoint to
// print; audit checkpoint says its torn last line was left out, rather
// than that the proxy was given no key.
func TestAuditCheckpointTornOnly(t *testing.T) {
	dir := t.TempDir()
	signer, _ := keygen(t, dir, "proxy1.example.com")
	path := filepath.Join(dir, "j")
	writeSignedJournal(t, path, signer, 0, 3, 1000) // 3 lines, C4
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, fi.Size()-20); err != nil {
		t.Fatal(err)
	}
	_, _, err = run(t, "audit", "checkpoint", path)
	if err == nil || !strings.Contains(err.Error(), "no checkpoint in its 3 lines") || !strings.Contains(err.Error(), "its torn last line (line 4) was left out") {
		t.Errorf("audit checkpoint of a journal whose checkpoint is torn = %v; want it to say the torn line 4 was left out", err)
	}
	if _, _, err = run(t, "audit", "checkpoint", writeJournal(t, 2)); err == nil || strings.Contains(err.Error(), "torn") {
		t.Errorf("audit checkpoint of a whole journal with no checkpoint = %v; want an error that speaks of no torn line", err)
	}
}

// TestAuditSinceJournalLine: a checkpoint line of the journal, as a log
// shipper keeps it, is a saved checkpoint too; a line with none is named.
func TestAuditSinceJournalLine(t *testing.T) {
	dir := t.TempDir()
	signer, verifier := keygen(t, dir, "proxy1")
	path := filepath.Join(dir, "j")
	writeSignedJournal(t, path, signer, 0, 3, 1000) // 3 lines, C4
	b, _ := os.ReadFile(path)
	ls := strings.SplitAfter(string(b), "\n")
	shipped, plain := filepath.Join(dir, "shipped"), filepath.Join(dir, "plain")
	os.WriteFile(shipped, []byte(ls[3]), 0o600)
	os.WriteFile(plain, []byte(ls[0]), 0o600)
	writeSignedJournal(t, path, signer, 3, 5, 1000)

	stdout, _, err := run(t, "audit", "verify", "--key", verifier, "--since", shipped, path)
	if want := "line 3 is the line the checkpoint saved in " + shipped + " signs"; err != nil || !strings.Contains(stdout, want) {
		t.Errorf("audit verify --since a shipped checkpoint line = %v, %q; want %q", err, stdout, want)
	}
	_, _, err = run(t, "audit", "verify", "--key", verifier, "--since", plain, path)
	if want := plain + ": JSON with no checkpoint member"; ExitCode(err) != 1 || !strings.Contains(fmt.Sprint(err), want) {
		t.Errorf("audit verify --since a line with no checkpoint = %v; want exit 1 saying %q", err, want)
	}
	// Two checkpoint lines, as a shipper's batch holds them, have a
	// checkpoint member each: not one line is what is wrong.
	batch := filepath.Join(dir, "batch")
	os.WriteFile(batch, []byte(ls[3]+ls[3]), 0o600)
	_, _, err = run(t, "audit", "verify", "--key", verifier, "--since", batch, path)
	if want := batch + ": not one JSON line"; ExitCode(err) != 1 || !strings.Contains(fmt.Sprint(err), want) {
		t.Errorf("audit verify --since two checkpoint lines = %v; want exit 1 saying %q", err, want)
	}
	// Notes appended to one file (audit checkpoint >> FILE) are said to
	// be several, not a note whose signature was forged.
	var note struct{ Checkpoint string }
	json.Unmarshal([]byte(ls[3]), &note)
	appended := filepath.Join(dir, "appended")
	os.WriteFile(appended, []byte(note.Checkpoint+note.Checkpoint), 0o600)
	_, _, err = run(t, "audit", "verify", "--key", verifier, "--since", appended, path)
	if want := appended + " holds 2 notes"; ExitCode(err) != 1 || !strings.Contains(fmt.Sprint(err), want) || strings.Contains(fmt.Sprint(err), "forged") {
		t.Errorf("audit verify --since two notes appended = %v; want exit 1 saying %q", err, want)
	}
	// An empty file, as a failed copy leaves, is said to be empty, not
	// a note that does not verify.
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	_, _, err = run(t, "audit", "verify", "--key", verifier, "--since", empty, path)
	if want := empty + " is empty"; ExitCode(err) != 1 || !strings.Contains(fmt.Sprint(err), want) {
		t.Errorf("audit verify --since an empty file = %v; want exit 1 saying %q", err, want)
	}
}

// TestAuditKeyFileComments: a key file may say whose each key is, in
// lines that begin with #, and hold a key twice.
func TestAuditKeyFileComments(t *testing.T) {
	dir := t.TempDir()
	signer, verifier := keygen(t, dir, "proxy1")
	path := filepath.Join(dir, "j")
	writeSignedJournal(t, path, signer, 0, 3, 1000)
	b, _ := os.ReadFile(verifier)
	keys := filepath.Join(dir, "keys")
	os.WriteFile(keys, []byte("# proxy1, since 2026-12\n"+string(b)+"\n  # the same again\n"+string(b)), 0o600)
	stdout, _, err := run(t, "audit", "verify", "--key", keys, path)
	if err != nil || !strings.Contains(stdout, "1 checkpoint verifies") {
		t.Errorf("audit verify --key with comments = %v, %q; want the checkpoint verified", err, stdout)
	}
}

func TestAuditKeyErrors(t *testing.T) {
	dir := t.TempDir()
	signer, verifier := keygen(t, dir, "proxy1.example.com")
	_, other := keygen(t, dir, "other.example.com")
	path := filepath.Join(dir, "j")
	writeSignedJournal(t, path, signer, 0, 2, 1000)
	saved := filepath.Join(dir, "saved")
	stdout, _, _ := run(t, "audit", "checkpoint", path)
	os.WriteFile(saved, []byte(stdout), 0o600)
	// A key others may read is used, and warned of.
	if err := os.Chmod(signer, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, proxyErr, err := run(t, "--journal", path, "--journal-key", signer, "--", "/bin/cat"); err != nil || !strings.Contains(proxyErr, "readable by others than its owner") || !strings.Contains(proxyErr, "chmod 600") {
		t.Errorf("with a 0644 key: %v, stderr %q; want it used, and a warning to chmod 600 it", err, proxyErr)
	}

	garbage := filepath.Join(dir, "garbage")
	os.WriteFile(garbage, []byte("hello\n"), 0o600)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o600)

	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"verify", path, "--since", saved}, 2, "--since needs --key"},
		{[]string{"verify", path, "--key", filepath.Join(dir, "none")}, 1, "--key: open " + filepath.Join(dir, "none")},
		{[]string{"verify", path, "--key", signer}, 1, "--key: " + signer + ":1: a signer key"},
		{[]string{"verify", path, "--key", garbage}, 1, "--key: " + garbage + ":1: not a verifier key"},
		{[]string{"verify", path, "--key", empty}, 1, "--key: " + empty + ": no verifier key"},
		{[]string{"verify", path, "--key", verifier, "--since", garbage}, 1, "--since: " + garbage + ": the saved checkpoint does not verify"},
		{[]string{"verify", path, "--key", other, "--since", saved}, 1, "--since: " + saved + ": the saved checkpoint does not verify: it is not signed by the key given"},
		{[]string{"checkpoint", writeJournal(t, 2)}, 1, "no checkpoint in its 2 lines"},
		{[]string{"checkpoint", writeJournal(t, 1)}, 1, "no checkpoint in its 1 line:"},
		{[]string{"checkpoint"}, 2, "audit checkpoint takes one FILE"},
		{[]string{"checkpoint", "--key", verifier, path}, 2, "-key"},
	}
	for _, tt := range tests {
		_, _, err := run(t, append([]string{"audit"}, tt.args...)...)
		if err == nil || ExitCode(err) != tt.code || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("audit %q = %v (exit %d); want exit %d saying %q", tt.args, err, ExitCode(err), tt.code, tt.want)
		}
	}
}

// TestJournalKeyFlag: a proxy given --journal-key signs what the journal
// holds when it stops cleanly; a key it cannot use stops it before the
// journal is opened.
func TestJournalKeyFlag(t *testing.T) {
	dir := t.TempDir()
	signer, verifier := keygen(t, dir, "proxy1.example.com")
	path := writeJournal(t, 2) // left unsigned by an earlier run
	_, proxyErr, err := run(t, "--journal", path, "--journal-key", signer, "--", "/bin/cat")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(proxyErr, "readable by others") {
		t.Errorf("a 0600 key was warned of: %s", proxyErr)
	}
	stdout, stderr, err := run(t, "audit", "verify", "--key", verifier, path)
	// Lines 3 and 4 are the session's start and end.
	if err != nil || !strings.Contains(stdout, "1 checkpoint verifies; the newest, at line 5") || stderr != "" {
		t.Fatalf("after a clean stop: %v; stdout %q, stderr %q; want a checkpoint at line 5 and no warning", err, stdout, stderr)
	}

	// A key others may read is used, and warned of.
	if err := os.Chmod(signer, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, proxyErr, err := run(t, "--journal", path, "--journal-key", signer, "--", "/bin/cat"); err != nil || !strings.Contains(proxyErr, "readable by others than its owner") || !strings.Contains(proxyErr, "chmod 600") {
		t.Errorf("with a 0644 key: %v, stderr %q; want it used, and a warning to chmod 600 it", err, proxyErr)
	}

	garbage := filepath.Join(dir, "garbage")
	os.WriteFile(garbage, []byte("PRIVATE+KEY+nonsense\n"), 0o600)
	// A key made by hand, its name with a control character: every
	// checkpoint it signed would fail to verify.
	control := filepath.Join(dir, "control")
	skey, _, err := note.GenerateKey(rand.Reader, "proxy1\x01example")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(control, []byte(skey+"\n"), 0o600)
	for _, tt := range []struct {
		key  string
		want string
	}{
		{filepath.Join(dir, "none"), "no such file"},
		{verifier, verifier + ": a verifier key"},
		{garbage, garbage + ": a malformed signer key"},
		{control, control + `: the key's name "proxy1\x01example" has a control character`},
	} {
		journal := filepath.Join(t.TempDir(), "j")
		_, _, err := run(t, "--journal", journal, "--journal-key", tt.key, "--", "/bin/cat")
		if err == nil || ExitCode(err) != 1 || !strings.HasPrefix(err.Error(), "--journal-key: ") || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("--journal-key %s = %v (exit %d); want exit 1 naming the flag, saying %q", tt.key, err, ExitCode(err), tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "PRIVATE") {
			t.Errorf("--journal-key %s = %v: the key is never shown", tt.key, err)
		}
		if _, err := os.Stat(journal); err == nil {
			t.Errorf("--journal-key %s: the journal was created", tt.key)
		}
	}
}

// TestOutputThatFails: audit verify and activity show whose output
// cannot be written (stdout on a full disk) fail, rather than exit 0
// with their output cut short; --json's output to a reader that
// stopped reading is no failure either.
func TestOutputThatFails(t *testing.T) {
	j := writeJournal(t, 2)
	signer, _ := keygen(t, t.TempDir(), "proxy1.example.com")
	signed := filepath.Join(t.TempDir(), "signed.jsonl")
	writeSignedJournal(t, signed, signer, 0, 2, 0)
	store, _ := unknownExecution(t)
	for _, args := range [][]string{
		{"audit", "verify", j},
		{"audit", "checkpoint", signed},
		{"activity", "show", "exe_1", "--store", "memory", "--journal", j},
		{"activity", "show", "exe_1", "--store", "memory", "--journal", j, "--json"},
		{"activity", "list", "--store", store, "--json"},
	} {
		err := Run(t.Context(), args, strings.NewReader(""), failingWriter{}, io.Discard)
		if ExitCode(err) != 1 || !strings.Contains(fmt.Sprint(err), "writing the output: no space left on device") {
			t.Errorf("%v with stdout failing = %v; want exit 1 saying the output was not written", args, err)
		}
		// A reader that stopped reading (| head) is no failure.
		if err := Run(t.Context(), args, strings.NewReader(""), closedPipe{}, io.Discard); err != nil {
			t.Errorf("%v with stdout a closed pipe = %v; want no error", args, err)
		}
	}
}

// closedPipe fails every write as a pipe whose reader went away does.
type closedPipe struct{}

func (closedPipe) Write([]byte) (int, error) { return 0, syscall.EPIPE }

// TestResolveJournalsWhenOutputFails: a resolution the store took is
// journaled even when it cannot be printed: the journal line is not
// lost with the output.
func TestResolveJournalsWhenOutputFails(t *testing.T) {
	for _, format := range []string{"--json", "--note=text"} {
		store, id := unknownExecution(t)
		file := writeJournal(t, 2)
		args := []string{"activity", "resolve", id, "--store", store, "--as", "failed", "--journal", file, format}
		err := Run(t.Context(), args, strings.NewReader(""), failingWriter{}, io.Discard)
		if ExitCode(err) != 1 || !strings.Contains(fmt.Sprint(err), "was resolved (failed), but printing it failed") {
			t.Errorf("%v with stdout failing = %v; want exit 1 saying it was resolved", args, err)
		}
		if stdout, _, err := run(t, "audit", "verify", file); err != nil || !strings.Contains(stdout, "3 lines verify") {
			t.Errorf("%s: the journal after a resolution whose output failed: %v, %q; want its line written", format, err, stdout)
		}
		// A reader that stopped reading (| head) is no failure: the
		// change was made, and journaled.
		store, id = unknownExecution(t)
		args = []string{"activity", "resolve", id, "--store", store, "--as", "failed", "--journal", file, format}
		if err := Run(t.Context(), args, strings.NewReader(""), closedPipe{}, io.Discard); err != nil {
			t.Errorf("%v with stdout a closed pipe = %v; want no error", args, err)
		}
		if stdout, _, err := run(t, "audit", "verify", file); err != nil || !strings.Contains(stdout, "4 lines verify") {
			t.Errorf("%s: the journal after a resolution printed to a closed pipe: %v, %q; want its line written", format, err, stdout)
		}
	}
}

// TestSignerNameAsNoteOpens: a signer key is refused for its name
// exactly when a note it signs, a checkpoint, fails to open.
func TestSignerNameAsNoteOpens(t *testing.T) {
	for _, name := range []string{"proxy1.example", "proxy1\x7fexample", "proxy1\u0080example", "proxy1\x01example", "proxy1\x1fexample"} {
		skey, vkey, err := note.GenerateKey(rand.Reader, name)
		if err != nil {
			t.Fatal(err)
		}
		s, err := note.NewSigner(skey)
		if err != nil {
			t.Fatal(err)
		}
		v, _ := note.NewVerifier(vkey)
		msg, err := note.Sign(&note.Note{Text: name + "\n1\nAAAA\n"}, s)
		if err != nil {
			t.Fatal(err)
		}
		_, err = note.Open(msg, note.VerifierList(v))
		opens := err == nil
		path := filepath.Join(t.TempDir(), "k")
		os.WriteFile(path, []byte(skey+"\n"), 0o600)
		if _, err := readSigner(t.Context(), path); (err == nil) != opens {
			t.Errorf("readSigner of a key named %q = %v; a note it signs opens: %t", name, err, opens)
		}
	}
}
