package cli

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// An empty value, as an unset shell variable gives, must not turn a flag
// into its default: the default of many is off.
func TestEmptyFlagValues(t *testing.T) {
	tests := []struct {
		flag string
		args []string
	}{
		{"store", []string{"--store", "", "--", "/bin/cat"}},
		{"policy", []string{"--policy", "", "--", "/bin/cat"}},
		{"journal", []string{"--journal=", "--", "/bin/cat"}},
		{"journal-key", []string{"--journal", "j", "--journal-key", "", "--", "/bin/cat"}},
		{"actor", []string{"--actor", "", "--", "/bin/cat"}},
		{"scope", []string{"--scope", "", "--", "/bin/cat"}},
		{"metrics", []string{"--metrics", "", "--", "/bin/cat"}},
		{"upstream", []string{"--upstream", ""}},
		{"auth-token-file", []string{"serve", "--auth-token-file", "", "--", "/bin/cat"}},
		{"store", []string{"serve", "--store", "", "--", "/bin/cat"}},
		{"policy", []string{"policy", "show", "--policy", "", "--", "/bin/cat"}},
		{"key", []string{"audit", "verify", "--key", "", "journal.jsonl"}},
		{"since", []string{"audit", "verify", "journal.jsonl", "--key", "k.pub", "--since", ""}},
		{"out", []string{"audit", "keygen", "name", "--out", ""}},
		{"journal", []string{"activity", "resolve", "exe_1", "--as", "failed", "--store", "sqlite:x.db", "--journal", ""}},
		{"store", []string{"activity", "list", "--store", ""}},
		{"tool", []string{"activity", "list", "--store", "sqlite:x.db", "--tool", ""}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, _, err := run(t, tt.args...)
			if err == nil || ExitCode(err) != 2 {
				t.Fatalf("Run(%q) = %v; want a usage error (exit 2)", tt.args, err)
			}
			if want := "--" + tt.flag + " is given an empty value"; !strings.Contains(err.Error(), want) {
				t.Errorf("Run(%q) = %q, want it to say %q", tt.args, err, want)
			}
		})
	}
}

// TestEmptyRequiredFlag: a flag with no default is not pointed to one.
func TestEmptyRequiredFlag(t *testing.T) {
	_, _, err := run(t, "activity", "approve", "exe_1", "--store", "")
	if err == nil || ExitCode(err) != 2 || !strings.Contains(err.Error(), "--store is given an empty value; it is required") {
		t.Fatalf("activity approve --store \"\" = %v; want a usage error saying --store is required", err)
	}
}

// TestUsageNamesEveryActivityVerb: the top-level usage lists each verb
// that activity takes.
func TestUsageNamesEveryActivityVerb(t *testing.T) {
	_, line, _ := strings.Cut(usage, "mcp-idempotent activity ")
	verbs, _, _ := strings.Cut(line, " ")
	for _, verb := range []string{"list", "show", "resolve", "approve", "deny"} {
		if _, err := parseActivity([]string{verb}); err != nil && strings.Contains(err.Error(), "unknown subcommand") {
			t.Fatalf("activity %s: %v", verb, err)
		}
		if !slices.Contains(strings.Split(verbs, "|"), verb) {
			t.Errorf("the usage's activity line, %q, leaves out %s", verbs, verb)
		}
	}
}

// A flag that holds one value, given twice, is refused: the last would
// win silently, and an operator's `--as failed --as completed` would
// settle an execution as completed. Flags that collect values repeat.
func TestFlagGivenTwice(t *testing.T) {
	tests := []struct {
		flag string
		args []string
	}{
		{"as", []string{"activity", "resolve", "exe_1", "--store", "sqlite:x.db", "--as", "failed", "--as", "completed"}},
		{"store", []string{"--store", "memory", "--store", "sqlite:x.db", "--", "/bin/cat"}},
		{"lease", []string{"--lease", "5s", "--lease=10s", "--", "/bin/cat"}},
		{"shadow", []string{"--shadow", "--shadow=false", "--", "/bin/cat"}},
		{"listen", []string{"serve", "--listen", "127.0.0.1:0", "--listen", "127.0.0.1:1", "--", "/bin/cat"}},
		{"scope", []string{"policy", "show", "--scope", "actor", "--scope", "key", "--", "/bin/cat"}},
		{"key", []string{"audit", "verify", "--key", "a.pub", "j.jsonl", "--key", "b.pub"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, _, err := run(t, tt.args...)
			if err == nil || ExitCode(err) != 2 {
				t.Fatalf("Run(%q) = %v; want a usage error (exit 2)", tt.args, err)
			}
			if want := "--" + tt.flag + " is given twice"; !strings.Contains(err.Error(), want) {
				t.Errorf("Run(%q) = %q, want it to say %q", tt.args, err, want)
			}
		})
	}
}

