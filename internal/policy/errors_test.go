package policy

import (
	"fmt"
	"strings"
	"testing"
)

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
			name: "a tab before a key",
			in:   "tools:\n  a:\n  \tclass: read_only\n",
			want: []string{"p.yaml:3: YAML syntax error at or after this line: found character that cannot start any token: the line is indented with a tab; YAML indents with spaces only"},
		},
		{
			name: "an alias to no anchor",
			in:   "tools:\n  a: &x\n  b: *y\n",
			want: []string{"p.yaml: YAML syntax error: unknown anchor 'y' referenced"},
		},
		{
			name: "Latin-1 in a comment",
			in:   "tools:\n  a: # caf\xe9\n    class: side_effect\n",
			want: []string{"p.yaml:2:11: not UTF-8: byte 0xE9; save the file as UTF-8"},
		},
		{
			name: "a control character",
			in:   "tools:\n  a:\n    class: side\x00effect\n",
			want: []string{"p.yaml:3:16: the control character U+0000 may not appear in YAML"},
		},
		{
			name: "tags of its own",
			in:   "tools:\n  !x a:\n    class: !kind side_effect\n    retention: !env 1h\n    retry: {max_attempts: !!int 3, base: !!str 1s}\n",
			want: []string{
				"p.yaml:2:3: the tag !x is not one a policy file reads: drop it",
				"p.yaml:3:12: the tag !kind is not one a policy file reads: drop it",
				`p.yaml:3:12: tools.a.class: "side_effect" is not a class`,
				"p.yaml:4:16: the tag !env is not one a policy file reads: drop it",
			},
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
  d: {approval: each, approval_timeout: 999ms}
`,
			want: []string{
				"p.yaml:2:3: defaults.approval: approval names the tools a person approves, so it can only be set per tool",
				`p.yaml:3:13: defaults.approver: "admin" is not an approver (use client or operator)`,
				`p.yaml:5:17: tools.a.approval: "always" is not an approval mode (use none, each or session)`,
				`p.yaml:5:43: tools.a.approval_timeout: "0s" must be more than zero`,
				"p.yaml:6:35: tools.b.approval: a read_only tool passes through unrecorded, so it cannot wait for an approval",
				"p.yaml:7:29: tools.c.approval: scope key runs a call without a client key unrecorded",
				`p.yaml:7:56: tools.c.approval_timeout: "8d" is longer than the most allowed, 7d`,
				`p.yaml:8:41: tools.d.approval_timeout: "999ms" is shorter than the least allowed, 1s`,
			},
		},
		{
			name: "class and recover in defaults",
			in:   "defaults:\n  class: side_effect\n  recover: {tool: s}\n  retry: {max_attempts: 2}\n  already_done: {result_text: gone}\n",
			want: []string{
				"p.yaml:2:3: defaults.class: class can only be set per tool",
				"p.yaml:3:3: defaults.recover: recover names a status tool, so it can only be set per tool",
				"p.yaml:4:3: defaults.retry: retry can only be set per tool, under tools",
				"p.yaml:5:3: defaults.already_done: already_done names a tool's results, so it can only be set per tool",
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
			name: "reversed glob ranges",
			in:   "tools:\n  \"deploy_[z-a]\": {}\n  \"x[^a-c9-0]\": {}\n  'y[\\~-a]': {}\n  'z[a-z]*[\\--\\-]': {}\n",
			want: []string{
				`p.yaml:2:3: tools."deploy_[z-a]": "deploy_[z-a]" has the range "z-a", high to low`,
				`p.yaml:3:3: tools."x[^a-c9-0]": "x[^a-c9-0]" has the range "9-0", high to low`,
				`p.yaml:4:3: tools."y[\\~-a]": "y[\\~-a]" has the range "\\~-a", high to low`,
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
				`p.yaml:4:48: the tag !custom is not one a policy file reads: drop it`,
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
  get: &get {class: read_only}
  pay:
    <<: *get
    <<: {class: side_effect}
`,
			want: []string{
				`p.yaml:4:5: tools.charge_card: "retention" appears twice (first at line 3)`,
				`p.yaml:6:3: tools: "charge_card" appears twice (first at line 2)`,
				// Loaders differ on which of two merges wins.
				`p.yaml:11:5: tools.pay: << appears twice (first at line 10): merge several mappings with one << and a list, such as <<: [*a, *b]`,
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
		{
			// Copied from JSONPath, these name no member: the trace id
			// they mean to ignore would still tell retries apart.
			name: "JSONPath in ignore paths",
			in:   "defaults:\n  fingerprint:\n    ignore: [$.trace_id, $, \"items[0].id\", \"*\", meta.*, \"a['b']\", \"$.a[*]\", \"filter[status]\"]\n",
			want: []string{
				`p.yaml:3:14: defaults.fingerprint.ignore[0]: "$.trace_id" is JSONPath: write trace_id`,
				`p.yaml:3:26: defaults.fingerprint.ignore[1]: "$" is JSONPath's root`,
				`p.yaml:3:29: defaults.fingerprint.ignore[2]: "items[0].id" names an array's member: paths reach into objects only`,
				`p.yaml:3:44: defaults.fingerprint.ignore[3]: "*" has a wildcard: wildcards are not supported`,
				`p.yaml:3:49: defaults.fingerprint.ignore[4]: "meta.*" has a wildcard`,
				`p.yaml:3:57: defaults.fingerprint.ignore[5]: "a['b']" uses brackets: join member names with dots`,
				`p.yaml:3:67: defaults.fingerprint.ignore[6]: "$.a[*]" has a wildcard`,
			},
		},
		{
			name: "JSONPath in a status path",
			in:   "tools:\n  a:\n    on_unknown: recover\n    recover: {tool: s, done: {path: $.status, in: [done]}}\n",
			want: []string{
				`p.yaml:4:37: tools.a.recover.done.path: "$.status" is JSONPath: write status`,
			},
		},
		{
			name: "a structured match written wrong is one error",
			in:   "tools:\n  a:\n    already_done:\n      - structured: {path: $.status, in: [done]}\n      - structured: {path: status, in: []}\n      - structured: {in: [done]}\n",
			want: []string{
				`p.yaml:4:28: tools.a.already_done[0].structured.path: "$.status" is JSONPath: write status`,
				`p.yaml:5:40: tools.a.already_done[1].structured.in: want a non-empty list of the values that mean already done, such as [already_exists], not a list`,
				`p.yaml:6:21: tools.a.already_done[2].structured: want {path: FIELD, in: [VALUES...]}`,
			},
		},
		{
			name: "a rate that is no rate is one error",
			in:   "accounts:\n  x: {rate: 0/s}\n  y: {rate: 5/w, burst: 3}\n",
			want: []string{
				`p.yaml:2:13: accounts.x.rate: "0/s" is not a rate`,
				`p.yaml:3:13: accounts.y.rate: "5/w" is not a rate`,
			},
		},
		{
			// A name is quoted where it holds a line break or a
			// control character: it cannot write lines of its own,
			// nor drive the terminal.
			name: "names that are not printable",
			in:   "accounts:\n  \"x\\ny\": {rate: 0/s, retry_budget: {\"a\\rb\": 0}}\ntools:\n  \"t\\u001bc\": {klass: x}\n",
			want: []string{
				`p.yaml:2:18: accounts."x\ny".rate: "0/s" is not a rate`,
				`p.yaml:2:38: accounts."x\ny".retry_budget: unknown key "a\rb"`,
				`p.yaml:4:16: tools."t\x1bc": unknown key "klass"`,
			},
		},
		{
			name: "an account without a name",
			in:   "accounts:\n  \"\": {rate: 1/s}\n",
			want: []string{`p.yaml:2:3: accounts: an account needs a name`},
		},
		{
			name: "an already_done match is called so",
			in:   "tools:\n  a:\n    already_done: {}\n",
			want: []string{`p.yaml:3:19: tools.a.already_done: an already_done match needs result_text or structured`},
		},
		{
			name: "already_done never resends",
			in:   "tools:\n  a:\n    already_done: {result_text: gone, safe_to_resend: true}\n",
			want: []string{`p.yaml:3:55: tools.a.already_done.safe_to_resend: an already_done result means the action is done`},
		},
		{
			name: "result matches with no effect or every effect",
			in: `tools:
  a:
    retry:
      transient:
        - {result_text: "", safe_to_resend: true}
        - {result_text: "429", structured: {path: s, in: [1]}}
    already_done: [{result_text: gone, structured: {path: s, in: [1]}}]
`,
			want: []string{
				`p.yaml:5:25: tools.a.retry.transient[0].result_text: an empty regular expression matches every result`,
				`p.yaml:6:11: tools.a.retry.transient[1]: a transient match takes result_text or structured, not both`,
				`p.yaml:7:20: tools.a.already_done[0]: an already_done match takes result_text or structured, not both`,
			},
		},
		{
			name: "approver and approval_timeout without an approval",
			in:   "defaults:\n  approver: operator\ntools:\n  a: {approver: operator}\n  b: {approval: none, approval_timeout: 5m}\n  c: {approval: each, approver: operator, approval_timeout: 5m}\n",
			want: []string{
				"p.yaml:4:17: tools.a.approver: the rule's approval is none, so no one is asked and approver has no effect",
				"p.yaml:5:41: tools.b.approval_timeout: the rule's approval is none, so no one is asked and approval_timeout has no effect",
			},
		},
		{
			name: "keys a read_only tool never uses",
			in:   "tools:\n  a:\n    class: read_only\n    scope: global\n    replay: undelivered\n    on_unknown: retry\n    retry: {max_attempts: 2}\n",
			want: []string{
				`p.yaml:4:12: tools.a.scope: a read_only tool passes through unrecorded, so scope has no effect`,
				`p.yaml:5:13: tools.a.replay: a read_only tool passes through unrecorded, so replay has no effect`,
				`p.yaml:6:17: tools.a.on_unknown: a read_only tool passes through unrecorded, so on_unknown has no effect`,
			},
		},
		{
			name: "replay for an idempotent tool",
			in:   "defaults:\n  replay: undelivered\ntools:\n  a:\n    class: idempotent\n    replay: always\n  b: {class: idempotent}\n  c: {class: side_effect, replay: always}\n",
			want: []string{
				`p.yaml:6:13: tools.a.replay: an idempotent tool's later identical call runs again whatever replay says, so it has no effect`,
			},
		},
		{
			name: "a glob that is its own status tool",
			in: `tools:
  "pay*":
    on_unknown: recover
    recover: {tool: payment_status}
  "deploy_*":
    on_unknown: recover
    recover: {tool: deploy_status}
  deploy_status:
    class: read_only
`,
			want: []string{`p.yaml:4:21: tools.pay*.recover.tool: "payment_status" matches the pattern "pay*", whose rule it then follows`},
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

// A list of result matches counts toward the values a file may hold, as
// every list does: entries that are not matches, aliased by many rules,
// would each cost an error, without bound.
func TestParseAliasedMatchLists(t *testing.T) {
	for _, key := range []string{"retry: {transient: *l}", "already_done: *l"} {
		t.Run(key, func(t *testing.T) {
			var b strings.Builder
			// 95 rules of 10000 paths each: within the bound.
			b.WriteString("tools:\n  a: {fingerprint: {ignore: &l [" + strings.Repeat("x,", 9999) + "x]}}\n")
			for i := range 94 {
				fmt.Fprintf(&b, "  t%d: {fingerprint: {ignore: *l}}\n", i)
			}
			// The same list ten times more, as matches: past it.
			for i := range 10 {
				fmt.Fprintf(&b, "  m%d: {%s}\n", i, key)
			}
			_, err := Parse("p.yaml", []byte(b.String()))
			if err == nil || !strings.Contains(err.Error(), "the file holds more than 1000000 values") {
				t.Errorf("Parse = %.300v, want the file refused for its size", err)
			}
		})
	}
}

// A value read again through each alias counts its text again: a file
// whose aliases read more text than a file may hold is refused, as a
// regular expression compiled a thousand times would exhaust the proxy.
func TestParseAliasedText(t *testing.T) {
	big := strings.Repeat("x", 100_000)
	for _, rule := range []string{
		"{fingerprint: {ignore: [*s]}}",
		"{already_done: {result_text: *s}}",
		"{on_unknown: recover, recover: {tool: s, arguments: {a: *s}}}",
		"{on_unknown: recover, recover: {tool: s, done: {in: [*s]}}}",
	} {
		t.Run(rule, func(t *testing.T) {
			var b strings.Builder
			b.WriteString("tools:\n  a: {fingerprint: {ignore: [&s " + big + "]}}\n")
			// 50 reads of 100 kB: past the 4 MiB a file may hold.
			for i := range 50 {
				fmt.Fprintf(&b, "  t%d: %s\n", i, rule)
			}
			_, err := Parse("p.yaml", []byte(b.String()))
			if err == nil || !strings.Contains(err.Error(), "the file's values hold more than 4 MiB of text") {
				t.Errorf("Parse = %.300v, want the file refused for its size", err)
			}
		})
	}
}

// An error shows a long name, value or field path shortened: a tool
// name of 100 kB in each of a hundred errors would print 10 MB.
func TestParseErrorsShortenLongText(t *testing.T) {
	name := strings.Repeat("n", 100_000)
	in := "tools:\n  ? " + name + "\n  : {fingerprint: {ignore: [" + strings.Repeat("~,", 99) + "~]}, class: " + name + "}\n"
	_, err := Parse("p.yaml", []byte(in))
	if err == nil {
		t.Fatal("Parse = nil, want errors")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 101 {
		t.Errorf("got %d errors, want 101", len(lines))
	}
	for _, l := range lines {
		if len(l) > 1000 {
			t.Fatalf("an error of %d bytes: %.200s...", len(l), l)
		}
	}
	want := `p.yaml:3:29: tools.nnn`
	if !strings.HasPrefix(lines[0], want) || !strings.HasSuffix(lines[0], `nnn.fingerprint.ignore[0]: want an argument path such as trace.id, not an empty value`) {
		t.Errorf("first error = %q", lines[0])
	}
	if last := lines[100]; !strings.Contains(last, `.class: "nnn`) || !strings.HasSuffix(last, `nnn" is not a class (use read_only, idempotent or side_effect)`) {
		t.Errorf("last error = %q", last)
	}
}

// A file with more errors than anyone reads is refused with the first
// thousand, and a count of the rest: each error costs far more to hold
// and print than the two bytes of a null entry that makes it.
func TestParseErrorsBounded(t *testing.T) {
	in := "tools:\n  a:\n    fingerprint: {ignore: [" + strings.Repeat("~,", 2499) + "~]}\n"
	_, err := Parse("p.yaml", []byte(in))
	if err == nil {
		t.Fatal("Parse = nil, want errors")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 1001 {
		t.Errorf("got %d lines, want 1000 errors and a count of the rest", len(lines))
	}
	if !strings.HasPrefix(lines[0], "p.yaml:3:28: tools.a.fingerprint.ignore[0]: ") {
		t.Errorf("first error = %q", lines[0])
	}
	if last := lines[len(lines)-1]; last != "p.yaml: and 1500 more errors, not shown" {
		t.Errorf("last line = %q", last)
	}
}
