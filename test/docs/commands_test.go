package docs

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// boolFlags take no value apart from them (cli.md: "a boolean flag
// takes a value only after =").
var boolFlags = []string{"--shadow", "--json", "--awaiting", "--json-response", "--help", "-h"}

// everyCommand lists the flags every command takes.
var everyCommand = []string{"--help", "-h"}

// flagRow matches a row of a flag table of docs/cli.md: the flag, and
// the second cell (a default, or the commands it is of).
var flagRow = regexp.MustCompile("^\\| `(--[a-z-]+)[^`]*` \\| ([^|]*) \\|")

// of matches the commands a row of the activity and audit tables is
// of, as `list` or `resolve`, `approve`, `deny`.
var of = regexp.MustCompile("`([a-z]+)`")

// cliFlags returns the flags docs/cli.md gives each command, keyed as
// "" (the stdio proxy), "serve", "policy", or "activity list",
// "audit verify" and so on. internal/cli checks those tables against
// the flags the commands take.
func cliFlags(t *testing.T) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	verbs := map[string][]string{
		"activity": {"list", "show", "resolve", "approve", "deny"},
		"audit":    {"verify", "checkpoint", "keygen"},
	}
	flags := map[string][]string{"policy": {"--policy", "--scope"}}
	section := ""
	for _, line := range strings.Split(string(data), "\n") {
		if s, ok := strings.CutPrefix(line, "## "); ok {
			section = s
			continue
		}
		m := flagRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		switch section {
		case "Flags":
			flags[""] = append(flags[""], m[1])
			flags["serve"] = append(flags["serve"], m[1])
		case "serve":
			flags["serve"] = append(flags["serve"], m[1])
		case "activity", "audit":
			for _, v := range verbs[section] {
				if strings.TrimSpace(m[2]) == "all" || slices.Contains(of.FindAllString(m[2], -1), "`"+v+"`") {
					key := section + " " + v
					flags[key] = append(flags[key], m[1])
				}
			}
		}
	}
	if len(flags[""]) == 0 || len(flags["serve"]) == len(flags[""]) || len(flags["activity list"]) == 0 || len(flags["audit verify"]) == 0 {
		t.Fatalf("docs/cli.md: found too few flags in its tables (%v); its sections moved?", flags)
	}
	return flags
}

// words splits a shell command line into words, as sh does for quotes;
// a placeholder's brackets and parentheses, as in [--key FILE], are
// dropped.
func words(line string) []string {
	var out []string
	var w strings.Builder
	in, quote := false, rune(0)
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				out = append(out, w.String())
				w.Reset()
				in = false
			}
		case strings.ContainsRune("[]()", r):
		default:
			w.WriteRune(r)
			in = true
		}
	}
	if in {
		out = append(out, w.String())
	}
	return out
}

// checkCommand checks the flags of one mcp-idempotent command line,
// args being the words after "mcp-idempotent": each flag must be one its
// command takes. It returns what is wrong, or "".
func checkCommand(flags map[string][]string, args []string) string {
	cmd := ""
	if len(args) > 0 {
		switch args[0] {
		case "serve", "policy":
			cmd, args = args[0], args[1:]
		case "demo", "version":
			return ""
		case "activity", "audit":
			if len(args) < 2 {
				return ""
			}
			verb, _, _ := strings.Cut(args[1], "|") // list|show|...
			cmd, args = args[0]+" "+verb, args[2:]
		}
	}
	upstream := cmd == "" || cmd == "serve" || cmd == "policy"
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--", a == "|", a == ">", a == ">>":
			return "" // the upstream command, or the shell's
		case strings.HasPrefix(a, "-"):
			name, _, hasValue := strings.Cut(a, "=")
			if !slices.Contains(flags[cmd], name) && !slices.Contains(everyCommand, name) {
				return strings.TrimSpace("mcp-idempotent "+cmd) + " takes no flag " + name + " (docs/cli.md)"
			}
			if !hasValue && !slices.Contains(boolFlags, name) {
				i++ // its value
			}
		case upstream && cmd != "policy":
			return "" // the upstream command: the rest is its own
		}
	}
	return ""
}

