package cli

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/transport/stdio"
)

// capableServer is an upstream in sh that lists, besides plain_tool, a
// tool for each capability the client's initialize declared, as servers
// that make requests of the client do (server-everything's sampling and
// elicitation tools).
var capableServer = []string{"/bin/sh", "-c", `caps=
while IFS= read -r l; do
id=$(printf '%s' "$l" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
case "$l" in
*'"method":"initialize"'*)
  for c in sampling elicitation roots tasks; do case "$l" in *"\"$c\""*) caps="$caps $c";; esac; done
  printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"sh","version":"1"}}}\n' "$id";;
*'"method":"tools/list"'*)
  tools='{"name":"plain_tool","inputSchema":{"type":"object"}}'
  for c in $caps; do tools="$tools"',{"name":"needs_'"$c"'","inputSchema":{"type":"object"}}'; done
  printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[%s]}}\n' "$id" "$tools";;
esac; done`}

// TestPolicyShowListsWhatACapableClientSees: policy show lists the tools a
// server offers only to a client that can answer its requests. A client
// that declares nothing would not see them, and the footer would leave
// out side effects that no rule covers.
func TestPolicyShowListsWhatACapableClientSees(t *testing.T) {
	stdout, stderr, err := run(t, append([]string{"policy", "show", "--"}, capableServer...)...)
	if err != nil {
		t.Fatalf("policy show: %v\n%s", err, stderr)
	}
	for _, tool := range []string{"plain_tool", "needs_sampling", "needs_elicitation", "needs_roots", "needs_tasks"} {
		if !strings.Contains(stdout, tool+" ") {
			t.Errorf("policy show does not list %s:\n%s", tool, stdout)
		}
	}
	if !strings.Contains(stdout, "5 tools with effects") {
		t.Errorf("policy show's footer does not count the 5 side effects:\n%s", stdout)
	}
}

