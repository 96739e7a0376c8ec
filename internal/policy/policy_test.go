package policy

import (
	"encoding/json"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
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
		page, err := mcp.ParseListResult(json.RawMessage(`{"tools":[{"name":"charge","Name":"other","annotations":` + tt.annotations + `}],"nextCursor":"c2"}`))
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
		if _, err := mcp.ParseListResult(json.RawMessage(bad)); err == nil {
			t.Errorf("mcp.ParseListResult(%s) = nil error; want one", bad)
		}
	}
}
