package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestErrorsEchoNoControlCharacter: a file name or argument that holds
// a line break or an escape is echoed escaped in the error, which names
// it still, for audit and activity alike.
func TestErrorsEchoNoControlCharacter(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "a\nb\x1b[31m")
	in := newInvestigation(t)
	for _, args := range [][]string{
		{"audit", "verify", name},
		{"audit", "checkpoint", name},
		{"audit", "verify", "--key", name, in.journals[0]},
		{"activity", "show", in.id, "--store", in.store, "--journal", name},
		{"activity", "approve", in.id, "--store", in.store, "--journal", filepath.Join(dir, "j"), "--journal-key", name},
	} {
		_, _, err := run(t, args...)
		if err == nil {
			t.Fatalf("%q succeeded", args)
		}
		if msg := err.Error(); printable(msg) != msg || !strings.Contains(msg, `a\nb\x1b[31m`) {
			t.Errorf("%q = %q; want the file name escaped, no control character raw", args, msg)
		}
	}
}

func TestEscapeControls(t *testing.T) {
	for in, want := range map[string]string{
		"plain \"quoted\" text":      "plain \"quoted\" text",
		"line\nbreak\ttab":           `line\nbreak\ttab`,
		"esc\x1b[0m bidi\u202e":      `esc\x1b[0m bidi\u202e`,
		"not utf-8 \xff, but \ufffd": `not utf-8 \xff, but ` + "\ufffd",
	} {
		if got := escapeControls(in); got != want {
			t.Errorf("escapeControls(%q) = %q; want %q", in, got, want)
		}
	}
}

// TestAuditPrintsNoControlCharacter: audit verify names the file it
// verified, escaped, in its report and its warnings.
func TestAuditPrintsNoControlCharacter(t *testing.T) {
	name := filepath.Join(t.TempDir(), "a\nb\x1b[31m")
	if err := os.WriteFile(name, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := run(t, "audit", "verify", name)
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{stdout, stderr} {
		if strings.TrimSuffix(out, "\n") == "" || printable(strings.TrimSuffix(out, "\n")) != strings.TrimSuffix(out, "\n") || !strings.Contains(out, `a\nb\x1b[31m`) {
			t.Errorf("audit verify printed %q; want one line naming the file escaped", out)
		}
	}
}

// TestAuditStderrEchoesNoControlCharacter: the error of each journal
// audit verify names among several, and keygen's note of the file it
// wrote, print a file name escaped.
func TestAuditStderrEchoesNoControlCharacter(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "a\nb\x1b[31m")
	in := newInvestigation(t)
	for _, args := range [][]string{
		{"audit", "verify", name, in.journals[0]},
		{"audit", "keygen", "ops.example.com", "--out", name},
	} {
		_, stderr, _ := run(t, args...)
		if !strings.Contains(stderr, `a\nb\x1b[31m`) || strings.Contains(stderr, "\x1b") {
			t.Errorf("%q printed %q; want the file name escaped, no control character raw", args, stderr)
		}
	}
}

// TestJoinedErrorsStayOneALine: the problems of a policy file, joined
// one a line, are printed one a line still, each escaped on its own.
func TestJoinedErrorsStayOneALine(t *testing.T) {
	name := filepath.Join(t.TempDir(), "p\x1b.yaml")
	if err := os.WriteFile(name, []byte("tools:\n  a:\n    class: bogus\n  b:\n    class: nope\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := run(t, "policy", "check", name)
	if err == nil {
		t.Fatal("policy check succeeded")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "tools.a.class") || !strings.Contains(lines[1], "tools.b.class") {
		t.Fatalf("policy check = %q; want one problem a line", err.Error())
	}
	for _, l := range lines {
		if printable(l) != l || !strings.Contains(l, `p\x1b.yaml`) {
			t.Errorf("line %q; want the file name escaped, no control character raw", l)
		}
	}
}