// TestPolicyShowFooterWithFileDefaults: a file's defaults apply to a tool
// no rule names, so the footer must not say such a tool runs on its
// annotations alone; it says no rule of its own covers it.
func TestPolicyShowFooterWithFileDefaults(t *testing.T) {
	file := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(file, []byte("defaults:\n  retention: 1h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := run(t, append([]string{"policy", "show", "--policy", file, "--"}, capableServer...)...)
	if err != nil {
		t.Fatalf("policy show: %v\n%s", err, stderr)
	}
	if strings.Contains(stdout, "annotation defaults only") || !strings.Contains(stdout, "5 tools with effects have no rule of their own") {
		t.Errorf("policy show's footer, with the file's defaults applied:\n%s\nwant it to say the 5 tools have no rule of their own", stdout)
	}
}

// TestPolicyShowWarnsOfItsFlagsAfterTheCommand: a --policy after an
// upstream command given without -- goes to the server, and policy show
// shows every tool without the file: it says so, as the proxy does.
func TestPolicyShowWarnsOfItsFlagsAfterTheCommand(t *testing.T) {
	file := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(file, []byte("tools:\n  plain_tool: {class: read_only}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"policy", "show"}, capableServer...)
	_, stderr, err := run(t, append(args, "sh", "--policy", file)...)
	if err != nil {
		t.Fatalf("policy show: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "warning: --policy after the upstream command goes to the upstream") {
		t.Errorf("policy show gave no warning of --policy after the command; stderr:\n%s", stderr)
	}
	// After --, the flag is the server's: no warning.
	args = append([]string{"policy", "show", "--"}, capableServer...)
	if _, stderr, _ = run(t, append(args, "sh", "--policy", file)...); strings.Contains(stderr, "warning") {
		t.Errorf("policy show warned of a flag after --:\n%s", stderr)
	}
}

// TestPolicyShowSaysHowLongItWaited: an upstream that never answers ends
// policy show with an error saying how long it waited, not "context
// deadline exceeded".
func TestPolicyShowSaysHowLongItWaited(t *testing.T) {
	defer func(d time.Duration) { listTimeout = d }(listTimeout)
	listTimeout = 50 * time.Millisecond
	_, _, err := run(t, "policy", "show", "--", "/bin/sh", "-c", "while read -r l; do :; done")
	if err == nil || !strings.Contains(err.Error(), "initialize: no answer from the upstream: none came within 50ms") {
		t.Fatalf("policy show -- an upstream that never answers = %v; want it to say it waited 50ms", err)
	}
}

// TestPolicyShowSaysHowTheUpstreamEnded: an upstream that exits before
// it answers (a missing variable, a bad flag) ends policy show with an
// error naming its exit status and the end of its stderr.
func TestPolicyShowSaysHowTheUpstreamEnded(t *testing.T) {
	_, _, err := run(t, "policy", "show", "--", "/bin/sh", "-c", "echo 'API_KEY is not set' >&2; exit 7")
	want := "initialize: the upstream closed before answering: it exited with status 7; its stderr ended: API_KEY is not set"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("policy show -- an upstream that exits at start = %v; want %q", err, want)
	}
}

// TestPolicyShowSaysHowTheUpstreamEndedBeforeItWasAsked: an upstream
// that exited before policy show wrote to it fails the write with a
// broken pipe; the error still names its exit status and stderr.
func TestPolicyShowSaysHowTheUpstreamEndedBeforeItWasAsked(t *testing.T) {
	child, err := stdio.Start([]string{"/bin/sh", "-c", "echo 'API_KEY is not set' >&2; exit 7"}, io.Discard, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer stopChild(context.Background(), child)
	<-child.Done()
	_, err = newLister(child).call(context.Background(), "initialize", map[string]any{})
	want := "initialize: the upstream closed before answering: it exited with status 7; its stderr ended: API_KEY is not set"
	if err == nil || err.Error() != want {
		t.Fatalf("call to an upstream that exited = %v; want %q", err, want)
	}
}

// oddNameServer lists one tool whose name holds a line break and a tab,
// as an upstream may name it.
var oddNameServer = []string{"/bin/sh", "-c", `while IFS= read -r l; do
id=$(printf '%s' "$l" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
case "$l" in
*'"method":"initialize"'*)
  printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"sh","version":"1"}}}\n' "$id";;
*'"method":"tools/list"'*)
  printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[%s]}}\n' "$id" '{"name":"wipe\nforged_tool\tread_only","inputSchema":{"type":"object"}}';;
esac; done`}

// TestPolicyShowQuotesOddToolNames: a tool name is the upstream's, and a
// line break in it would print a line of the table the upstream made up,
// such as a side effect shown as read-only. It is printed quoted.
func TestPolicyShowQuotesOddToolNames(t *testing.T) {
	stdout, stderr, err := run(t, append([]string{"policy", "show", "--"}, oddNameServer...)...)
	if err != nil {
		t.Fatalf("policy show: %v\n%s", err, stderr)
	}
	for _, line := range strings.Split(stdout, "\n") {
		if strings.HasPrefix(line, "forged_tool") {
			t.Errorf("policy show printed a line the tool name made:\n%s", stdout)
		}
	}
	if !strings.Contains(stdout, `"wipe\nforged_tool\tread_only"`) {
		t.Errorf("policy show does not quote the tool name:\n%s", stdout)
	}
}

// TestPolicyShowNotesAnUnlistedStatusTool: a status tool the upstream
// does not list, as a misspelt one, fails every status call, so an
// unknown outcome of the tool can never be settled. policy show, which
// sees the upstream's list, says so.
func TestPolicyShowNotesAnUnlistedStatusTool(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.yaml")
	rules := "tools:\n" +
		"  plain_tool:\n    on_unknown: recover\n    recover: {tool: get_statuss}\n" +
		"  needs_tasks:\n    on_unknown: recover\n    recover: {tool: needs_roots}\n"
	if err := os.WriteFile(file, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := run(t, append([]string{"policy", "show", "--policy", file, "--"}, capableServer...)...)
	if err != nil {
		t.Fatalf("policy show: %v\n%s", err, stderr)
	}
	if !strings.Contains(stdout, `note: the status tool of "plain_tool", "get_statuss", is not one the upstream lists`) {
		t.Errorf("policy show does not note the unlisted status tool:\n%s", stdout)
	}
	if strings.Contains(stdout, `"needs_roots", is not`) {
		t.Errorf("policy show notes a status tool the upstream lists:\n%s", stdout)
	}
}

// TestPolicyShowNotesPatternsThatGovernNothing: the first pattern that
// matches a tool takes it, so a pattern after a wider one, or one that
// matches no listed tool, governs nothing, and the tools it meant run
// without it. policy show says which.
func TestPolicyShowNotesPatternsThatGovernNothing(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.yaml")
	rules := "tools:\n" +
		"  needs_*:\n    scope: actor\n" +
		"  needs_s*:\n    scope: key\n" + // every tool it matches, needs_* took
		"  nedes_*:\n    scope: key\n" + // matches none
		"  plain_tool:\n    scope: key\n" +
		"  plain_*:\n    scope: key\n" // its one tool has an exact rule
	if err := os.WriteFile(file, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := run(t, append([]string{"policy", "show", "--policy", file, "--"}, capableServer...)...)
	if err != nil {
		t.Fatalf("policy show: %v\n%s", err, stderr)
	}
	for pattern, want := range map[string]bool{"needs_*": false, "needs_s*": true, "nedes_*": true, "plain_*": true} {
		if got := strings.Contains(stdout, `the pattern "`+pattern+`" governs no tool`); got != want {
			t.Errorf("policy show notes %s: %v, want %v:\n%s", pattern, got, want, stdout)
		}
	}
}

// TestPolicyShowNotesKeysWithoutEffect: a rule naming a read_only tool
// that sets keys needing a record reads as a promise the proxy does not
// keep: the tool's calls pass through unrecorded. policy show says so; a
// glob's keys, a default for the tools it covers, are not noted.
func TestPolicyShowNotesKeysWithoutEffect(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.yaml")
	rules := "tools:\n" +
		"  plain_tool: {class: read_only, journal: {arguments: clear}}\n" +
		"  needs_*: {class: read_only, forward_key: false}\n"
	if err := os.WriteFile(file, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := run(t, append([]string{"policy", "show", "--policy", file, "--"}, capableServer...)...)
	if err != nil {
		t.Fatalf("policy show: %v\n%s", err, stderr)
	}
	want := `note: ` + file + `: the rule "plain_tool" sets journal.arguments, which needs a record; the tool is read_only, from the policy file (plain_tool)`
	if !strings.Contains(stdout, want) {
		t.Errorf("policy show does not note the keys without effect; want %s in:\n%s", want, stdout)
	}
	if strings.Contains(stdout, "forward_key") {
		t.Errorf("policy show notes a glob's keys:\n%s", stdout)
	}
}

// TestNoEffectNoteOfAnIdempotentTool: the replay of a rule naming a tool
// idempotent from its annotations is noted as the keys of a read_only
// tool's are, with why it has no effect and the way out.
func TestNoEffectNoteOfAnIdempotentTool(t *testing.T) {
	p := policy.Policy{Source: "annotation idempotentHint",
		NoEffect: &policy.NoEffect{File: "p.yaml", Keys: []string{"replay"}, Class: policy.Idempotent}}
	want := `note: p.yaml: the rule "set_thermostat" sets replay, which has no effect: the tool is idempotent, from the annotation idempotentHint, ` +
		"so only calls made while one runs share it, and a later identical call runs again: set class: side_effect in the rule to replay its calls\n"
	if got := noEffectNote("set_thermostat", &p); got != want {
		t.Errorf("noEffectNote =\n%s\nwant\n%s", got, want)
	}
}

// TestPolicyCheckNotesKeysWithoutEffect: policy check, which sees no
// annotations, notes a rule whose own class is read_only and that sets
// keys needing a record.
func TestPolicyCheckNotesKeysWithoutEffect(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte("tools:\n  get: {class: read_only, fingerprint: {ignore: [a]}}\n  put: {journal: {arguments: clear}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := run(t, "policy", "check", file)
	if err != nil {
		t.Fatalf("policy check: %v\n%s", err, stderr)
	}
	if want := `the rule "get" sets fingerprint.ignore, which needs a record`; !strings.Contains(stdout, want) || strings.Count(stdout, "note:") != 1 {
		t.Errorf("policy check does not note get's keys alone; want %s in:\n%s", want, stdout)
	}
}

// TestPolicyShowTakesATwiceListedToolAtItsStrictest: a tool the server
// lists twice, with readOnlyHint once, is shown once, as the proxy takes
// it: a side effect whose contract nobody wrote, not a read-only row
// beside it.
func TestPolicyShowTakesATwiceListedToolAtItsStrictest(t *testing.T) {
	server := []string{"/bin/sh", "-c", `while IFS= read -r l; do
id=$(printf '%s' "$l" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
case "$l" in
*'"method":"initialize"'*)
  printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"sh","version":"1"}}}\n' "$id";;
*'"method":"tools/list"'*)
  printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"charge","inputSchema":{"type":"object"}},{"name":"charge","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}]}}\n' "$id";;
esac; done`}
	stdout, stderr, err := run(t, append([]string{"policy", "show", "--"}, server...)...)
	if err != nil {
		t.Fatalf("policy show: %v\n%s", err, stderr)
	}
	if rows := strings.Count(stdout, "\ncharge "); rows != 1 {
		t.Errorf("policy show has %d rows for charge; want 1:\n%s", rows, stdout)
	}
	if strings.Contains(stdout, "read_only") || !strings.Contains(stdout, "1 tool with effects") {
		t.Errorf("policy show does not show charge as a side effect nobody wrote a contract for:\n%s", stdout)
	}
}
