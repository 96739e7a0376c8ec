package cli

import (
	"flag"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
)

// docFlag matches the flag a row of docs/cli.md's tables is about.
var docFlag = regexp.MustCompile("^\\| `--([a-z][a-z-]*)")

// TestCLIDocsNameEveryFlag: every flag the proxy, serve and activity
// take has a row in docs/cli.md, and every row names a flag that one of
// the commands takes, so that the reference and -h never drift apart.
func TestCLIDocsNameEveryFlag(t *testing.T) {
	data, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		if m := docFlag.FindStringSubmatch(line); m != nil {
			documented[m[1]] = true
		}
	}
	taken := map[string]bool{}
	add := func(fs *flag.FlagSet) {
		fs.VisitAll(func(f *flag.Flag) { taken[f.Name] = true })
	}
	add(newProxyFlags(io.Discard).fs)
	add(newServeFlags(io.Discard).fs)
	for _, verb := range []string{"list", "show", "resolve", "approve"} {
		fs, err := (&activityArgs{verb: verb}).flags(io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		add(fs)
	}
	for name := range taken {
		if !documented[name] {
			t.Errorf("--%s has no row in docs/cli.md", name)
		}
	}
	for name := range documented {
		// audit's flags are parsed by hand; its usage names them.
		if !taken[name] && !strings.Contains(auditUsage, "--"+name+" ") {
			t.Errorf("docs/cli.md has a row for --%s, which no command takes", name)
		}
	}
}
