package skipnote

import (
	"runtime"
	"strings"
	"testing"
)

// TestReportOneLinePerGroup: each skipped group is one line, in order,
// naming the package, the group and why, however many lines why had.
func TestReportOneLinePerGroup(t *testing.T) {
	var b strings.Builder
	report(&b, "test/e2e", map[string]string{
		"npm peer":     "no node_modules; run: (cd test/npm && npm ci)",
		"Docker image": "no Docker engine answers\nCannot connect to the Docker daemon",
	})
	want := "test/e2e: skipped the Docker image tests: no Docker engine answers Cannot connect to the Docker daemon\n" +
		"test/e2e: skipped the npm peer tests: no node_modules; run: (cd test/npm && npm ci)\n"
	if b.String() != want {
		t.Errorf("report wrote:\n%s\nwant:\n%s", b.String(), want)
	}
}

// fakeTB records how a test ended, to see what Unavailable does.
type fakeTB struct {
	testing.TB
	fatal, skip string
}

func (f *fakeTB) Helper() {}

// Fatal and Skip end the goroutine, as testing's own do.
func (f *fakeTB) Fatal(args ...any) { f.fatal = args[0].(string); runtime.Goexit() }
func (f *fakeTB) Skip(args ...any)  { f.skip = args[0].(string); runtime.Goexit() }

// unavailable calls Unavailable on a goroutine of its own, which its
// ending ends, and returns how tb ended.
func unavailable(group, why string) *fakeTB {
	tb := new(fakeTB)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Unavailable(tb, group, why)
	}()
	<-done
	return tb
}

// TestUnavailable: a missing peer fails the test under
// MCPI_REQUIRE_SERVICES=1, and otherwise skips it and is reported.
func TestUnavailable(t *testing.T) {
	t.Setenv("MCPI_REQUIRE_SERVICES", "1")
	required := unavailable("Redis store", "no Redis")
	if required.fatal != "no Redis" || required.skip != "" {
		t.Errorf("with services required: failed %q, skipped %q; want it failed", required.fatal, required.skip)
	}
	t.Setenv("MCPI_REQUIRE_SERVICES", "")
	optional := unavailable("Redis store", "no Redis")
	mu.Lock()
	why := groups["Redis store"]
	mu.Unlock()
	if optional.skip != "no Redis" || optional.fatal != "" || why != "no Redis" {
		t.Errorf("without: failed %q, skipped %q, noted %q; want it skipped and noted", optional.fatal, optional.skip, why)
	}
}
