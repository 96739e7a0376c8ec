package mcp

import (
	"encoding/json"
	"slices"
	"testing"
)

func TestResults(t *testing.T) {
	r := TextResult("hello", true, map[string]any{MetaOutcome: "unknown"})
	if want := `{"_meta":{"mcp-idempotent/outcome":"unknown"},"content":[{"text":"hello","type":"text"}],"isError":true}`; string(r) != want {
		t.Errorf("TextResult = %s, want %s", r, want)
	}
	r = WithText(r, "and more")
	if got, want := Texts(r), []string{"hello", "and more"}; !slices.Equal(got, want) {
		t.Errorf("Texts(WithText(...)) = %q, want %q", got, want)
	}
	if got := string(WithText(json.RawMessage(`[1]`), "x")); got != `[1]` {
		t.Errorf("WithText of a result that is not an object = %s; want it as it was", got)
	}
	if got := TextResult("ok", false, nil); string(got) != `{"content":[{"text":"ok","type":"text"}],"isError":false}` {
		t.Errorf("TextResult without _meta = %s", got)
	}
}
