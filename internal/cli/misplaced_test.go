package cli

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestMisplacedFlagWarned: a proxy flag after an upstream command given
// without -- goes to the upstream, and the proxy says so at start,
// naming the flag but not its value.
func TestMisplacedFlagWarned(t *testing.T) {
	db := filepath.Join(t.TempDir(), "x.db")
	upstream := []string{"sh", "-c", "exec cat", "--store=sqlite:" + db, "--policy", "p.yaml", "--log-level", "debug"}
	_, stderr, err := run(t, upstream...)
	if err != nil {
		t.Fatalf("the proxy: %v\n%s", err, stderr)
	}
	for _, flag := range []string{"--store", "--policy"} {
		if !strings.Contains(stderr, "flag="+flag+" ") || !strings.Contains(stderr, "goes to the upstream, not to the proxy") {
			t.Errorf("no warning naming %s after the command; stderr:\n%s", flag, stderr)
		}
	}
	if strings.Contains(stderr, "flag=--log-level") || strings.Contains(stderr, db) {
		t.Errorf("the warning names --log-level, or shows a value; stderr:\n%s", stderr)
	}
	if _, err := os.Stat(db); err == nil {
		t.Errorf("%s was made: the proxy took --store after the command", db)
	}

	// A -- says the command, and all after it, are meant as given.
	for _, args := range [][]string{
		append([]string{"--"}, upstream...),
		append([]string{"--log-level", "info", "--"}, upstream...),
		{"sh", "-c", "exec cat", "--", "--store", "sqlite:" + db},
	} {
		if _, stderr, err := run(t, args...); err != nil || strings.Contains(stderr, "goes to the upstream") {
			t.Errorf("%q: %v; want no warning; stderr:\n%s", args, err, stderr)
		}
	}
}

// TestMisplacedServeFlags: serve's own flags are looked for after its
// command too, and only the flags of the command run.
func TestMisplacedServeFlags(t *testing.T) {
	args := []string{"--listen", "127.0.0.1:0", "node", "srv.js", "--auth-token-file", "t", "-store", "x", "--listen=:9"}
	got := misplacedFlags(newServeFlags(io.Discard).fs, args, args[2:])
	if want := []string{"--auth-token-file", "--store", "--listen"}; !slices.Equal(got, want) {
		t.Errorf("serve: misplacedFlags = %q; want %q", got, want)
	}
	got = misplacedFlags(newProxyFlags(io.Discard).fs, args[2:], args[2:])
	if want := []string{"--store"}; !slices.Equal(got, want) {
		t.Errorf("proxy: misplacedFlags = %q; want %q", got, want)
	}
}
