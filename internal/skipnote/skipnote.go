// Package skipnote tells the person running the tests which groups of
// them did not run for want of a peer or a service. `go test` prints a
// passing package's output only with -v, so a skip says nothing in a
// plain `go test ./...`, and an "ok" hides tests that never ran. Report
// writes one line per skipped group to the terminal itself, which go
// test does not capture; with no terminal (CI, a pipe) it writes nothing,
// and there MCPI_REQUIRE_SERVICES=1 makes a missing peer fail instead.
//
// It is imported by tests only.
package skipnote

import (
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
)

var (
	mu     sync.Mutex
	groups = map[string]string{} // group -> why its first test was skipped
)

// Required reports whether MCPI_REQUIRE_SERVICES=1: a missing peer or
// service fails the test rather than skipping it.
func Required() bool { return os.Getenv("MCPI_REQUIRE_SERVICES") == "1" }

// Unavailable ends tb for want of what group needs, why saying what is
// missing and how to get it: it fails under MCPI_REQUIRE_SERVICES=1,
// else skips, and Report names the group.
func Unavailable(tb testing.TB, group, why string) {
	tb.Helper()
	if Required() {
		tb.Fatal(why)
	}
	Skip(tb, group, why)
}

// Skip skips tb for why, and Report names group.
func Skip(tb testing.TB, group, why string) {
	tb.Helper()
	Note(group, why)
	tb.Skip(why)
}

// Note records that tests of group did not run, for why, without
// skipping the caller (a test that runs on the stores it has).
func Note(group, why string) {
	mu.Lock()
	defer mu.Unlock()
	if _, ok := groups[group]; !ok {
		groups[group] = why
	}
}

// Report writes, to the terminal if there is one and -v is off, a line
// per group whose tests were skipped, naming pkg. TestMain calls it
// after m.Run.
func Report(pkg string) {
	mu.Lock()
	defer mu.Unlock()
	if len(groups) == 0 || testing.Verbose() {
		return
	}
	tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0)
	if err != nil {
		return // no terminal: nobody to tell, and the output is captured
	}
	defer tty.Close()
	report(tty, pkg, groups)
}

// report writes Report's lines to w, a group a line, in order.
func report(w io.Writer, pkg string, groups map[string]string) {
	for _, g := range slices.Sorted(maps.Keys(groups)) {
		why := strings.Join(strings.Fields(groups[g]), " ") // one line each
		fmt.Fprintf(w, "%s: skipped the %s tests: %s\n", pkg, g, why)
	}
}
