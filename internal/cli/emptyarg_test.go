package cli

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

// TestAddrWithoutPort: an address whose port is empty, as
// `--listen 127.0.0.1:$PORT` gives with PORT not set, is refused naming
// the flag, not served on a port picked at random.
func TestAddrWithoutPort(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--listen", "127.0.0.1:", "--", "cat"},
		{"serve", "--listen", ":", "--", "cat"},
		{"serve", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:", "--", "cat"},
		{"--metrics", "127.0.0.1:", "--", "cat"},
		{"--metrics", "[::1]:", "--", "cat"},
	} {
		// Bounded: taken, serve would run until stopped.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		err := Run(ctx, args, strings.NewReader(""), io.Discard, io.Discard)
		cancel()
		flag := args[len(args)-4]
		if err == nil || ExitCode(err) != 2 || !strings.Contains(err.Error(), flag+": ") || !strings.Contains(err.Error(), "has no port") {
			t.Errorf("Run(%q) = %v (exit %d); want exit 2 saying %s has no port", args, err, ExitCode(err), flag)
		}
	}
}

// TestEmptyFileArgument: an empty FILE, as `policy check "$POLICY"`
// gives with POLICY not set, is a usage error that says so, not "open :
// no such file or directory".
func TestEmptyFileArgument(t *testing.T) {
	journal := writeJournal(t, 1)
	for _, args := range [][]string{
		{"policy", "check", ""},
		{"audit", "verify", ""},
		{"audit", "verify", journal, ""},
		{"audit", "checkpoint", ""},
	} {
		_, _, err := run(t, args...)
		if err == nil || ExitCode(err) != 2 || !strings.Contains(err.Error(), "a FILE is empty") {
			t.Errorf("Run(%q) = %v (exit %d); want exit 2 saying a FILE is empty", args, err, ExitCode(err))
		}
	}
}
