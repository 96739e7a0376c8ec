package intercept

import (
	"encoding/json"
	"regexp"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
)

func TestStructuredIn(t *testing.T) {
	tests := []struct {
		content string // structuredContent
		path    string
		values  []string // JSON text, as the policy keeps them
		want    bool
	}{
		{`{"status":"done"}`, "status", []string{`"done"`}, true},
		{`{"status":"running"}`, "status", []string{`"done"`}, false},
		{`{"status":429}`, "status", []string{`429`}, true},
		// A string matches its unquoted form.
		{`{"status":"429"}`, "status", []string{`429`}, true},
		{`{"status":true}`, "status", []string{`"true"`}, false},
		{`{"a":{"b":"x"}}`, "a", []string{`"x"`}, false},
		{`{"a":{"b":"x"}}`, "a.b", []string{`"x"`}, true},
		// Escapes spell the same string: the policy writes & as \u0026.
		{`{"team":"R&D"}`, "team", []string{`"R\u0026D"`}, true},
		{`{"team":"R\u0026D"}`, "team", []string{`"R&D"`}, true},
		{`{"state":"d\u006fne"}`, "state", []string{`"done"`}, true},
		{`{"state":"d\u006fne"}`, "state", []string{`"dome"`}, false},
		// Numbers are one value however spelt.
		{`{"status":429.0}`, "status", []string{`429`}, true},
		{`{"status":4.29E+2}`, "status", []string{`429`}, true},
		{`{"status":42900e-2}`, "status", []string{`429`}, true},
		{`{"status":429}`, "status", []string{`429.00`}, true},
		{`{"status":429.5}`, "status", []string{`429`}, false},
		{`{"status":-429}`, "status", []string{`429`}, false},
		{`{"status":0.1}`, "status", []string{`1e-1`}, true},
		{`{"status":-0.0}`, "status", []string{`0`}, true},
		{`{"status":1e400}`, "status", []string{`10e399`}, true},
		{`{"status":9007199254740993}`, "status", []string{`9007199254740992`}, false},
		{`{"status":1e99999999999999999999}`, "status", []string{`1e99999999999999999999`}, true},
		{`{"status":1e99999999999999999999}`, "status", []string{`10e99999999999999999998`}, false},
		{`{"status":"429.0"}`, "status", []string{`429`}, false},
	}
	for _, tt := range tests {
		result := json.RawMessage(`{"content":[],"structuredContent":` + tt.content + `}`)
		if got := structuredIn(result, tt.path, tt.values); got != tt.want {
			t.Errorf("structuredIn(%s, %s, %q) = %v, want %v", tt.content, tt.path, tt.values, got, tt.want)
		}
	}
}

// TestFirstMatchText: result_text is matched against the result's texts
// joined by newlines, as a regexp reads any text: "$" at the very end,
// and before a newline only under (?m).
func TestFirstMatchText(t *testing.T) {
	const one = `{"content":[{"type":"text","text":"rate limited"}],"isError":true}`
	const two = `{"content":[{"type":"text","text":"rate limited"},{"type":"text","text":"try later"}],"isError":true}`
	tests := []struct {
		result, pattern string
		want            bool
	}{
		{one, `^rate limited$`, true},
		{one, `\brate limited\b`, true},
		{one, `^limited`, false},
		{two, `^rate limited$`, false},
		{two, `(?m)^rate limited$`, true},
		{two, `limited\ntry`, true},
		{two, `^try later$`, false},
		{two, `(?m)^try later$`, true},
		{`{"content":[]}`, `^$`, true},
	}
	for _, tt := range tests {
		m := []policy.ResultMatch{{Text: regexp.MustCompile(tt.pattern)}}
		if _, got := firstMatch(json.RawMessage(tt.result), m); got != tt.want {
			t.Errorf("%q on %s: matched %t, want %t", tt.pattern, tt.result, got, tt.want)
		}
	}
}
