package cli

import (
	"bytes"
	"flag"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
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

// TestAuditHelpSaysWhatDocsSay: what audit's flags take, as docs/cli.md
// says it, -h says too.
func TestAuditHelpSaysWhatDocsSay(t *testing.T) {
	data, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	var help bytes.Buffer
	if err := Run(t.Context(), []string{"audit", "-h"}, strings.NewReader(""), &help, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		flag string
		says []string
	}{
		{"--key FILE", []string{"every checkpoint"}},
		{"--since FILE", []string{"audit checkpoint", "a checkpoint line of the journal", "still hold the line it signs", "needs --key", "one FILE"}},
	} {
		row := usageEntry(strings.ReplaceAll(string(data), "`", ""), "| "+tt.flag+" |", "\n")
		entry := usageEntry(help.String(), "  "+tt.flag+" ", "\n  --")
		for _, s := range tt.says {
			if !strings.Contains(strings.ToLower(row), strings.ToLower(s)) {
				t.Errorf("docs/cli.md's row for %s does not say %q: %q", tt.flag, s, row)
			}
			if !strings.Contains(strings.ToLower(entry), strings.ToLower(s)) {
				t.Errorf("audit -h on %s does not say %q: %q", tt.flag, s, entry)
			}
		}
	}
}

// usageEntry returns the text of s from start to the end mark after it,
// with its runs of spaces and newlines made one space.
func usageEntry(s, start, end string) string {
	_, after, _ := strings.Cut(s, start)
	entry, _, _ := strings.Cut(after, end)
	return strings.Join(strings.Fields(entry), " ")
}

// TestCLIDocsGiveEveryDefault: the default column of docs/cli.md's
// tables of the proxy's and serve's flags says what the flag set does
// when the flag is left out.
func TestCLIDocsGiveEveryDefault(t *testing.T) {
	data, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	flags := map[string]*flag.Flag{}
	for _, fs := range []*flag.FlagSet{newProxyFlags(io.Discard).fs, newServeFlags(io.Discard).fs} {
		fs.VisitAll(func(f *flag.Flag) { flags[f.Name] = f })
	}
	inDefaults, checked := false, 0
	for _, line := range strings.Split(string(data), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 {
			inDefaults = false
			continue
		}
		if strings.TrimSpace(cells[1]) == "flag" {
			inDefaults = strings.TrimSpace(cells[2]) == "default"
			continue
		}
		m := docFlag.FindStringSubmatch(line)
		if !inDefaults || m == nil {
			continue
		}
		f := flags[m[1]]
		if f == nil {
			continue // TestCLIDocsNameEveryFlag names it
		}
		checked++
		doc := strings.Trim(strings.TrimSpace(cells[2]), "`")
		if !sameDefault(f, doc) {
			t.Errorf("docs/cli.md gives --%s the default %q; the flag's is %q (%s)", f.Name, doc, f.DefValue, f.Usage)
		}
	}
	if checked < len(flags) {
		t.Errorf("checked the defaults of %d flags of %d; the tables' header moved?", checked, len(flags))
	}
}

// sameDefault reports whether doc, a default column's text, says what
// f does when it is left out.
func sameDefault(f *flag.Flag, doc string) bool {
	if _, single := f.Value.(flag.Getter); !single {
		return doc == "none" // a repeatable flag: no values until given
	}
	switch f.DefValue {
	case "", "false":
		// Off, or a default the flag set cannot hold (the OS user),
		// which its usage then names.
		off := doc == "none" || doc == "off" || doc == "none (off)"
		return off || strings.Contains(f.Usage, doc+" (default)") || strings.Contains(f.Usage, "(default: "+doc+")")
	}
	if d, err := time.ParseDuration(f.DefValue); err == nil {
		dd, err := time.ParseDuration(doc)
		return err == nil && d == dd
	}
	return doc == f.DefValue
}
