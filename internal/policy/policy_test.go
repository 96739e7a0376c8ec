package policy

import (
	"encoding/json"
	"maps"
	"testing"
)

// TestParseListResultMatchesNamesExactly: annotations are read as MCP peers
// read them, names matched exactly, so that no spelling of a hint makes a
// tool with side effects pass as read-only, and a hint that is not a
// boolean counts as absent.
func TestParseListResultMatchesNamesExactly(t *testing.T) {
	for _, tt := range []struct {
		annotations string
		want        Class
	}{
		{`{"readOnlyHint":true}`, ReadOnly},
		{`{"idempotentHint":true}`, Idempotent},
		{`{"readOnlyHint":false,"readonlyhint":true}`, SideEffect},
		{`{"ReadOnlyHint":true}`, SideEffect},
		{`{"IdempotentHint":true}`, SideEffect},
		{`{"readOnlyHint":"yes"}`, SideEffect},
		{`{"readOnlyHint":1}`, SideEffect},
		{`{"read\u004fnlyHint":true}`, ReadOnly}, // an escape is the same name
		{`"not an object"`, SideEffect},
	} {
		page, err := ParseListResult(json.RawMessage(`{"tools":[{"name":"charge","Name":"other","annotations":` + tt.annotations + `}],"nextCursor":"c2"}`))
		if err != nil {
			t.Fatalf("annotations %s: %v", tt.annotations, err)
		}
		if len(page.Tools) != 1 || page.Tools[0].Name != "charge" || page.NextCursor != "c2" {
			t.Fatalf("annotations %s: page %+v; want the one tool, charge, and the cursor", tt.annotations, page)
		}
		if got := FromAnnotations(page.Tools[0].Annotations).Class; got != tt.want {
			t.Errorf("annotations %s: class %s; want %s", tt.annotations, got, tt.want)
		}
	}
	for _, bad := range []string{`[]`, `{"tools":{}}`, `{"tools":[1]}`, `{"tools":[`} {
		if _, err := ParseListResult(json.RawMessage(bad)); err == nil {
			t.Errorf("ParseListResult(%s) = nil error; want one", bad)
		}
	}
}

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
