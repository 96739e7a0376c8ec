package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
)

func TestLoadExample(t *testing.T) {
	f, err := Load("testdata/example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if f.Path() != "testdata/example.yaml" {
		t.Errorf("Path() = %q", f.Path())
	}
	want := []string{"charge_card", "publish_daily_report", "increment_counter", "deploy_*", "get_*", "upsert_user"}
	if got := f.Rules(); !slices.Equal(got, want) {
		t.Errorf("Rules() = %q, want %q", got, want)
	}

	charge := f.Resolve("charge_card", nil)
	wantCharge := Policy{
		Class: SideEffect, Scope: ScopeActor, Retention: 72 * time.Hour,
		Replay: ReplayUndelivered, AttachWindow: 10 * time.Minute,
		Ignore: []string{"note", "trace.id"}, Defaults: true, OnUnknown: Block,
		ForwardKey: false, Journal: JournalRule{Arguments: JournalHash, Result: JournalRedact},
		Approval: ApprovalEach, Approver: ApproverOperator, ApprovalTimeout: 30 * time.Minute,
		Source: "policy file (charge_card)", Written: true, Explicit: true,
	}
	if !reflect.DeepEqual(charge, wantCharge) {
		t.Errorf("charge_card:\n got %+v\nwant %+v", charge, wantCharge)
	}

	deploy := f.Resolve("deploy_prod", nil)
	wantRecover := &RecoverRule{
		Tool:        "get_deploy_status",
		Arguments:   json.RawMessage(`{"execution_id":"{{execution_id}}"}`),
		DonePath:    "status",
		DoneValues:  []string{`"done"`, `"succeeded"`},
		NotDonePath: "status", NotDoneValues: []string{`"not_found"`},
	}
	if deploy.OnUnknown != Recover || !reflect.DeepEqual(deploy.Recover, wantRecover) {
		t.Errorf("deploy_prod: on_unknown %s, recover %+v; want recover %+v", deploy.OnUnknown, deploy.Recover, wantRecover)
	}
	if got := f.Resolve("publish_daily_report", nil); got.Scope != ScopeGlobal || got.Retention != 24*time.Hour {
		t.Errorf("publish_daily_report: scope %s retention %v", got.Scope, got.Retention)
	}
	if got := f.Resolve("get_user", nil); got.Class != ReadOnly || got.Source != "policy file (get_*)" || got.Explicit || !got.Written {
		t.Errorf("get_user: %+v", got)
	}
	if got := f.Resolve("upsert_user", nil); got.Retention != 7*24*time.Hour {
		t.Errorf("upsert_user: retention %v, want 168h", got.Retention)
	}
}

func TestLoadMissing(t *testing.T) {
	_, err := Load("testdata/no-such-file.yaml")
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want an error wrapping os.ErrNotExist", err)
	}
}

