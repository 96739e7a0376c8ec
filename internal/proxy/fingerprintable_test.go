package proxy

import (
	"encoding/json"
	"log/slog"
	"maps"
	"strings"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
)

// TestSchemaDefaultsTheFingerprintRefuses: a listed tool's default that
// the fingerprint cannot read (one name twice, a lone surrogate, a number
// past its bounds) is not kept for filling in: filled in, it would have
// every call that omits the member refused for arguments the caller
// never sent.
func TestSchemaDefaultsTheFingerprintRefuses(t *testing.T) {
	for _, c := range []struct {
		schema string
		want   map[string]json.RawMessage
	}{
		{`{"properties":{"a":{"default":{"x":1,"x":2}},"b":{"default":"\ud800"},"c":{"default":1e99999},"d":{"default":1}}}`,
			map[string]json.RawMessage{"d": json.RawMessage(`1`)}},
		{`{"properties":{"a":{"default":{"x":1,"x":2}}}}`, nil},
		{`{"properties":{"region":{"default":"us-east-1"}}}`, map[string]json.RawMessage{"region": json.RawMessage(`"us-east-1"`)}},
	} {
		table := newToolTable(nil, slog.New(slog.DiscardHandler), nil)
		table.learn(mcp.ListPage{Tools: []mcp.Tool{{Name: "t", InputSchema: json.RawMessage(c.schema)}}})
		info, ok := table.cached("t")
		if !ok {
			t.Fatalf("tool t not learned from %s", c.schema)
		}
		var got map[string]json.RawMessage
		if info.schema != nil {
			got = info.schema.Defaults
		}
		if !maps.EqualFunc(got, c.want, func(x, y json.RawMessage) bool { return string(x) == string(y) }) {
			t.Errorf("defaults of %s: %q, want %q", c.schema, got, c.want)
		}
	}
}

// TestDroppedSchemaDefaultsWarnedOnce: the log says which defaults of a
// tool's inputSchema were left out, once however often the tools are
// listed, and again only when what is left out changes.
func TestDroppedSchemaDefaultsWarnedOnce(t *testing.T) {
	var log syncBuffer
	warned := NewToolWarnings()
	list := func(schema string) {
		table := newToolTable(nil, slog.New(slog.NewTextHandler(&log, nil)), warned)
		table.learn(mcp.ListPage{Tools: []mcp.Tool{{Name: "charge", InputSchema: json.RawMessage(schema)}}})
	}
	bad := `{"properties":{"memo":{"default":"\ud800"},"amount":{"default":1e99999},"region":{"default":"eu"}}}`
	for range 3 {
		list(bad)
	}
	if n := strings.Count(log.String(), "defaults the fingerprint cannot read"); n != 1 {
		t.Fatalf("%d warnings of dropped defaults after three listings; want 1:\n%s", n, log.String())
	}
	for _, want := range []string{"level=WARN", "tool=charge", `members="amount, memo"`} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the warning does not say %s:\n%s", want, log.String())
		}
	}
	list(`{"properties":{"region":{"default":"eu"}}}`)
	list(bad)
	if n := strings.Count(log.String(), "defaults the fingerprint cannot read"); n != 2 {
		t.Fatalf("%d warnings after the defaults were mended and broken again; want 2:\n%s", n, log.String())
	}
}
