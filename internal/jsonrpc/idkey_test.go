package jsonrpc

import (
	"encoding/json"
	"testing"
)

func TestIDKey(t *testing.T) {
	same := [][]string{
		{`"req-é"`, `"req-\u00e9"`, `"\u0072eq-é"`},
		{`"mcp-idempotent:1"`, `"mcp-idempotent\u003a1"`},
		{`1`, `1.0`, `1e0`, `10E-1`, `0.1e1`},
		{`0`, `-0`, `0.0`, `-0e5`},
		{`-3`, `-3.00`, `-0.3e1`},
		{`12345678901234567890123`, `12345678901234567890123.0`},
	}
	for _, group := range same {
		for _, id := range group[1:] {
			if a, b := string(IDKey(json.RawMessage(group[0]))), string(IDKey(json.RawMessage(id))); a != b {
				t.Errorf("IDKey(%s) = %q, IDKey(%s) = %q; want one key", group[0], a, id, b)
			}
		}
	}
	distinct := []string{`1`, `"1"`, `1.5`, `"1.5"`, `2`, `null`, `true`, `"a\"b"`, `"a"`, `12345678901234567890123`, `12345678901234567890124`, `1e401`, `1e402`}
	seen := map[string]string{}
	for _, id := range distinct {
		k := string(IDKey(json.RawMessage(id)))
		if other, ok := seen[k]; ok {
			t.Errorf("IDKey(%s) = IDKey(%s) = %q; want distinct keys", id, other, k)
		}
		seen[k] = id
	}
}

func BenchmarkIDKey(b *testing.B) {
	for _, id := range []string{`7`, `"req-42"`} {
		b.Run(id, func(b *testing.B) {
			raw := json.RawMessage(id)
			for b.Loop() {
				IDKey(raw)
			}
		})
	}
}
