package intercept

import (
	"encoding/json"
	"testing"
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
	}
	for _, tt := range tests {
		result := json.RawMessage(`{"content":[],"structuredContent":` + tt.content + `}`)
		if got := structuredIn(result, tt.path, tt.values); got != tt.want {
			t.Errorf("structuredIn(%s, %s, %q) = %v, want %v", tt.content, tt.path, tt.values, got, tt.want)
		}
	}
}
