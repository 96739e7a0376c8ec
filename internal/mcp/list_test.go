package mcp

import (
	"encoding/json"
	"maps"
	"testing"
)

func TestSchemaDefaults(t *testing.T) {
	for _, tt := range []struct {
		schema string
		want   map[string]json.RawMessage
	}{
		{`{"type":"object","properties":{"region":{"type":"string","default":"us-east-1"},"n":{"default":3},"x":{}}}`,
			map[string]json.RawMessage{"region": json.RawMessage(`"us-east-1"`), "n": json.RawMessage(`3`)}},
		{`{"Properties":{"region":{"default":"us-east-1"}}}`, nil},
		{`{"properties":{"region":{"Default":"us-east-1"}}}`, nil},
		{`{"properties":{"a":true,"b":{"default":null}}}`, map[string]json.RawMessage{"b": json.RawMessage(`null`)}},
		{``, nil},
		{`{"properties":`, nil},
	} {
		got := SchemaDefaults(json.RawMessage(tt.schema))
		if !maps.EqualFunc(got, tt.want, func(a, b json.RawMessage) bool { return string(a) == string(b) }) || (got == nil) != (tt.want == nil) {
			t.Errorf("SchemaDefaults(%s) = %s; want %s", tt.schema, got, tt.want)
		}
	}
}
