package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The policy tests run the proxy with flags (a policy file, a scope) and
// compare with the proxy run without them, so each needs the proxy itself:
// with MCPI_E2E_DIRECT=1 they skip.

// metaExecutionIDUpstream is where the proxy hands the execution id to the
// upstream when the tool's forward_key is on (DESIGN.md section 6).
const metaExecutionIDUpstream = "mcp-idempotent/execution-id"

// needProxy skips the test in direct mode and fails it when the proxy did
// not build.
func needProxy(t *testing.T) {
	t.Helper()
	if direct {
		t.Skip("needs the proxy: compares the proxy with and without its flags")
	}
	if proxyBuildErr != nil {
		t.Fatalf("the proxy did not build:\n%v", proxyBuildErr)
	}
}

// proxyCmd is the proxy binary run with args, with the environment proxied
// uses.
func proxyCmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, proxyBin, args...)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0 halt_on_error=1")
	return cmd
}

// proxiedWith returns the command that runs upstream behind the proxy, with
// flags before the "--".
func proxiedWith(t *testing.T, flags []string, upstream ...string) *exec.Cmd {
	t.Helper()
	needProxy(t)
	args := append(slices.Clone(flags), "--")
	cmd := exec.Command(proxyBin, append(args, upstream...)...)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0 halt_on_error=1")
	return cmd
}

// writePolicy writes a policy file into the test's temporary directory and
// returns its path.
func writePolicy(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// withPolicy is the proxy's flags for a policy file holding yaml, or none
// when yaml is "".
func withPolicy(t *testing.T, yaml string) []string {
	t.Helper()
	if yaml == "" {
		return nil
	}
	return []string{"--policy", writePolicy(t, yaml)}
}

// call calls tool and fails the test on a protocol error or an error result.
func call(t *testing.T, ctx context.Context, p *peer, params *mcp.CallToolParams) *mcp.CallToolResult {
	t.Helper()
	res, err := p.CallTool(ctx, params)
	if err != nil {
		t.Fatalf("%s %s: %v", params.Name, argsJSON(params.Arguments), err)
	}
	if res.IsError {
		t.Fatalf("%s %s: error result %s", params.Name, argsJSON(params.Arguments), answer(res))
	}
	return res
}

func argsJSON(args any) string {
	b, _ := json.Marshal(args)
	return string(b)
}

// runs asks the chargeserver how many times tool (create_vm, echo_meta or
// set_counter) has run. calls is read-only, so the proxy passes it through.
func runs(t *testing.T, ctx context.Context, p *peer, tool string) int {
	t.Helper()
	res, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "calls"})
	if err != nil {
		t.Fatalf("calls: %v", err)
	}
	var c struct {
		Calls map[string]int `json:"calls"`
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &c); err != nil || c.Calls == nil {
		t.Fatalf("calls: structured content %s: want {\"calls\": {...}} (%v)", b, err)
	}
	return c.Calls[tool]
}

// TestPolicyIgnoredFields: a policy that marks note as non-semantic makes
// two charges that differ only in their note one charge; without the
// policy the note is part of the intent, and both run.
func TestPolicyIgnoredFields(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		policy string
		want   int
	}{
		{"ignore note", "tools:\n  charge_card:\n    fingerprint:\n      ignore: [note]\n", 1},
		{"no policy", "", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			p := connect(t, ctx, proxiedWith(t, withPolicy(t, tc.policy), chargeServer()...))

			first := call(t, ctx, p, &mcp.CallToolParams{Name: "charge_card", Arguments: map[string]any{
				"card": "4242", "amount": 100, "note": "first try"}})
			second := call(t, ctx, p, &mcp.CallToolParams{Name: "charge_card", Arguments: map[string]any{
				"card": "4242", "amount": 100, "note": "retry from the agent"}})

			if got := executions(t, ctx, p); got != tc.want {
				t.Errorf("charges = %d after two calls differing only in note, want %d", got, tc.want)
			}
			if tc.want == 1 {
				if !replayed(second) {
					t.Errorf("second call: not marked replayed; _meta = %s", metaJSON(second))
				}
				if answer(second) != answer(first) {
					t.Errorf("second call = %s, want the first answer %s", answer(second), answer(first))
				}
			} else if replayed(second) {
				t.Errorf("second call: marked replayed without the policy; _meta = %s", metaJSON(second))
			}
		})
	}
}

