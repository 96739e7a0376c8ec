package proxy

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

// TestNoEffectWarnedOncePerTool: a rule naming a tool exactly that sets
// keys needing a record, for a tool the server annotates read-only, has
// no effect: the log says so, naming the tool, the file, the keys and
// why, once, however often and in however many sessions the tools are
// listed. A glob's keys over a read-only tool are a default, not a
// promise, and are not warned of.
func TestNoEffectWarnedOncePerTool(t *testing.T) {
	file, err := policy.Parse("p.yaml", []byte("tools:\n  charge_card: {on_unknown: block}\n  'get_*': {retention: 1h}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var log syncBuffer
	// Two sessions of one process, as serve runs them, each listing the
	// tools twice.
	in := newInterceptor(memstore.New(memstore.Options{}))
	warned := NewToolWarnings()
	for range 2 {
		r := newRigOptions(t, 0, Options{
			Interceptor:  in,
			Resolve:      func(tool string, ann *mcp.Annotations) policy.Policy { return file.Resolve(tool, ann) },
			Logger:       slog.New(slog.NewTextHandler(&log, nil)),
			ToolWarnings: warned,
		})
		listTwice(t, r)
	}
	var warnings []string
	for line := range strings.Lines(log.String()) {
		if strings.Contains(line, "no effect") {
			warnings = append(warnings, line)
		}
	}
	if len(warnings) != 1 {
		t.Fatalf("%d warnings of keys without effect in two sessions listing twice each; want 1:\n%s", len(warnings), log.String())
	}
	for _, want := range []string{"level=WARN", "tool=charge_card", "policy=p.yaml", "rule=charge_card", "keys=on_unknown",
		`class_from="annotation readOnlyHint"`, "class: side_effect or idempotent"} {
		if !strings.Contains(warnings[0], want) {
			t.Errorf("the warning does not say %s:\n%s", want, warnings[0])
		}
	}
}

// TestNoEffectOfReplayOnAnIdempotentTool: a rule naming a tool the
// server annotates idempotent that sets replay has no effect either: a
// later identical call runs again. The log says so, with the way out.
func TestNoEffectOfReplayOnAnIdempotentTool(t *testing.T) {
	file, err := policy.Parse("p.yaml", []byte("tools:\n  set_thermostat: {replay: always}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var log syncBuffer
	r := newRigOptions(t, 0, Options{
		Interceptor:  newInterceptor(memstore.New(memstore.Options{})),
		Resolve:      func(tool string, ann *mcp.Annotations) policy.Policy { return file.Resolve(tool, ann) },
		Logger:       slog.New(slog.NewTextHandler(&log, nil)),
		ToolWarnings: NewToolWarnings(),
	})
	r.client.send(t, `{"jsonrpc":"2.0","id":"l1","method":"tools/list"}`)
	r.upstream.next(t, "upstream")
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"l1","result":{"tools":[{"name":"set_thermostat","inputSchema":{"type":"object"},"annotations":{"idempotentHint":true}}]}}`)
	r.client.next(t, "client")
	for _, want := range []string{"level=WARN", "an idempotent tool sets replay, which has no effect", "tool=set_thermostat", "keys=replay",
		`class_from="annotation idempotentHint"`, "set class: side_effect in the rule"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the log does not say %s:\n%s", want, log.String())
		}
	}
}

// listTwice has the client of r list the tools, the upstream announce a
// change, and the client list them again: each listing holds charge_card
// and get_price, both annotated read-only.
func listTwice(t *testing.T, r *rig) {
	t.Helper()
	listing := `"result":{"tools":[` +
		`{"name":"charge_card","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}},` +
		`{"name":"get_price","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}]}}`
	for i, id := range []string{`"l1"`, `"l2"`} {
		if i > 0 {
			r.upstream.send(t, `{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)
			r.client.next(t, "client")
		}
		r.client.send(t, `{"jsonrpc":"2.0","id":`+id+`,"method":"tools/list"}`)
		r.upstream.next(t, "upstream")
		r.upstream.send(t, `{"jsonrpc":"2.0","id":`+id+`,`+listing)
		r.client.next(t, "client")
	}
}