func TestParseValid(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		rules []string
		check func(t *testing.T, f *File)
	}{
		{name: "empty", in: ""},
		{name: "comments only", in: "# nothing here\n"},
		{name: "null document", in: "~\n"},
		{name: "document marker only", in: "---\n"},
		{name: "trailing document marker", in: "tools: {a: {}}\n---\n# end\n", rules: []string{"a"}},
		{name: "empty sections", in: "defaults:\ntools:\n"},
		{
			name: "tool without fields", in: "tools:\n  noop:\n", rules: []string{"noop"},
			check: func(t *testing.T, f *File) {
				p := f.Resolve("noop", nil)
				if !p.Written || !p.Explicit || p.Source != "default (tool not listed)" {
					t.Errorf("noop: %+v", p)
				}
			},
		},
		{
			name: "days and Go durations",
			in:   "defaults:\n  retention: 400d\n  attach_window: 1h30m\ntools:\n  a: {retention: 90s}\n",
			check: func(t *testing.T, f *File) {
				if p := f.Resolve("b", nil); p.Retention != MaxRetention || p.AttachWindow != 90*time.Minute {
					t.Errorf("b: retention %v attach_window %v", p.Retention, p.AttachWindow)
				}
				if p := f.Resolve("a", nil); p.Retention != 90*time.Second {
					t.Errorf("a: retention %v", p.Retention)
				}
			},
			rules: []string{"a"},
		},
		{
			name:  "quoted scalars are strings",
			in:    "tools:\n  'a':\n    class: \"side_effect\"\n    scope: 'actor'\n",
			rules: []string{"a"},
		},
		{
			name:  "glob kinds",
			in:    "tools:\n  \"deploy_*\": {}\n  \"get_?\": {}\n  \"[ab]x\": {}\n  'lit\\*': {}\n",
			rules: []string{"deploy_*", "get_?", "[ab]x", `lit\*`},
		},
		{
			name: "recover with defaults for done and arguments",
			in:   "tools:\n  deploy:\n    on_unknown: recover\n    recover:\n      tool: status\n",
			check: func(t *testing.T, f *File) {
				want := &RecoverRule{
					Tool: "status", Arguments: json.RawMessage(`{"execution_id":"{{execution_id}}"}`),
					DonePath: "status", DoneValues: []string{`"done"`, `"completed"`, `"succeeded"`, `"success"`},
					NotDonePath: "status", NotDoneValues: []string{`"not_found"`, `"not_started"`, `"failed"`},
				}
				if p := f.Resolve("deploy", nil); !reflect.DeepEqual(p.Recover, want) {
					t.Errorf("recover = %+v, want %+v", p.Recover, want)
				}
			},
			rules: []string{"deploy"},
		},
		{
			name: "recover arguments of every type, in file order",
			in: `tools:
  deploy:
    on_unknown: recover
    recover:
      tool: status
      arguments:
        z: "{{execution_id}}"
        a: [1, -0x10, 12345678901234567890123, 1.5, true, null, 2024-01-02, {n: {m: x}}]
      done: {path: result.state, in: [true, 1, ok]}
      not_done: {in: [absent, false]}
`,
			check: func(t *testing.T, f *File) {
				r := f.Resolve("deploy", nil).Recover
				wantArgs := `{"z":"{{execution_id}}","a":[1,-16,12345678901234567890123,1.5,true,null,"2024-01-02",{"n":{"m":"x"}}]}`
				if string(r.Arguments) != wantArgs {
					t.Errorf("arguments = %s, want %s", r.Arguments, wantArgs)
				}
				if !json.Valid(r.Arguments) {
					t.Errorf("arguments are not valid JSON")
				}
				if r.DonePath != "result.state" || !slices.Equal(r.DoneValues, []string{"true", "1", `"ok"`}) {
					t.Errorf("done = %s %q", r.DonePath, r.DoneValues)
				}
				// not_done reads the done path unless it names its own.
				if r.NotDonePath != "result.state" || !slices.Equal(r.NotDoneValues, []string{`"absent"`, "false"}) {
					t.Errorf("not_done = %s %q", r.NotDonePath, r.NotDoneValues)
				}
			},
			rules: []string{"deploy"},
		},
		{
			name: "anchors, aliases and merge keys",
			in: `tools:
  charge_card: &payment
    class: side_effect
    scope: actor
    retention: 72h
  refund: *payment
  payout:
    <<: *payment
    retention: 7d
`,
			rules: []string{"charge_card", "refund", "payout"},
			check: func(t *testing.T, f *File) {
				if p := f.Resolve("refund", nil); p.Scope != ScopeActor || p.Retention != 72*time.Hour {
					t.Errorf("refund: %+v", p)
				}
				if p := f.Resolve("payout", nil); p.Scope != ScopeActor || p.Retention != 7*24*time.Hour {
					t.Errorf("payout: %+v", p)
				}
			},
		},
		{
			name:  "empty ignore list clears the defaults' list",
			in:    "defaults:\n  fingerprint: {ignore: [a]}\ntools:\n  t: {fingerprint: {ignore: []}}\n",
			rules: []string{"t"},
			check: func(t *testing.T, f *File) {
				if p := f.Resolve("t", nil); len(p.Ignore) != 0 {
					t.Errorf("t: ignore %q, want empty", p.Ignore)
				}
				if p := f.Resolve("u", nil); !slices.Equal(p.Ignore, []string{"a"}) {
					t.Errorf("u: ignore %q, want [a]", p.Ignore)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse("p.yaml", []byte(tt.in))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got := f.Rules(); !slices.Equal(got, tt.rules) {
				t.Errorf("Rules() = %q, want %q", got, tt.rules)
			}
			if tt.check != nil {
				tt.check(t, f)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		// want holds one entry per error, in order; each must be a
		// substring of that error's message, starting with its position.
		want []string
	}{
		{
			name: "not YAML",
			in:   "tools:\n  a: [\n",
			want: []string{"p.yaml:2: YAML syntax error at or after this line: "},
		},
		{
			name: "an alias to no anchor",
			in:   "tools:\n  a: &x\n  b: *y\n",
			want: []string{"p.yaml: YAML syntax error: unknown anchor 'y' referenced"},
		},
		{
			name: "two documents",
			in:   "tools: {}\n---\ntools: {}\n",
			want: []string{"p.yaml:2: a policy file holds one YAML document"},
		},
		{
			name: "file is a list",
			in:   "- tools\n",
			want: []string{"p.yaml:1:1: want a mapping with defaults and tools, not a list"},
		},
		{
			name: "unknown top-level key",
			in:   "default:\n  scope: actor\n",
			want: []string{`p.yaml:1:1: unknown key "default" (valid: defaults, tools, accounts)`},
		},
		{
			name: "unknown keys at every level",
			in: `defaults:
  retension: 1h
  fingerprint: {ignores: [a]}
tools:
  a:
    on_unknow: block
    on_unknown: recover
    recover: {tool: s, tools: x, done: {paths: x}}
`,
			want: []string{
				`p.yaml:2:3: defaults: unknown key "retension" (valid: scope, retention, replay, attach_window, on_unknown, forward_key, fingerprint, journal, approver, approval_timeout)`,
				`p.yaml:3:17: defaults.fingerprint: unknown key "ignores" (valid: ignore, defaults)`,
				`p.yaml:6:5: tools.a: unknown key "on_unknow" (valid: class, scope, retention, replay, attach_window, fingerprint, on_unknown, recover, forward_key, retry, already_done, journal, approval, approver, approval_timeout)`,
				`p.yaml:8:24: tools.a.recover: unknown key "tools" (valid: tool, arguments, done, not_done)`,
				`p.yaml:8:41: tools.a.recover.done: unknown key "paths" (valid: path, in)`,
			},
		},
		{
			name: "approval fields",
			in: `defaults:
  approval: each
  approver: admin
tools:
  a: {approval: always, approval_timeout: 0s}
  b: {class: read_only, approval: each}
  c: {scope: key, approval: session, approval_timeout: 8d}
`,
			want: []string{
				"p.yaml:2:3: defaults.approval: approval names the tools a person approves, so it can only be set per tool",
				`p.yaml:3:13: defaults.approver: "admin" is not an approver (use client or operator)`,
				`p.yaml:5:17: tools.a.approval: "always" is not an approval mode (use none, each or session)`,
				`p.yaml:5:43: tools.a.approval_timeout: "0s" must be more than zero`,
				"p.yaml:6:35: tools.b.approval: a read_only tool passes through unrecorded, so it cannot wait for an approval",
				"p.yaml:7:29: tools.c.approval: scope key runs a call without a client key unrecorded",
				`p.yaml:7:56: tools.c.approval_timeout: "8d" is longer than the most allowed, 7d`,
			},
		},
		{
			name: "class and recover in defaults",
			in:   "defaults:\n  class: side_effect\n  recover: {tool: s}\n",
			want: []string{
				"p.yaml:2:3: defaults.class: class can only be set per tool",
				"p.yaml:3:3: defaults.recover: recover names a status tool, so it can only be set per tool",
			},
		},
		{
			name: "bad durations",
			in: `tools:
  charge_card:
    retention: 3 days
  a: {retention: 0s}
  b: {retention: 401d}
  c: {attach_window: -1m}
  d: {attach_window: 90}
  e: {retention: [1h]}
  f: {retention: 99999999999999999d}
  g: {retention: 1.5d}
  h: {attach_window: ""}
  i: {attach_window: }
`,
			want: []string{
				`p.yaml:3:16: tools.charge_card.retention: "3 days" is not a duration (use 90s, 10m, 72h or 7d)`,
				`p.yaml:4:18: tools.a.retention: "0s" must be more than zero`,
				`p.yaml:5:18: tools.b.retention: "401d" is longer than the most allowed, 400d`,
				`p.yaml:6:22: tools.c.attach_window: "-1m" must be more than zero`,
				`p.yaml:7:22: tools.d.attach_window: "90" is not a duration`,
				`p.yaml:8:18: tools.e.retention: a list is not a duration`,
				`p.yaml:9:18: tools.f.retention: "99999999999999999d" is too long`,
				`p.yaml:10:18: tools.g.retention: "1.5d" is not a duration`,
				`p.yaml:11:22: tools.h.attach_window: "" is not a duration`,
				`p.yaml:12:22: tools.i.attach_window: an empty value is not a duration`,
			},
		},
		{
			name: "bad enums",
			in: `defaults:
  scope: sesion
  replay: never
  on_unknown: [block]
tools:
  a:
    class: readonly
    scope: ~
`,
			want: []string{
				`p.yaml:2:10: defaults.scope: "sesion" is not a scope (use session, actor, key or global)`,
				`p.yaml:3:11: defaults.replay: "never" is not a replay mode (use always or undelivered)`,
				`p.yaml:4:15: defaults.on_unknown: a list is not an on_unknown mode (use block, retry or recover)`,
				`p.yaml:7:12: tools.a.class: "readonly" is not a class (use read_only, idempotent or side_effect)`,
				`p.yaml:8:12: tools.a.scope: an empty value is not a scope`,
			},
		},
		{
			name: "bad globs",
			in:   "tools:\n  \"deploy_[\": {}\n  'x\\': {}\n  \"[]a\": {}\n",
			want: []string{
				`p.yaml:2:3: tools."deploy_[": "deploy_[" is not a valid glob pattern`,
				`p.yaml:3:3: tools.x\: "x\\" is not a valid glob pattern`,
				`p.yaml:4:3: tools."[]a": "[]a" is not a valid glob pattern`,
			},
		},
		{
			name: "global outside an exact name",
			in:   "defaults:\n  scope: global\ntools:\n  \"pay_*\": {scope: global}\n  pay_now: {scope: global}\n",
			want: []string{
				"p.yaml:2:10: defaults.scope: global is not allowed in defaults",
				"p.yaml:4:20: tools.pay_*.scope: global is not allowed on a glob pattern",
			},
		},
		{
			name: "recover without a block, or a block without recover",
			in: `defaults:
  on_unknown: recover
tools:
  a:
    on_unknown: recover
  b:
    recover: {tool: s}
  c:
    on_unknown: retry
    recover: {tool: s}
  d:
    on_unknown: recover
    recover: {tool: ""}
  e:
    on_unknown: recover
    recover: {arguments: {}}
  f:
    on_unknown: recover
    recover: {tool: s, arguments: [x]}
  g:
    on_unknown: recover
    recover: {tool: g}
  h:
    on_unknown: recover
    recover: status
  i:
    on_unknown: recover
    recover: {tool: s, done: {in: []}}
  j:
    on_unknown: recover
    recover: {tool: s, done: {path: a..b, in: [{x: 1}]}}
  k:
    on_unknown: recover
    recover: {tool: [s], arguments: "{{execution_id}}"}
`,
			want: []string{
				"p.yaml:2:15: defaults.on_unknown: recover is not allowed in defaults",
				"p.yaml:5:17: tools.a.on_unknown: recover needs a recover block naming the status tool",
				"p.yaml:7:14: tools.b.recover: a recover block is used only with on_unknown: recover, which this rule does not set",
				"p.yaml:10:14: tools.c.recover: a recover block is used only with on_unknown: recover, not retry",
				`p.yaml:13:21: tools.d.recover.tool: the status tool's name is empty`,
				"p.yaml:16:14: tools.e.recover: want tool, the name of the status tool to call",
				"p.yaml:19:35: tools.f.recover.arguments: want a mapping, the status call's arguments, not a list",
				`p.yaml:22:21: tools.g.recover.tool: "g" cannot be its own status tool`,
				`p.yaml:25:14: tools.h.recover: want a mapping with tool, arguments and done, not "status"`,
				"p.yaml:28:35: tools.i.recover.done.in: want a non-empty list of the values that mean done",
				`p.yaml:31:37: tools.j.recover.done.path: "a..b" has an empty member name`,
				`p.yaml:31:48: tools.j.recover.done.in[0]: want a string, number, boolean or null, not a mapping`,
				"p.yaml:34:21: tools.k.recover.tool: want the name of the status tool, not a list",
				`p.yaml:34:37: tools.k.recover.arguments: want a mapping, the status call's arguments, not "{{execution_id}}"`,
			},
		},
		{
			name: "recover arguments JSON cannot hold",
			in: `tools:
  a:
    on_unknown: recover
    recover: {tool: s, arguments: {x: .inf, y: !custom z}}
  b:
    on_unknown: recover
    recover: {tool: s, arguments: {x: 1, x: 2}}
`,
			want: []string{
				`p.yaml:4:39: tools.a.recover.arguments.x: ".inf" is not a number JSON can hold`,
				`p.yaml:7:42: tools.b.recover.arguments: "x" appears twice (first at line 7)`,
			},
		},
		{
			name: "alias loops and expansion bombs",
			in: `tools:
  a:
    on_unknown: recover
    recover: {tool: s, arguments: &loop {x: *loop}}
  b: &m
    <<: *m
  c:
    on_unknown: recover
    recover:
      tool: s
      arguments:
        l0: &l0 [x, x, x, x, x, x, x, x, x, x]
        l1: &l1 [*l0, *l0, *l0, *l0, *l0, *l0, *l0, *l0, *l0, *l0]
        l2: &l2 [*l1, *l1, *l1, *l1, *l1, *l1, *l1, *l1, *l1, *l1]
        l3: &l3 [*l2, *l2, *l2, *l2, *l2, *l2, *l2, *l2, *l2, *l2]
        l4: [*l3, *l3, *l3, *l3, *l3, *l3, *l3, *l3, *l3, *l3]
`,
			want: []string{
				"p.yaml:4:35: tools.a.recover.arguments: too large or too deep",
				"p.yaml:5:6: tools.b: a merge (<<) includes the mapping it is in",
				"p.yaml:12:9: tools.c.recover.arguments: too large or too deep",
			},
		},
		{
			name: "merge bomb",
			in:   mergeBomb(40),
			want: []string{"through aliases (*name) and merges (<<), the file holds more than 1000000 values"},
		},
		{
			name: "duplicate keys",
			in: `tools:
  charge_card:
    retention: 72h
    retention: 48h
  refund: {}
  charge_card:
    scope: actor
`,
			want: []string{
				`p.yaml:4:5: tools.charge_card: "retention" appears twice (first at line 3)`,
				`p.yaml:6:3: tools: "charge_card" appears twice (first at line 2)`,
			},
		},
		{
			name: "wrong YAML types",
			in: `defaults: [scope]
tools:
  a: [class]
  b:
    fingerprint: [x]
  c:
    fingerprint: {ignore: x, defaults: "true"}
  d:
    forward_key: yes
  e:
    forward_key: 1
  ? [k]
  : {}
`,
			want: []string{
				"p.yaml:1:11: defaults: want a mapping of rule fields, not a list",
				"p.yaml:3:6: tools.a: want a mapping of rule fields, not a list",
				"p.yaml:5:18: tools.b.fingerprint: want a mapping with ignore and defaults, not a list",
				`p.yaml:7:27: tools.c.fingerprint.ignore: want a list of argument paths such as [note, trace.id], not "x"`,
				`p.yaml:7:40: tools.c.fingerprint.defaults: "true" is not a boolean (use true or false)`,
				`p.yaml:9:18: tools.d.forward_key: "yes" is not a boolean (use true or false)`,
				`p.yaml:11:18: tools.e.forward_key: "1" is not a boolean (use true or false)`,
				"p.yaml:12:5: tools: want a name as key, not a list",
			},
		},
		{
			// The validator finds the first, the decoder the second: they
			// keep the order in which the walk reaches the two fields.
			name: "an anchor that two fields use",
			in:   "defaults: {scope: &g global}\ntools:\n  a: {forward_key: *g}\n",
			want: []string{
				"p.yaml:1:19: defaults.scope: global is not allowed in defaults",
				`p.yaml:1:19: tools.a.forward_key: "global" is not a boolean (use true or false)`,
			},
		},
		{
			name: "tools is a list",
			in:   "tools:\n  - charge_card\n",
			want: []string{"p.yaml:2:3: tools: want a mapping of tool names and glob patterns to rules, not a list"},
		},
		{
			name: "empty tool name",
			in:   "tools:\n  \"\": {}\n",
			want: []string{"p.yaml:2:3: tools: empty tool name"},
		},
		{
			name: "bad ignore paths",
			in:   "defaults:\n  fingerprint:\n    ignore: [\"\", a..b, .a, a., ok.path, [x], ~]\n",
			want: []string{
				`p.yaml:3:14: defaults.fingerprint.ignore[0]: "" is empty`,
				`p.yaml:3:18: defaults.fingerprint.ignore[1]: "a..b" has an empty member name`,
				`p.yaml:3:24: defaults.fingerprint.ignore[2]: ".a" has an empty member name`,
				`p.yaml:3:28: defaults.fingerprint.ignore[3]: "a." has an empty member name`,
				`p.yaml:3:41: defaults.fingerprint.ignore[5]: want an argument path such as trace.id, not a list`,
				`p.yaml:3:46: defaults.fingerprint.ignore[6]: want an argument path such as trace.id, not an empty value`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse("p.yaml", []byte(tt.in))
			if err == nil {
				t.Fatalf("Parse succeeded (%v rules), want %d errors", f.Rules(), len(tt.want))
			}
			if f != nil {
				t.Errorf("Parse returned a File with its error")
			}
			var errs []error
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				errs = j.Unwrap()
			} else {
				errs = []error{err}
			}
			for i, e := range errs {
				if i >= len(tt.want) {
					t.Errorf("unexpected error %d: %v", i, e)
					continue
				}
				if !strings.Contains(e.Error(), tt.want[i]) {
					t.Errorf("error %d:\n got %v\nwant it to contain %s", i, e, tt.want[i])
				}
			}
			for _, w := range tt.want[min(len(errs), len(tt.want)):] {
				t.Errorf("missing error: %s", w)
			}
		})
	}
}

// mergeBomb returns a file of n rules, each merging the one before twice.
func mergeBomb(n int) string {
	var b strings.Builder
	b.WriteString("tools:\n  m0: &m0 {class: read_only}\n")
	for i := 1; i < n; i++ {
		fmt.Fprintf(&b, "  m%d: &m%d {<<: [*m%d, *m%d]}\n", i, i, i-1, i-1)
	}
	return b.String()
}

// A file whose aliases expand a large rule many times is refused, fast.
func TestParseAliasExpansion(t *testing.T) {
	var b strings.Builder
	b.WriteString("tools:\n  a: &a {fingerprint: {ignore: [" + strings.Repeat("x,", 5000) + "x]}}\n")
	for i := range 5000 {
		fmt.Fprintf(&b, "  t%d: *a\n", i)
	}
	_, err := Parse("p.yaml", []byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "the file holds more than 1000000 values") {
		t.Errorf("Parse = %v, want the file refused for its size", err)
	}
}

func TestResolve(t *testing.T) {
	yes := true
	readOnly := &mcp.Annotations{ReadOnlyHint: &yes}
	idempotent := &mcp.Annotations{IdempotentHint: &yes}
	plain := &mcp.Annotations{}

	const file = `defaults:
  retention: 48h
  fingerprint: {ignore: [trace.id]}
tools:
  "charge_*":
    scope: actor
  charge_card:
    class: side_effect
    retention: 72h
  "charge_?ard":
    retention: 1h
  "*_card":
    replay: undelivered
  "list_*":
    forward_key: false
  "upsert_*":
    class: side_effect
  "put_*":
    class: idempotent
  "put_dangerous":
    class: side_effect
    on_unknown: retry
  "deploy_*":
    on_unknown: recover
    recover: {tool: deploy_status}
  "rotate_*":
    approval: session
    approver: operator
  "read_secret":
    approval: each
    approval_timeout: 90s
`
	withDefaults := func(p *Policy) {
		p.Retention = 48 * time.Hour
		p.Ignore = []string{"trace.id"}
	}
	tests := []struct {
		name string
		file string // "" for a nil *File
		tool string
		ann  *mcp.Annotations
		// want changes FromAnnotations(ann) into the expected policy.
		want func(p *Policy)
	}{
		{name: "nil file, not listed", tool: "x", ann: nil, want: func(*Policy) {}},
		{name: "nil file, read-only", tool: "x", ann: readOnly, want: func(*Policy) {}},
		{name: "nil file, idempotent", tool: "x", ann: idempotent, want: func(*Policy) {}},
		{name: "empty file", file: "\n", tool: "x", ann: plain, want: func(*Policy) {}},
		{name: "defaults only, no annotations", file: file, tool: "other", ann: plain, want: withDefaults},
		{name: "defaults only, read-only", file: file, tool: "other", ann: readOnly, want: withDefaults},
		{
			name: "defaults only, idempotent keeps retry", file: file, tool: "other", ann: idempotent,
			want: withDefaults,
		},
		{
			name: "approval by glob", file: file, tool: "rotate_key", ann: idempotent,
			want: func(p *Policy) {
				withDefaults(p)
				p.Approval, p.Approver = ApprovalSession, ApproverOperator
				p.Written = true
			},
		},
		{
			// A server's hint never lets a call skip the approval the
			// file asks for.
			name: "approval records a read-only tool", file: file, tool: "read_secret", ann: readOnly,
			want: func(p *Policy) {
				withDefaults(p)
				p.Class, p.OnUnknown = SideEffect, Block
				p.Approval, p.ApprovalTimeout = ApprovalEach, 90*time.Second
				p.Source = "policy file (read_secret): approval needs a record"
				p.Written, p.Explicit = true, true
			},
		},
		{
			name: "exact beats globs listed before and after it", file: file, tool: "charge_card", ann: plain,
			want: func(p *Policy) {
				withDefaults(p)
				p.Retention = 72 * time.Hour
				p.Source = "policy file (charge_card)"
				p.Written, p.Explicit = true, true
			},
		},
		{
			name: "exact rule overrides read-only annotation", file: file, tool: "charge_card", ann: readOnly,
			want: func(p *Policy) {
				withDefaults(p)
				p.Class = SideEffect
				p.Retention = 72 * time.Hour
				p.Source = "policy file (charge_card)"
				p.Written, p.Explicit = true, true
			},
		},
		{
			name: "first glob in file order wins", file: file, tool: "charge_bard", ann: nil,
			want: func(p *Policy) {
				withDefaults(p)
				p.Scope = ScopeActor
				p.Written = true
			},
		},
		{
			name: "later glob when the earlier ones miss", file: file, tool: "debit_card", ann: nil,
			want: func(p *Policy) {
				withDefaults(p)
				p.Replay = ReplayUndelivered
				p.Written = true
			},
		},
		{
			name: "rule without class keeps annotation class and source", file: file, tool: "list_items", ann: readOnly,
			want: func(p *Policy) {
				withDefaults(p)
				p.ForwardKey = false
				p.Written = true
			},
		},
		{
			name: "rule without class keeps idempotent's retry", file: file, tool: "list_items", ann: idempotent,
			want: func(p *Policy) {
				withDefaults(p)
				p.ForwardKey = false
				p.Written = true
			},
		},
		{
			name: "side_effect over idempotent annotation blocks on unknown", file: file, tool: "upsert_user", ann: idempotent,
			want: func(p *Policy) {
				withDefaults(p)
				p.Class, p.OnUnknown = SideEffect, Block
				p.Source = "policy file (upsert_*)"
				p.Written = true
			},
		},
		{
			name: "side_effect over read-only annotation", file: file, tool: "upsert_user", ann: readOnly,
			want: func(p *Policy) {
				withDefaults(p)
				p.Class = SideEffect
				p.Source = "policy file (upsert_*)"
				p.Written = true
			},
		},
		{
			name: "idempotent class brings retry", file: file, tool: "put_thing", ann: nil,
			want: func(p *Policy) {
				withDefaults(p)
				p.Class, p.OnUnknown = Idempotent, Retry
				p.Source = "policy file (put_*)"
				p.Written = true
			},
		},
		{
			name: "written on_unknown wins over class", file: file, tool: "put_dangerous", ann: nil,
			want: func(p *Policy) {
				withDefaults(p)
				p.OnUnknown = Retry
				p.Source = "policy file (put_dangerous)"
				p.Written, p.Explicit = true, true
			},
		},
		{
			name: "glob recover", file: file, tool: "deploy_prod", ann: nil,
			want: func(p *Policy) {
				withDefaults(p)
				p.OnUnknown = Recover
				p.Recover = &RecoverRule{
					Tool: "deploy_status", Arguments: json.RawMessage(`{"execution_id":"{{execution_id}}"}`),
					DonePath: "status", DoneValues: []string{`"done"`, `"completed"`, `"succeeded"`, `"success"`},
					NotDonePath: "status", NotDoneValues: []string{`"not_found"`, `"not_started"`, `"failed"`},
				}
				p.Written = true
			},
		},
		{
			name: "defaults on_unknown overrides idempotent annotation",
			file: "defaults: {on_unknown: block}\n", tool: "x", ann: idempotent,
			want: func(p *Policy) { p.OnUnknown = Block },
		},
		{
			name: "defaults on_unknown kept when a rule changes the class",
			file: "defaults: {on_unknown: block}\ntools:\n  x: {class: idempotent}\n", tool: "x", ann: nil,
			want: func(p *Policy) {
				p.Class, p.OnUnknown = Idempotent, Block
				p.Source = "policy file (x)"
				p.Written, p.Explicit = true, true
			},
		},
		{
			name: "exact global",
			file: "tools:\n  report: {scope: global, fingerprint: {defaults: false}}\n", tool: "report", ann: readOnly,
			want: func(p *Policy) {
				p.Scope = ScopeGlobal
				p.Defaults = false
				p.Written, p.Explicit = true, true
			},
		},
		{
			name: "escaped glob matches the literal name",
			file: "tools:\n  'odd\\*': {replay: undelivered}\n", tool: "odd*", ann: nil,
			want: func(p *Policy) {
				p.Replay = ReplayUndelivered
				p.Written = true
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f *File
			if tt.file != "" {
				var err error
				if f, err = Parse("p.yaml", []byte(tt.file)); err != nil {
					t.Fatal(err)
				}
			}
			want := FromAnnotations(tt.ann)
			tt.want(&want)
			if got := f.Resolve(tt.tool, tt.ann); !reflect.DeepEqual(got, want) {
				t.Errorf("Resolve(%q):\n got %+v\nwant %+v", tt.tool, got, want)
			}
		})
	}
}

// Resolve's policies share no memory with the file, so a caller may keep
// or change one without touching the next.
func TestResolveCopies(t *testing.T) {
	f, err := Parse("p.yaml", []byte(`tools:
  d:
    fingerprint: {ignore: [a]}
    on_unknown: recover
    recover: {tool: s}
`))
	if err != nil {
		t.Fatal(err)
	}
	p := f.Resolve("d", nil)
	p.Ignore[0] = "changed"
	p.Recover.Arguments[0] = '['
	p.Recover.DoneValues[0] = "changed"
	q := f.Resolve("d", nil)
	if q.Ignore[0] != "a" || q.Recover.Arguments[0] != '{' || q.Recover.DoneValues[0] != `"done"` {
		t.Errorf("a change to one resolved policy reached the next: %+v %+v", q, q.Recover)
	}
}

func TestNilFile(t *testing.T) {
	var f *File
	if f.Rules() != nil || f.Path() != "" {
		t.Errorf("nil File: Rules %q, Path %q", f.Rules(), f.Path())
	}
}

func ExampleParse() {
	f, err := Parse("policy.yaml", []byte(`
defaults:
  retention: 24h
tools:
  charge_card:
    class: side_effect
    scope: actor
    retention: 72h
  "get_*":
    class: read_only
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	yes := true
	for _, tool := range []string{"charge_card", "get_invoice", "send_email"} {
		p := f.Resolve(tool, &mcp.Annotations{ReadOnlyHint: &yes})
		fmt.Printf("%s: %s, scope %s, retention %v (%s)\n", tool, p.Class, p.Scope, p.Retention, p.Source)
	}

	_, err = Parse("policy.yaml", []byte("tools:\n  charge_card:\n    retention: 3 days\n    forward_key: yes\n"))
	fmt.Println(err)
	// Output:
	// charge_card: side_effect, scope actor, retention 72h0m0s (policy file (charge_card))
	// get_invoice: read_only, scope session, retention 24h0m0s (policy file (get_*))
	// send_email: read_only, scope session, retention 24h0m0s (annotation readOnlyHint)
	// policy.yaml:3:16: tools.charge_card.retention: "3 days" is not a duration (use 90s, 10m, 72h or 7d)
	// policy.yaml:4:18: tools.charge_card.forward_key: "yes" is not a boolean (use true or false)
}

func FuzzParse(f *testing.F) {
	example, err := os.ReadFile("testdata/example.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		string(example),
		"",
		"tools:\n  \"deploy_*\":\n    on_unknown: recover\n    recover: {tool: s, arguments: {a: [1, x]}, done: {in: [ok]}}\n",
		"tools:\n  a: &r {class: idempotent}\n  b:\n    <<: *r\n    scope: global\n",
		"defaults: {scope: key, retention: 7d, attach_window: 1m, on_unknown: retry, forward_key: false}\n",
		"tools: {x: {retention: 3 days}}\n",
	} {
		f.Add([]byte(s))
	}
	yes := true
	anns := []*mcp.Annotations{nil, {}, {ReadOnlyHint: &yes}, {IdempotentHint: &yes}}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("p.yaml", data)
		if err != nil {
			if file != nil {
				t.Fatalf("Parse returned a File with error %v", err)
			}
			if !strings.HasPrefix(err.Error(), "p.yaml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		tools := append([]string{"", "x", "charge_card", "deploy_prod", "get_user"}, file.Rules()...)
		for _, tool := range tools {
			for _, ann := range anns {
				p := file.Resolve(tool, ann)
				switch {
				case p.Class == "" || p.Scope == "" || p.Replay == "" || p.OnUnknown == "":
					t.Fatalf("Resolve(%q): zero enum in %+v", tool, p)
				case p.Retention <= 0 || p.Retention > MaxRetention && p.Retention != DefaultRetention:
					t.Fatalf("Resolve(%q): retention %v", tool, p.Retention)
				case p.AttachWindow <= 0:
					t.Fatalf("Resolve(%q): attach window %v", tool, p.AttachWindow)
				case p.OnUnknown == Recover && (p.Recover == nil || p.Recover.Tool == "" || !json.Valid(p.Recover.Arguments)):
					t.Fatalf("Resolve(%q): on_unknown recover with %+v", tool, p.Recover)
				case p.OnUnknown != Recover && p.Recover != nil:
					t.Fatalf("Resolve(%q): recover rule without on_unknown recover", tool)
				case p.Scope == ScopeGlobal && !p.Explicit:
					t.Fatalf("Resolve(%q): global scope without an exact rule", tool)
				case p.Explicit && !p.Written:
					t.Fatalf("Resolve(%q): explicit but not written", tool)
				}
			}
		}
	})
}

func TestParseRetry(t *testing.T) {
	f, err := Parse("p.yaml", []byte(`tools:
  upload_asset:
    retry:
      max_attempts: 5
      base: 50ms
      cap: 2s
      deadline: 90s
      transient:
        - result_text: "(?i)\\b429\\b"
          safe_to_resend: true
        - structured: {path: status, in: [503, "busy"]}
      retry_after: {structured: retry_after_seconds}
`))
	if err != nil {
		t.Fatal(err)
	}
	r := f.Resolve("upload_asset", nil).Retry
	switch {
	case r == nil:
		t.Fatal("no retry rule")
	case r.MaxAttempts != 5 || r.Base != 50*time.Millisecond || r.Cap != 2*time.Second || r.Deadline != 90*time.Second || r.RetryAfterPath != "retry_after_seconds":
		t.Errorf("retry rule %+v", r)
	case len(r.Transient) != 2 || !r.Transient[0].Text.MatchString("HTTP 429") || !r.Transient[0].SafeToResend:
		t.Errorf("first transient match %+v", r.Transient)
	case r.Transient[1].Path != "status" || strings.Join(r.Transient[1].In, ",") != `503,"busy"` || r.Transient[1].SafeToResend:
		t.Errorf("second transient match %+v", r.Transient[1])
	}
	if f.Resolve("other", nil).Retry != nil {
		t.Error("a tool without a retry rule got one")
	}
	if f, err := Parse("p.yaml", []byte("tools:\n  a:\n    retry: {max_attempts: 2}\n")); err != nil || f.Resolve("a", nil).Retry.Deadline != DefaultDeadline {
		t.Errorf("a retry rule without deadline: %v; want the default %v", err, DefaultDeadline)
	}

	for _, tt := range []struct{ yaml, want string }{
		{"tools:\n  a:\n    retry:\n      max_attempts: 0\n", "p.yaml:4:21: tools.a.retry.max_attempts: want a whole number of attempts from 1 to 20"},
		{"tools:\n  a:\n    retry:\n      transient:\n        - result_text: \"(\"\n", "p.yaml:5:24: tools.a.retry.transient[0].result_text: not a regular expression (Go RE2 syntax): error parsing regexp: missing closing )"},
		{"tools:\n  a:\n    retry:\n      transient:\n        - result_text: 429\n", "p.yaml:5:24: tools.a.retry.transient[0].result_text: want a regular expression (Go RE2 syntax) as a string, not the number 429; quote it"},
		{"tools:\n  a:\n    retry:\n      transient:\n        - safe_to_resend: true\n", "tools.a.retry.transient[0]: a transient match needs result_text or structured"},
		{"tools:\n  a:\n    retry:\n      base: 1s\n      cap: 10ms\n", "tools.a.retry: cap (10ms) is shorter than base (1s)"},
		{"tools:\n  a:\n    retry:\n      tries: 3\n", `unknown key "tries" (valid: max_attempts, base, cap, deadline, transient, retry_after, account)`},
		{"tools:\n  a:\n    retry:\n      deadline: 0s\n", `p.yaml:4:17: tools.a.retry.deadline: "0s" must be more than zero`},
		{"tools:\n  a:\n    retry:\n      deadline: soon\n", `p.yaml:4:17: tools.a.retry.deadline: "soon" is not a duration (use 90s, 10m, 72h or 7d)`},
		{"tools:\n  a:\n    retry:\n      deadline: 99999999h\n", `p.yaml:4:17: tools.a.retry.deadline: "99999999h" is too long`},
		{"tools:\n  a:\n    retry:\n      deadline: 1h1.5x\n", `p.yaml:4:17: tools.a.retry.deadline: "1h1.5x" is not a duration`},
		{"tools:\n  a:\n    retry:\n      deadline: [1s]\n", `p.yaml:4:17: tools.a.retry.deadline: a list is not a duration`},
	} {
		_, err := Parse("p.yaml", []byte(tt.yaml))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v; want an error containing %q", tt.yaml, err, tt.want)
		}
	}
}

// TestParseJournal: journal modes layer like every other field, one mode
// at a time, and a bad one is refused with its position.
func TestParseJournal(t *testing.T) {
	f, err := Parse("p.yaml", []byte(`defaults:
  journal: {result: hash}
tools:
  send_email:
    journal: {arguments: redact}
  "log_*":
    journal: {arguments: clear, result: clear}
`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		tool string
		want JournalRule
	}{
		{"charge_card", JournalRule{Arguments: JournalHash, Result: JournalHash}},
		{"send_email", JournalRule{Arguments: JournalRedact, Result: JournalHash}},
		{"log_line", JournalRule{Arguments: JournalClear, Result: JournalClear}},
	}
	for _, tt := range tests {
		if got := f.Resolve(tt.tool, nil).Journal; got != tt.want {
			t.Errorf("%s: journal %+v, want %+v", tt.tool, got, tt.want)
		}
	}
	if got, want := FromAnnotations(nil).Journal, (JournalRule{Arguments: JournalHash, Result: JournalRedact}); got != want {
		t.Errorf("default journal rule %+v, want %+v (hash the arguments, redact the result)", got, want)
	}

	for _, tt := range []struct{ yaml, want string }{
		{"tools:\n  a:\n    journal: {arguments: plain}\n", `p.yaml:3:26: tools.a.journal.arguments: "plain" is not a journal mode (use hash, redact or clear)`},
		{"defaults:\n  journal:\n    result: [hash]\n", `p.yaml:3:13: defaults.journal.result: a list is not a journal mode (use hash, redact or clear)`},
		{"tools:\n  a:\n    journal: {args: hash}\n", `p.yaml:3:15: tools.a.journal: unknown key "args" (valid: arguments, result)`},
		{"tools:\n  a:\n    journal: hash\n", `p.yaml:3:14: tools.a.journal: want a mapping with arguments and result, not "hash"`},
	} {
		_, err := Parse("p.yaml", []byte(tt.yaml))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v; want an error containing %q", tt.yaml, err, tt.want)
		}
	}
}

func TestParseAlreadyDone(t *testing.T) {
	f, err := Parse("p.yaml", []byte("tools:\n  delete_file:\n    already_done: {result_text: \"(?i)not found\"}\n  delete_user:\n    already_done:\n      - result_text: gone\n      - structured: {path: code, in: [404]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if m := f.Resolve("delete_file", nil).AlreadyDone; len(m) != 1 || !m[0].Text.MatchString("Not Found") {
		t.Errorf("delete_file already_done = %+v", m)
	}
	if m := f.Resolve("delete_user", nil).AlreadyDone; len(m) != 2 || m[1].Path != "code" {
		t.Errorf("delete_user already_done = %+v", m)
	}
	if _, err := Parse("p.yaml", []byte("tools:\n  a:\n    already_done: {}\n")); err == nil || !strings.Contains(err.Error(), "needs result_text or structured") {
		t.Errorf("an empty already_done: %v", err)
	}
}

func TestParseAccounts(t *testing.T) {
	f, err := Parse("p.yaml", []byte(`accounts:
  cloudinary: {rate: 500/h, burst: 20, max_concurrency: 4, retry_budget: {max_tokens: 20, token_ratio: 0.2}}
  slack: {rate: 1/s}
tools:
  upload_asset:
    retry: {account: cloudinary}
`))
	if err != nil {
		t.Fatal(err)
	}
	a := f.Accounts()
	if c := a["cloudinary"]; c.Rate != 500.0/3600 || c.Burst != 20 || c.MaxConcurrency != 4 || c.MaxTokens != 20 || c.TokenRatio != 0.2 {
		t.Errorf("cloudinary = %+v", c)
	}
	if s := a["slack"]; s.Rate != 1 || s.Burst != 1 || s.MaxTokens != 10 || s.TokenRatio != 0.1 {
		t.Errorf("slack = %+v; want the defaults burst 1, max_tokens 10, token_ratio 0.1", s)
	}
	if r := f.Resolve("upload_asset", nil).Retry; r == nil || r.Account != "cloudinary" {
		t.Errorf("upload_asset retry = %+v", r)
	}
	for _, tt := range []struct{ yaml, want string }{
		{"accounts:\n  a: {rate: 5 per hour}\n", `accounts.a.rate: "5 per hour" is not a rate such as 500/h`},
		// Numbers the float parser takes that are no allowance: refused
		// here, not a panic when the proxy starts.
		{"accounts:\n  a: {rate: NaN/s}\n", `accounts.a.rate: "NaN/s" is not a rate such as 500/h`},
		{"accounts:\n  a: {rate: +Inf/d}\n", `accounts.a.rate: "+Inf/d" is not a rate such as 500/h`},
		{"accounts:\n  a: {rate: 5e-324/d}\n", `too low`},
		{"accounts:\n  a: {rate: 1e-10/s}\n", `too low (less than one call in 292 years)`},
		{"accounts:\n  a: {burst: 3}\n", "accounts.a: an account needs a rate"},
		{"accounts:\n  a: {rate: 1/s, retry_budget: {token_ratio: 5000}}\n", `accounts.a.retry_budget.token_ratio: "5000": want a number more than 0 and at most 1000`},
		{"accounts:\n  a: {rate: 1/s, burst: 0}\n", "accounts.a.burst: \"0\": want a whole number from 1 to 1000000"},
		{"tools:\n  t:\n    retry: {account: nope}\n", `p.yaml:3:22: tools.t.retry.account: "nope" is not an account defined under accounts`},
	} {
		if _, err := Parse("p.yaml", []byte(tt.yaml)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v; want an error containing %q", tt.yaml, err, tt.want)
		}
	}
}

// TestAccountNumbersMessages: a bad number of an account is named with the
// range it must be in, and a rate given but wrong is one error, not two.
func TestAccountNumbersMessages(t *testing.T) {
	for _, tt := range []struct{ yaml, want string }{
		{"accounts:\n  a: {rate: 1/s, max_concurrency: -1}\n", `accounts.a.max_concurrency: "-1": want a whole number from 0 to 1000000`},
		{"accounts:\n  a: {rate: 1/s, burst: 99999999999999999999}\n", `accounts.a.burst: "99999999999999999999": want a whole number from 1 to 1000000`},
		// The stores keep when a burst is full again in unix nanoseconds,
		// which end in 2262.
		{"accounts:\n  a: {rate: 0.1/d, burst: 10000}\n", `accounts.a.burst: a burst of 10000 at 0.1/d takes 274 years to fill again; at most 100`},
		{"accounts:\n  a: {rate: 0.00002/d}\n", `accounts.a.rate: a burst of 1 at 0.00002/d takes 137 years to fill again; at most 100`},
		// A tool whose name holds a dot is named quoted, as everywhere.
		{"tools:\n  a.b:\n    retry:\n      account: nope\n", `tools."a.b".retry.account: "nope" is not an account defined under accounts`},
	} {
		if _, err := Parse("p.yaml", []byte(tt.yaml)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v; want an error containing %q", tt.yaml, err, tt.want)
		}
	}
	_, err := Parse("p.yaml", []byte("accounts:\n  a: {rate: 0/s}\n"))
	if err == nil || strings.Contains(err.Error(), "needs a rate") || !strings.Contains(err.Error(), `"0/s" is not a rate`) {
		t.Errorf("Parse of rate 0/s = %v; want only that it is not a rate", err)
	}
}