// TestPolicySchemaDefaults: create_vm's inputSchema gives region the
// default "us-east-1", so leaving it out and spelling it out are one
// intent, while another region is a new VM. fingerprint.defaults: false
// turns that off, and the two spellings are two VMs.
func TestPolicySchemaDefaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		policy string
		// want is the VM count after each of the three calls.
		want [3]int
	}{
		{"defaults on (no policy)", "", [3]int{1, 1, 2}},
		{"defaults false", "tools:\n  create_vm:\n    fingerprint:\n      defaults: false\n", [3]int{1, 2, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			p := connect(t, ctx, proxiedWith(t, withPolicy(t, tc.policy), chargeServer()...))

			for i, args := range []map[string]any{
				{"name": "a"},
				{"name": "a", "region": "us-east-1"},
				{"name": "a", "region": "eu-west-1"},
			} {
				res := call(t, ctx, p, &mcp.CallToolParams{Name: "create_vm", Arguments: args})
				if got := runs(t, ctx, p, "create_vm"); got != tc.want[i] {
					t.Errorf("after create_vm %s: %d VMs created, want %d (answer %s, _meta %s)",
						argsJSON(args), got, tc.want[i], firstText(res), metaJSON(res))
				}
				isReplay := i > 0 && tc.want[i] == tc.want[i-1]
				if replayed(res) != isReplay {
					t.Errorf("create_vm %s: replayed = %v, want %v; _meta = %s", argsJSON(args), replayed(res), isReplay, metaJSON(res))
				}
			}
		})
	}
}

// TestClientKeyConflict: a client names its execution with
// _meta["mcp-idempotent/key"]. The same key with other arguments is a
// client bug: it gets a JSON-RPC invalid-params error naming the key, and
// nothing runs. The same key with the same arguments is a retry, replayed.
func TestClientKeyConflict(t *testing.T) {
	needProxy(t)
	t.Parallel()
	ctx := testContext(t)
	p := connect(t, ctx, proxied(t, chargeServer()...))
	keyed := func(amount float64) *mcp.CallToolParams {
		return &mcp.CallToolParams{
			Meta:      mcp.Meta{metaKey: "order-1"},
			Name:      "charge_card",
			Arguments: chargeArgs("4242", amount),
		}
	}

	first := call(t, ctx, p, keyed(100))

	res, err := p.CallTool(ctx, keyed(200))
	if err == nil {
		t.Fatalf("key order-1 reused with amount 200: answer %s, _meta %s; want a JSON-RPC error", answer(res), metaJSON(res))
	}
	var werr *jsonrpc.Error
	if !errors.As(err, &werr) {
		t.Errorf("key reused with other arguments: error %v (%T), want a JSON-RPC error response", err, err)
	} else if werr.Code != jsonrpc.CodeInvalidParams {
		t.Errorf("key reused with other arguments: code %d, want %d (invalid params); error %v", werr.Code, jsonrpc.CodeInvalidParams, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "order-1") || !strings.Contains(msg, "differ") {
		t.Errorf("key reused with other arguments: message %q, want it to name the key order-1 and say the arguments differ", msg)
	}
	t.Logf("key reused with other arguments: %v", err)
	if got := executions(t, ctx, p); got != 1 {
		t.Errorf("charges = %d after the conflicting call, want 1 (it must not run)", got)
	}

	again := call(t, ctx, p, keyed(100))
	if !replayed(again) {
		t.Errorf("same key, same arguments: not marked replayed; _meta = %s", metaJSON(again))
	}
	if answer(again) != answer(first) {
		t.Errorf("same key, same arguments: answer %s, want the first %s", answer(again), answer(first))
	}
	if got := executions(t, ctx, p); got != 1 {
		t.Errorf("charges = %d after a keyed retry, want 1", got)
	}
}

// TestForwardKey: by default the proxy hands the execution id to the
// upstream in _meta, so an upstream that honours idempotency keys can
// dedupe a re-dispatch; it is the id a replay reports. forward_key: false
// keeps it from the upstream, and dedupe still works.
func TestForwardKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		policy  string
		forward bool
	}{
		{"default", "", true},
		{"forward_key false", "tools:\n  echo_meta:\n    forward_key: false\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			p := connect(t, ctx, proxiedWith(t, withPolicy(t, tc.policy), chargeServer()...))

			params := &mcp.CallToolParams{Name: "echo_meta", Arguments: map[string]any{"tag": "x"}}
			first := call(t, ctx, p, params)
			second := call(t, ctx, p, params)

			if got := runs(t, ctx, p, "echo_meta"); got != 1 {
				t.Errorf("echo_meta ran %d times for two identical calls, want 1", got)
			}
			if !replayed(second) {
				t.Errorf("second call: not marked replayed; _meta = %s", metaJSON(second))
			}
			var echo struct {
				Meta map[string]any `json:"meta"`
			}
			b, _ := json.Marshal(first.StructuredContent)
			if err := json.Unmarshal(b, &echo); err != nil || echo.Meta == nil {
				t.Fatalf("echo_meta: structured content %s: want {\"meta\": {...}} (%v)", b, err)
			}
			t.Logf("the upstream's _meta: %s", b)
			seen, ok := echo.Meta[metaExecutionIDUpstream]
			if !tc.forward {
				if ok {
					t.Errorf("with forward_key: false the upstream saw _meta[%q] = %v; its _meta: %s", metaExecutionIDUpstream, seen, b)
				}
				return
			}
			id := executionID(second)
			if !strings.HasPrefix(id, "exe_") {
				t.Fatalf("replay: _meta[%q].id = %q, want exe_...; _meta = %s", metaExecution, id, metaJSON(second))
			}
			if seen != id {
				t.Errorf("the upstream saw _meta[%q] = %v, want %q (the execution id of the replay); its _meta: %s",
					metaExecutionIDUpstream, seen, id, b)
			}
		})
	}
}