// TestCommandFlags checks that each mcp-idempotent command line in the
// README's and docs' code blocks, and in a client configuration's JSON
// ("command": "mcp-idempotent"), gives only flags its command takes, as
// docs/cli.md lists them, so that a command a reader pastes does not stop
// at a misspelt or misplaced flag.
func TestCommandFlags(t *testing.T) {
	flags := cliFlags(t)
	found := 0
	for _, page := range pages(t) {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, page)
		lines := strings.Split(string(data), "\n")
		in, lang, start := false, "", 0
		var block []string
		for n, line := range lines {
			trimmed := strings.TrimSpace(line)
			if strings.HasPrefix(trimmed, "```") {
				if !in {
					in, lang, start, block = true, strings.TrimPrefix(trimmed, "```"), n+2, nil
					continue
				}
				in = false
				found += checkBlock(t, flags, rel, start, lang, block)
				continue
			}
			if in {
				block = append(block, line)
			}
		}
	}
	for _, page := range pages(t) {
		rel, _ := filepath.Rel(root, page)
		prose(t, page, func(n int, line string) {
			for _, m := range inlineCommand.FindAllStringSubmatch(line, -1) {
				found++
				if msg := checkCommand(flags, words(m[1])); msg != "" {
					t.Errorf("%s:%d: %s: `mcp-idempotent %s`", rel, n, msg, m[1])
				}
			}
		})
	}
	if found == 0 {
		t.Error("found no mcp-idempotent command lines in the pages")
	}
}

// inlineCommand matches a command line in a code span of prose.
var inlineCommand = regexp.MustCompile("`mcp-idempotent ([^`]*)`")

// checkBlock checks the command lines of one code block, the first at
// line start of page, and returns how many it found.
func checkBlock(t *testing.T, flags map[string][]string, page string, start int, lang string, block []string) int {
	t.Helper()
	found := 0
	if lang == "json" {
		var cfg map[string]any
		if json.Unmarshal([]byte(strings.Join(block, "\n")), &cfg) != nil {
			return 0 // a fragment; TestJSONExamples checks it parses
		}
		for _, c := range configs(cfg) {
			found++
			if msg := checkCommand(flags, c); msg != "" {
				t.Errorf("%s:%d: %s", page, start, msg)
			}
		}
		return found
	}
	// Join the lines a trailing \ continues.
	text := strings.ReplaceAll(strings.Join(block, "\n"), "\\\n", " ")
	for i, line := range strings.Split(text, "\n") {
		line, _, _ = strings.Cut(line, " #") // a comment
		w := words(line)
		for j, word := range w {
			// At the line's start, or after claude's --, npx, a cron
			// schedule or an environment variable.
			if word != "mcp-idempotent" || (j > 0 && w[j-1] != "--" && w[j-1] != "npx" && !strings.HasSuffix(w[j-1], "*") && !strings.Contains(w[j-1], "=")) {
				continue
			}
			found++
			if msg := checkCommand(flags, w[j+1:]); msg != "" {
				t.Errorf("%s:%d: %s:\n%s", page, start+i, msg, line)
			}
			break
		}
	}
	return found
}

// configs returns the args of each server in a client configuration
// that runs mcp-idempotent, as its command or through npx:
// {"command": ..., "args": [...]} at the top, or under mcpServers or
// servers.
func configs(cfg map[string]any) [][]string {
	var out [][]string
	visit := func(s map[string]any) {
		var args []string
		list, _ := s["args"].([]any)
		for _, a := range list {
			str, _ := a.(string)
			args = append(args, str)
		}
		switch s["command"] {
		case "mcp-idempotent":
			out = append(out, args)
		case "npx":
			if i := slices.Index(args, "mcp-idempotent"); i >= 0 {
				out = append(out, args[i+1:])
			}
		}
	}
	visit(cfg)
	for _, key := range []string{"mcpServers", "servers"} {
		servers, _ := cfg[key].(map[string]any)
		for _, s := range servers {
			if s, ok := s.(map[string]any); ok {
				visit(s)
			}
		}
	}
	return out
}
