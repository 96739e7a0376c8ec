package jsonrpc

import (
	"encoding/json"
	"strings"
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

// TestValidIDIsExact: a number is an integer id by its exact value, not
// by a double's: 1.0000000000000000001 reads as 1 in a double, and a
// server reading it so would answer under 1, which matches no request.
func TestValidIDIsExact(t *testing.T) {
	for id, want := range map[string]bool{
		`1`: true, `-3`: true, `1.0`: true, `1e0`: true, `10E-1`: true, `1e300`: true,
		`12345678901234567890123`: true, `"a"`: true,
		`1.5`: false, `1.0000000000000000001`: false, `0.` + strings.Repeat("0", 400) + `1`: false,
		`1e400`: false, `1.` + strings.Repeat("0", 70): false, `null`: false, `true`: false,
	} {
		if got := ValidID(json.RawMessage(id)); got != want {
			t.Errorf("ValidID(%.40s) = %v; want %v", id, got, want)
		}
	}
}

// TestIDKeyOfALongNumberIsItsText: a number spelled with a fraction or an
// exponent and longer than any id is keyed as written, its value not
// worked out: big.Rat's time grows with the square of its digits, and a
// cancellation may name an id of millions (DESIGN 10).
func TestIDKeyOfALongNumberIsItsText(t *testing.T) {
	for _, n := range []string{"1." + strings.Repeat("3", 2_000_000), "1" + strings.Repeat("0", 100) + "e-100"} {
		if got := IDKey(json.RawMessage(n)); string(got) != n {
			t.Errorf("IDKey of a %d-byte number = %.20s...; want it as written", len(n), got)
		}
	}
}