// TestPolicyClassOverride: set_counter says it is idempotent, so identical
// calls each run (the proxy only coalesces in-flight duplicates). A policy
// that makes it side_effect dedupes it fully: the second call is a replay.
func TestPolicyClassOverride(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		policy string
		want   int
	}{
		{"class side_effect", "tools:\n  set_counter:\n    class: side_effect\n", 1},
		{"no policy", "", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			p := connect(t, ctx, proxiedWith(t, withPolicy(t, tc.policy), chargeServer()...))

			params := &mcp.CallToolParams{Name: "set_counter", Arguments: map[string]any{"value": 7}}
			call(t, ctx, p, params)
			second := call(t, ctx, p, params)

			if got := runs(t, ctx, p, "set_counter"); got != tc.want {
				t.Errorf("set_counter ran %d times for two identical calls, want %d", got, tc.want)
			}
			if replayed(second) != (tc.want == 1) {
				t.Errorf("second call: replayed = %v, want %v; _meta = %s", replayed(second), tc.want == 1, metaJSON(second))
			}
		})
	}
}

// runProxy runs the proxy binary with args and no stdin, and returns its
// stdout, stderr and exit status.
func runProxy(t *testing.T, ctx context.Context, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := proxyCmd(ctx, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("running %s: %v", cmd, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("%s did not finish: %v\nstderr:\n%s", cmd, ctx.Err(), errOut.String())
	}
	return out.String(), errOut.String(), cmd.ProcessState.ExitCode()
}

// TestPolicyCheck: `policy check` accepts a valid file, and for an invalid
// one exits 1 with one FILE:LINE:COL: line per problem, so an editor or CI
// log points at each.
func TestPolicyCheck(t *testing.T) {
	needProxy(t)
	t.Parallel()
	ctx := testContext(t)

	t.Run("valid", func(t *testing.T) {
		path := writePolicy(t, `defaults:
  retention: 24h
tools:
  charge_card:
    class: side_effect
    scope: actor
    retention: 72h
    fingerprint:
      ignore: [note]
  "deploy_*":
    replay: undelivered
`)
		stdout, stderr, code := runProxy(t, ctx, "policy", "check", path)
		if code != 0 {
			t.Errorf("policy check of a valid file: exit status %d, want 0; stderr:\n%s", code, stderr)
		}
		if want := path + ": valid, 2 tool rules"; !strings.Contains(stdout, want) {
			t.Errorf("policy check stdout = %q, want it to contain %q", stdout, want)
		}
	})

	t.Run("invalid", func(t *testing.T) {
		path := writePolicy(t, `tools:
  charge_card:
    colour: red
    retention: 3 weeks
  "deploy_[":
    class: side_effect
`)
		stdout, stderr, code := runProxy(t, ctx, "policy", "check", path)
		if code != 1 {
			t.Errorf("policy check of an invalid file: exit status %d, want 1", code)
		}
		if strings.Contains(stdout, "valid,") {
			t.Errorf("policy check of an invalid file: stdout %q says valid", stdout)
		}
		q := regexp.QuoteMeta
		for _, want := range []struct{ what, re string }{
			{"the unknown key", q(path) + `:3:\d+: tools\.charge_card: .*colour`},
			{"the bad duration", q(path) + `:4:\d+: tools\.charge_card\.retention: .*3 weeks`},
			{"the bad glob", q(path) + `:5:\d+: tools\."deploy_\[": .*glob`},
		} {
			if !regexp.MustCompile(`(?m)` + want.re).MatchString(stderr) {
				t.Errorf("policy check stderr does not report %s (want a line matching %s):\n%s", want.what, want.re, stderr)
			}
		}
	})
}

// showRow is one row of the `policy show` table, by column header.
type showRow map[string]string

// parseShow reads the `policy show` table: a header line whose column
// titles fix where each column starts, rows up to the first blank line,
// then the footer.
func parseShow(t *testing.T, out string) (rows map[string]showRow, footer string) {
	t.Helper()
	lines := strings.Split(out, "\n")
	header := lines[0]
	var cols []string
	var starts []int
	for _, m := range regexp.MustCompile(`\S+`).FindAllStringIndex(header, -1) {
		cols = append(cols, header[m[0]:m[1]])
		starts = append(starts, m[0])
	}
	if len(cols) == 0 || cols[0] != "TOOL" || !slices.Contains(cols, "CONTRACT") {
		t.Fatalf("policy show: header %q, want TOOL ... CONTRACT", header)
	}
	rows = map[string]showRow{}
	i := 1
	for ; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
		row := showRow{}
		for c, name := range cols {
			line := lines[i]
			from := min(starts[c], len(line))
			to := len(line)
			if c+1 < len(cols) {
				to = min(starts[c+1], len(line))
			}
			row[name] = strings.TrimSpace(line[from:to])
		}
		rows[row["TOOL"]] = row
	}
	return rows, strings.Join(lines[i:], "\n")
}

