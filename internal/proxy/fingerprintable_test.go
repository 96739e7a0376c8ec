package proxy

import (
	"encoding/json"
	"log/slog"
	"maps"
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
		got := info.defaults
		if !maps.EqualFunc(got, c.want, func(x, y json.RawMessage) bool { return string(x) == string(y) }) {
			t.Errorf("defaults of %s: %q, want %q", c.schema, got, c.want)
		}
	}
}