// TestRepeatableFlags: the flags that collect values still take several.
func TestRepeatableFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--upstream", "http://127.0.0.1:1/mcp", "--upstream-header", "A: b", "--upstream-header", "C: d", "--metrics", "bad"},
		{"serve", "--allow-origin", "https://a.example", "--allow-origin", "https://b.example", "--allow-host", "a", "--allow-host", "b", "--listen", "bad", "--", "/bin/cat"},
	} {
		_, _, err := run(t, args...)
		if err == nil || strings.Contains(err.Error(), "twice") {
			t.Errorf("Run(%q) = %v; want the repeated flags taken, and the bad address refused", args, err)
		}
	}
}

// A value the flag package cannot parse is explained: a duration needs a
// unit, which "5" lacks.
func TestUnparsableFlagValues(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--lease", "5", "--", "/bin/cat"}, `--lease: "5" is not a duration`},
		{[]string{"--lease", "9999999h", "--", "/bin/cat"}, `--lease: "9999999h" is too long`},
		{[]string{"serve", "--idle-timeout", "10", "--", "/bin/cat"}, `--idle-timeout: "10" is not a duration`},
		{[]string{"--max-restarts", "many", "--", "/bin/cat"}, `--max-restarts: "many" is not a whole number`},
		{[]string{"serve", "--json-response=maybe", "--", "/bin/cat"}, `--json-response: "maybe" is not true or false`},
		{[]string{"activity", "list", "--store", "sqlite:x.db", "--limit", "1e9"}, `--limit: "1e9" is not a whole number`},
	}
	for _, tt := range tests {
		_, _, err := run(t, tt.args...)
		if err == nil || ExitCode(err) != 2 || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Run(%q) = %v; want a usage error saying %q", tt.args, err, tt.want)
		}
	}
}

// A lease whose end the stores cannot hold is refused: it would read as
// lapsed, and another process take over an execution still running.
func TestLeaseBounds(t *testing.T) {
	for _, tt := range []struct{ lease, want string }{
		{"500ms", "--lease: 500ms is too short"},
		{"169h", "--lease: 169h0m0s is too long; it must be at most 168h0m0s"},
		{"2200000h", "--lease: 2200000h0m0s is too long"},
	} {
		_, _, err := run(t, "--lease", tt.lease, "--", "/bin/cat")
		if err == nil || ExitCode(err) != 2 || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Run(--lease %s) = %v; want a usage error saying %q", tt.lease, err, tt.want)
		}
	}
}

// A tool that asks for approval is refused at start when --scope key
// gives it its scope, as the policy file's own scope key is: a call
// without a client key would run unrecorded, where no approval is kept.
func TestScopeKeyWithApproval(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	asks := write("asks.yaml", "tools:\n  charge: {approval: each}\n  \"send_*\": {approval: session}\n  read: {}\n")
	_, _, err := run(t, "--policy", asks, "--scope", "key", "--", "/bin/cat")
	if err == nil || ExitCode(err) != 2 || !strings.Contains(err.Error(), "--scope key: charge, send_* asks for approval") {
		t.Errorf("Run = %v; want --scope key refused for the tools that ask", err)
	}
	// A scope the file gives wins over the flag's.
	own := write("own.yaml", "defaults:\n  scope: actor\ntools:\n  charge: {approval: each}\n")
	scoped := write("scoped.yaml", "tools:\n  charge: {approval: each, scope: session}\n")
	for _, args := range [][]string{
		{"--policy", own, "--scope", "key", "--", "/bin/cat"},
		{"--policy", scoped, "--scope", "key", "--", "/bin/cat"},
		{"--policy", asks, "--scope", "actor", "--", "/bin/cat"},
		{"--policy", asks, "--scope", "key", "--shadow", "--", "/bin/cat"},
	} {
		if _, _, err := run(t, args...); err != nil {
			t.Errorf("Run(%q) = %v; want it to start", args, err)
		}
	}
}