// TestPolicyShow: `policy show` lists every tool the upstream has, with
// the policy the file gives it, and points at each side-effecting tool
// whose replay contract nobody wrote down.
func TestPolicyShow(t *testing.T) {
	needProxy(t)
	t.Parallel()
	ctx := testContext(t)

	// What the upstream lists, asked directly.
	bare := connect(t, ctx, unproxied(chargeServer()...))
	list, err := bare.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("listing chargeserver's tools: %v", err)
	}
	var tools []string
	for _, tool := range list.Tools {
		tools = append(tools, tool.Name)
	}

	for _, tc := range []struct {
		name   string
		policy string
		// charge_card's row
		class, scope, approval, contract string
	}{
		{"policy names charge_card", "tools:\n  charge_card:\n    class: idempotent\n    scope: actor\n    approval: each\n    approver: operator\n",
			"idempotent", "actor", "each by operator, 10m", "written"},
		{"no policy", "", "side_effect", "session", "none", "NOT WRITTEN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"policy", "show"}, withPolicy(t, tc.policy)...)
			stdout, stderr, code := runProxy(t, ctx, append(append(args, "--"), chargeServer()...)...)
			if code != 0 {
				t.Fatalf("policy show: exit status %d, want 0; stderr:\n%s", code, stderr)
			}
			rows, footer := parseShow(t, stdout)
			if len(rows) != len(tools) {
				t.Errorf("policy show lists %d tools, want %d (%v):\n%s", len(rows), len(tools), tools, stdout)
			}
			for _, tool := range tools {
				if _, ok := rows[tool]; !ok {
					t.Errorf("policy show does not list %s:\n%s", tool, stdout)
				}
			}
			if cc := rows["charge_card"]; cc["CLASS"] != tc.class || cc["SCOPE"] != tc.scope || cc["CONTRACT"] != tc.contract {
				t.Errorf("charge_card: CLASS %q SCOPE %q CONTRACT %q, want %q %q %q:\n%s",
					cc["CLASS"], cc["SCOPE"], cc["CONTRACT"], tc.class, tc.scope, tc.contract, stdout)
			}
			if got := rows["charge_card"]["APPROVAL"]; got != tc.approval {
				t.Errorf("charge_card: APPROVAL %q, want %q:\n%s", got, tc.approval, stdout)
			}
			if got := rows["charge_and_crash"]["CONTRACT"]; got != "NOT WRITTEN" {
				t.Errorf("charge_and_crash: CONTRACT %q, want NOT WRITTEN (the file does not name it):\n%s", got, stdout)
			}
			if got := rows["charges"]["CONTRACT"]; got != "-" {
				t.Errorf("charges (read-only): CONTRACT %q, want -:\n%s", got, stdout)
			}
			// The footer counts the NOT WRITTEN rows.
			notWritten := 0
			for _, row := range rows {
				if row["CONTRACT"] == "NOT WRITTEN" {
					notWritten++
				}
			}
			m := regexp.MustCompile(`(\d+) tools? with effects`).FindStringSubmatch(footer)
			if m == nil {
				t.Errorf("policy show footer %q: want a count of side-effecting tools with no written contract", footer)
			} else if n, _ := strconv.Atoi(m[1]); n != notWritten {
				t.Errorf("policy show footer counts %d tools, but %d rows say NOT WRITTEN:\n%s", n, notWritten, stdout)
			}
		})
	}
}

