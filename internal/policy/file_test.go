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
	f, err := Load(t.Context(), "testdata/example.yaml")
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
	_, err := Load(t.Context(), "testdata/no-such-file.yaml")
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
			// Only an approval that asks someone needs a record.
			name:  "a read-only tool that asks no approval",
			in:    "tools:\n  get: {class: read_only, approval: none}\n",
			rules: []string{"get"},
			check: func(t *testing.T, f *File) {
				if p := f.Resolve("get", nil); p.Class != ReadOnly || p.NeedsApproval() {
					t.Errorf("get: class %s, approval %s", p.Class, p.Approval)
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