// An actor that is not UTF-8 is refused: in the fingerprint, each byte
// that is not would become U+FFFD, and two such actors share executions.
func TestActorNotUTF8(t *testing.T) {
	_, _, err := run(t, "--actor", "\xffalice", "--", "/bin/cat")
	if err == nil || ExitCode(err) != 2 || !strings.Contains(err.Error(), `--actor: "\xffalice" is not UTF-8 text`) {
		t.Errorf("Run(--actor \\xffalice) = %v; want a usage error naming --actor", err)
	}
}

// TestEmptySecret: MCP_IDEMPOTENT_SECRET set to "", as an unset shell
// variable expands to, is refused like an empty flag value: taken for
// unset, it would key this proxy otherwise than those sharing its store.
func TestEmptySecret(t *testing.T) {
	t.Setenv("MCP_IDEMPOTENT_SECRET", "")
	_, _, err := run(t, "--", "/bin/cat")
	if err == nil || !strings.Contains(err.Error(), "MCP_IDEMPOTENT_SECRET is set but empty") {
		t.Fatalf("Run with MCP_IDEMPOTENT_SECRET= = %v; want it refused as empty", err)
	}
}

// TestSecretWhiteSpaceWarned: an MCP_IDEMPOTENT_SECRET that begins or
// ends with white space (a newline an env file kept) is used as is, and
// said at start: a proxy given it without the newline would match none
// of this one's calls. One without is not warned of.
func TestSecretWhiteSpaceWarned(t *testing.T) {
	const secret = "0123456789abcdef"
	for _, s := range []string{secret + "\n", secret + "\r\n", " " + secret, "\t" + secret, secret} {
		t.Setenv("MCP_IDEMPOTENT_SECRET", s)
		_, stderr, err := run(t, "--", "/bin/cat")
		if err != nil {
			t.Fatalf("Run with MCP_IDEMPOTENT_SECRET=%q = %v; want it to start\n%s", s, err, stderr)
		}
		warned := strings.Contains(stderr, "level=WARN") &&
			strings.Contains(stderr, "MCP_IDEMPOTENT_SECRET begins or ends with white space")
		if want := s != secret; warned != want {
			t.Errorf("MCP_IDEMPOTENT_SECRET=%q: warned %v, want %v; stderr:\n%s", s, warned, want, stderr)
		}
		if strings.Contains(stderr, secret) {
			t.Errorf("MCP_IDEMPOTENT_SECRET=%q: the log shows the secret:\n%s", s, stderr)
		}
	}
}

