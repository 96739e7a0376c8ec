package policy

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
)

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
    recover: {tool: get_deploy_status}
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
					Tool: "get_deploy_status", Arguments: json.RawMessage(`{"execution_id":"{{execution_id}}"}`),
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
				p.NoEffect = &NoEffect{File: "p.yaml", Keys: []string{"scope", "fingerprint.defaults"}, Class: ReadOnly}
			},
		},
		{
			// The rule was written to protect the tool, and does not.
			name: "exact rule without class on a read-only tool",
			file: "tools:\n  charge_card: {on_unknown: block, retry: {max_attempts: 2}}\n", tool: "charge_card", ann: readOnly,
			want: func(p *Policy) {
				p.Retry = &RetryRule{MaxAttempts: 2, Base: defaultRetryBase, Cap: defaultRetryCap, Deadline: DefaultDeadline}
				p.Written, p.Explicit = true, true
				p.NoEffect = &NoEffect{File: "p.yaml", Keys: []string{"on_unknown"}, Class: ReadOnly}
			},
		},
		{
			name: "exact rule of class read_only",
			file: "tools:\n  get: {class: read_only, journal: {arguments: clear}}\n", tool: "get", ann: nil,
			want: func(p *Policy) {
				p.Class, p.Source = ReadOnly, "policy file (get)"
				p.Journal.Arguments = JournalClear
				p.Written, p.Explicit = true, true
				p.NoEffect = &NoEffect{File: "p.yaml", Keys: []string{"journal.arguments"}, Class: ReadOnly}
			},
		},
		{
			// Idempotent from its annotations: a later call runs again.
			name: "exact rule with replay on an idempotent tool",
			file: "tools:\n  set_thermostat: {replay: always, retention: 1h}\n", tool: "set_thermostat", ann: idempotent,
			want: func(p *Policy) {
				p.Retention = time.Hour
				p.Written, p.Explicit = true, true
				p.NoEffect = &NoEffect{File: "p.yaml", Keys: []string{"replay"}, Class: Idempotent}
			},
		},
		{
			name: "glob rule with replay on an idempotent tool",
			file: "tools:\n  'set_*': {replay: undelivered}\n", tool: "set_thermostat", ann: idempotent,
			want: func(p *Policy) {
				p.Replay = ReplayUndelivered
				p.Written = true
			},
		},
		{
			// A default for every tool the glob covers: not a promise
			// about this one.
			name: "glob rule on a read-only tool",
			file: "tools:\n  '*': {retention: 1h}\n", tool: "get", ann: readOnly,
			want: func(p *Policy) {
				p.Retention = time.Hour
				p.Written = true
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
