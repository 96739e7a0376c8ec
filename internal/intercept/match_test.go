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