// TestActivityHelpShowsEachVerbsFlags: `activity -h` gives each verb's
// flags with their meanings and defaults, as the proxy's -h does, so
// that --limit's default or what --as takes is found without the docs.
func TestActivityHelpShowsEachVerbsFlags(t *testing.T) {
	help := commandUsage("activity")
	if !strings.Contains(help, "(default 100)") {
		t.Errorf("activity -h does not give --limit's default:\n%s", help)
	}
	for _, verb := range []string{"list", "show", "resolve", "approve|deny"} {
		_, section, ok := strings.Cut(help, "Flags of activity "+verb+":\n")
		if !ok {
			t.Errorf("activity -h has no flags of %s:\n%s", verb, help)
			continue
		}
		section, _, _ = strings.Cut(section, "\n\n")
		first, _, _ := strings.Cut(verb, "|")
		fs, err := (&activityArgs{verb: first}).flags(io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		fs.VisitAll(func(f *flag.Flag) {
			if !strings.Contains(section, "  -"+f.Name+" ") && !strings.Contains(section, "  -"+f.Name+"\n") {
				t.Errorf("activity -h leaves out %s's --%s", verb, f.Name)
			}
		})
	}
}

// TestBooleanFlagGivenAValueApart: a boolean flag takes its value only
// after =: in `--shadow false -- node server.js` the flags end at
// "false", which the proxy would run as the upstream command, with
// shadow mode on. Refused, naming the flag; after a --, or with =, the
// word is the command's.
func TestBooleanFlagGivenAValueApart(t *testing.T) {
	for _, args := range [][]string{
		{"--shadow", "false", "--", "/bin/cat"},
		{"--store", "memory", "-shadow", "true", "/bin/cat"},
		{"serve", "--json-response", "false", "--", "/bin/cat"},
		{"serve", "--shadow", "0", "--upstream", "http://127.0.0.1:1/mcp"},
		// Flags and arguments mix here: the word would be an argument.
		{"activity", "list", "--store", "sqlite:x.db", "--json", "false"},
		{"activity", "list", "--awaiting", "False", "--store", "sqlite:x.db"},
		{"activity", "show", "exe_1", "--json", "true", "--store", "sqlite:x.db"},
		{"activity", "approve", "--store", "sqlite:x.db", "--json", "0"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			_, _, err := run(t, args...)
			if err == nil || ExitCode(err) != 2 || !strings.Contains(err.Error(), "takes its value after =, as --") {
				t.Fatalf("Run(%q) = %v; want a usage error (exit 2) naming the flag and the = it needs", args, err)
			}
		})
	}
	for _, args := range [][]string{
		{"--shadow", "--", "false"},
		{"--shadow=false", "--", "false"},
		{"--actor", "--shadow", "false"},
		{"activity", "show", "--json", "exe_1", "--store", "sqlite:x.db"},
		{"activity", "show", "--json=false", "true", "--store", "sqlite:x.db"},
	} {
		_, _, err := run(t, args...)
		if err != nil && strings.Contains(err.Error(), "takes its value after =") {
			t.Errorf("Run(%q) = %v; want the word taken as the command, or an argument", args, err)
		}
	}
}

// TestUnknownFlagNamesTheOneMeant: a flag a typo away from one the
// command takes is refused with that one named, as is one of serve's
// given to the stdio proxy; a flag near none is refused alone.
func TestUnknownFlagNamesTheOneMeant(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--leas", "1s", "--", "/bin/cat"}, "-leas; did you mean --lease?"},
		{[]string{"--store", "memory", "-polcy=p.yaml", "--", "/bin/cat"}, "did you mean --policy?"},
		{[]string{"--listen", "127.0.0.1:0", "--", "/bin/cat"}, "--listen is a flag of serve: mcp-idempotent serve --listen"},
		{[]string{"serve", "--lisen", "127.0.0.1:0", "--", "/bin/cat"}, "did you mean --listen?"},
		{[]string{"activity", "list", "--stor", "sqlite:x.db"}, "did you mean --store?"},
		{[]string{"activity", "show", "exe_1", "--jsn"}, "did you mean --json?"},
	} {
		_, _, err := run(t, tt.args...)
		if err == nil || ExitCode(err) != 2 || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Run(%q) = %v; want a usage error saying %q", tt.args, err, tt.want)
		}
	}
	_, _, err := run(t, "--bogus", "--", "/bin/cat")
	if err == nil || ExitCode(err) != 2 || strings.Contains(err.Error(), "did you mean") || strings.Contains(err.Error(), "serve") {
		t.Errorf("Run(--bogus) = %v; want a usage error naming no other flag", err)
	}
}

// TestRestartsWithoutEndStart: a --max-restarts that no --restart-window
// can see exceeded, with the waits before restarts, asks for restarts
// without end. It starts, as it did, and says that no crash loop will
// stop the upstream.
func TestRestartsWithoutEndStart(t *testing.T) {
	for _, args := range [][]string{
		{"--max-restarts", "20"},
		{"--max-restarts", "9223372036854775807"},
		{"--restart-window", "2s"},
	} {
		_, stderr, err := run(t, append(args, "--", "/bin/cat")...)
		if err != nil {
			t.Errorf("%v: %v; want it to start", args, err)
		}
		if !strings.Contains(stderr, "never stopped as a crash loop") {
			t.Errorf("%v: stderr %q; want a warning that no crash loop is seen", args, stderr)
		}
	}
	if _, stderr, err := run(t, "--", "/bin/cat"); err != nil || strings.Contains(stderr, "crash loop") {
		t.Errorf("the defaults: %v, stderr %q; want no warning", err, stderr)
	}
}