// TestScopeFlag: --scope global on the command line would share executions
// across actors and is refused as a usage error; the scopes that are
// allowed work, and --scope key dedupes only calls that carry a client key.
func TestScopeFlag(t *testing.T) {
	needProxy(t)
	t.Parallel()

	t.Run("global refused", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		_, stderr, code := runProxy(t, ctx, append([]string{"--scope", "global", "--"}, chargeServer()...)...)
		if code != 2 {
			t.Errorf("--scope global: exit status %d, want 2 (usage)", code)
		}
		if !strings.Contains(stderr, "--scope") {
			t.Errorf("--scope global: stderr does not name --scope:\n%s", stderr)
		}
	})

	t.Run("actor", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		p := connect(t, ctx, proxiedWith(t, []string{"--scope", "actor"}, chargeServer()...))
		charge(t, ctx, p, "4242", 100)
		if res := charge(t, ctx, p, "4242", 100); !replayed(res) {
			t.Errorf("--scope actor: second identical call not replayed; _meta = %s", metaJSON(res))
		}
		if got := executions(t, ctx, p); got != 1 {
			t.Errorf("--scope actor: charges = %d after two identical calls, want 1", got)
		}
	})

	t.Run("key", func(t *testing.T) {
		t.Parallel()
		ctx := testContext(t)
		p := connect(t, ctx, proxiedWith(t, []string{"--scope", "key"}, chargeServer()...))
		charge(t, ctx, p, "4242", 100)
		charge(t, ctx, p, "4242", 100)
		if got := executions(t, ctx, p); got != 2 {
			t.Errorf("--scope key: charges = %d after two identical calls with no key, want 2", got)
		}
		keyed := &mcp.CallToolParams{Meta: mcp.Meta{metaKey: "order-2"}, Name: "charge_card", Arguments: chargeArgs("4242", 100)}
		call(t, ctx, p, keyed)
		if res := call(t, ctx, p, keyed); !replayed(res) {
			t.Errorf("--scope key: keyed retry not replayed; _meta = %s", metaJSON(res))
		}
		if got := executions(t, ctx, p); got != 3 {
			t.Errorf("--scope key: charges = %d after two keyed calls, want 3 (one more)", got)
		}
	})
}

// TestTransientResultsAreRetried: a vendor's 429, declared safe to resend,
// is retried by the proxy: the client sees one success, the upstream saw
// three calls. Without the rule the client sees the 429.
func TestTransientResultsAreRetried(t *testing.T) {
	needProxy(t)
	const rule = `tools:
  flaky_upload:
    retry:
      max_attempts: 5
      base: 10ms
      cap: 50ms
      transient:
        - result_text: "\\b429\\b"
          safe_to_resend: true
`
	for _, withRule := range []bool{true, false} {
		ctx := testContext(t)
		var flags []string
		if withRule {
			flags = withPolicy(t, rule)
		}
		p := connect(t, ctx, proxiedWith(t, flags, chargeServer()...))
		res, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "flaky_upload", Arguments: map[string]any{"tag": "logo.png"}})
		if err != nil {
			t.Fatal(err)
		}
		got, n := firstText(res), runs(t, ctx, p, "flaky_upload")
		switch {
		case withRule && (res.IsError || got != "uploaded logo.png" || n != 3):
			t.Fatalf("with the retry rule: %q (isError %v) after %d upstream calls; want one success after 3", got, res.IsError, n)
		case !withRule && (!res.IsError || !strings.Contains(got, "429") || n != 1):
			t.Fatalf("without the rule: %q after %d upstream calls; want the 429, once", got, n)
		}
	}
}

// TestUnknownSideEffectIsNotRetried: even under a retry rule that matches
// everything, a side effect whose upstream died after dispatch is not sent
// again.
func TestUnknownSideEffectIsNotRetried(t *testing.T) {
	needProxy(t)
	ctx := testContext(t)
	flags := append(withPolicy(t, "tools:\n  charge_and_crash:\n    retry:\n      transient: [{result_text: \".\", safe_to_resend: true}]\n"), "--max-restarts", "1")
	p := connect(t, ctx, proxiedWith(t, flags, chargeServer()...))
	res, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "charge_and_crash", Arguments: chargeArgs("4242", 100)})
	if err != nil || !strings.HasPrefix(firstText(res), "Outcome unknown:") {
		t.Fatalf("got %v, %q; want outcome unknown", err, firstText(res))
	}
	if n := executions(t, ctx, p); n != 0 {
		t.Fatalf("the restarted upstream counted %d charges; the unknown side effect must not be re-sent", n)
	}
}
