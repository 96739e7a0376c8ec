package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTypoedCommandSuggested: a mistyped command name, taken as the
// upstream command and found nowhere, is answered with the command
// likely meant, not only with "executable file not found".
func TestTypoedCommandSuggested(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no program of any of these names
	tests := []struct {
		args []string
		want string // "" for no suggestion
	}{
		{[]string{"serv", "--listen", "127.0.0.1:0"}, "mcp-idempotent serve"},
		{[]string{"activty", "list"}, "mcp-idempotent activity"},
		{[]string{"Audti", "verify"}, "mcp-idempotent audit"},
		{[]string{"polcy", "check", "p.yaml"}, "mcp-idempotent policy"},
		{[]string{"verison"}, "mcp-idempotent version"},
		{[]string{"dmeo"}, "mcp-idempotent demo"},
		// A program that is simply not installed, a letter from demo.
		{[]string{"deno", "run", "server.ts"}, ""},
		{[]string{"python3", "server.py"}, ""},
		// After a flag or --, the word was given as a command.
		{[]string{"--log-level", "error", "serv"}, ""},
		{[]string{"--", "serv"}, ""},
		{[]string{"./serv"}, ""},
	}
	for _, tt := range tests {
		_, _, err := run(t, tt.args...)
		if err == nil || !strings.Contains(err.Error(), "cannot start") {
			t.Errorf("%q: %v; want the command refused as unable to start", tt.args, err)
			continue
		}
		got := err.Error()
		if tt.want == "" && strings.Contains(got, "did you mean") {
			t.Errorf("%q: %v; want no suggestion", tt.args, err)
		}
		if tt.want != "" && !strings.Contains(got, `did you mean "`+tt.want+`"?`) {
			t.Errorf("%q: %v; want it to suggest %q", tt.args, err, tt.want)
		}
	}
}

// TestCommandAfterFlags: a command name given after the proxy's flags,
// taken as the upstream command and found nowhere, is answered with
// where its flags go, not only with "executable file not found". After
// --, the word was given as a command.
func TestCommandAfterFlags(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no program of any of these names
	tests := []struct {
		args []string
		want string // "" for no hint
	}{
		{[]string{"--log-level", "debug", "serve", "--listen", "127.0.0.1:0", "--", "cat"}, "serve is a command of mcp-idempotent: give its flags after it"},
		{[]string{"--shadow", "activity", "list"}, "activity is a command of mcp-idempotent"},
		{[]string{"--store", "memory", "policy", "check", "p.yaml"}, "policy is a command of mcp-idempotent"},
		{[]string{"--log-level", "debug", "--", "serve"}, ""},
		{[]string{"--log-level", "debug", "serv"}, ""},
	}
	for _, tt := range tests {
		_, _, err := run(t, tt.args...)
		if err == nil || !strings.Contains(err.Error(), "cannot start") {
			t.Errorf("%q: %v; want the command refused as unable to start", tt.args, err)
			continue
		}
		got := err.Error()
		if tt.want == "" && strings.Contains(got, "is a command") {
			t.Errorf("%q: %v; want no hint", tt.args, err)
		}
		if tt.want != "" && !strings.Contains(got, tt.want) {
			t.Errorf("%q: %v; want it to say %q", tt.args, err, tt.want)
		}
		if strings.Contains(got, "memory") {
			t.Errorf("%q: %v; want no flag value shown", tt.args, err)
		}
	}
}

// TestTypoedNameOfAProgramRuns: a program that is named like a mistyped
// command, and is found, runs as the upstream.
func TestTypoedNameOfAProgramRuns(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "serv"), []byte("#!/bin/sh\nexec cat\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	if _, stderr, err := run(t, "serv"); err != nil {
		t.Errorf("serv, a program on the PATH: %v; want it run\n%s", err, stderr)
	}
}
