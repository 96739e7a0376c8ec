package jsonrpc

import (
	"encoding/json"
	"strings"
	"testing"
)

// validCases are inputs on which Valid must agree with json.Valid; they seed
// FuzzValid too.
var validCases = []string{
	``, ` `, `{}`, `[]`, ` {} `, `{`, `}`, `[`, `]`, `{]`, `[}`, `{"a":1}`, `{"a":1,}`, `{,"a":1}`,
	`{"a"}`, `{"a":}`, `{a:1}`, `{"a" : 1 , "b" : [ 1 , 2 ] }`, `[1,]`, `[,1]`, `[1 2]`, `{"a":1 "b":2}`,
	`"x"`, `"`, `"\"`, `"\\"`, `"\/\b\f\n\r\t"`, `"\u00e9"`, `"\u00E9"`, `"\u00g9"`, `"\u00e"`, `"\x"`,
	"\"a\x01\"", "\"a\x7f\"", "\"\xff\xfe\"", "\"\t\"", `"é"`, `"\ud83d\ude00"`, `"\ud83d"`,
	`0`, `-0`, `01`, `-`, `-a`, `1.`, `1.5`, `.5`, `1e5`, `1E+5`, `1e-5`, `1e`, `1e+`, `1.5e3`, `-1.5E-3`, `00`, `0x1`, `1ee2`,
	`true`, `false`, `null`, `tru`, `truex`, `nul`, `nulll`, `True`, `[true,false,null]`,
	"{\n\t\"a\" :\r\n1}", `{"a":{"b":{"c":[[[]]]}}}`, `[[[[`, `]]]]`, `{"a":[}`, `{} {}`, `1 2`, `{}x`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"card":"4242","amount":100}}}`,
	"\x00", `"a"b`, `[1,[2,[3]],{"x":[]}]`, `{"":""}`, `{"\"":1}`,
}

func TestValid(t *testing.T) {
	for _, c := range validCases {
		if got, want := Valid([]byte(c)), json.Valid([]byte(c)); got != want {
			t.Errorf("Valid(%q) = %v, json.Valid says %v", c, got, want)
		}
	}
}

func TestValidDepth(t *testing.T) {
	for _, depth := range []int{maxNestingDepth - 1, maxNestingDepth, maxNestingDepth + 1} {
		for _, open := range []string{"[", `{"a":`} {
			close := "]"
			if open != "[" {
				close = "}"
			}
			for _, inner := range []string{"", "1"} {
				if open != "[" && inner == "" {
					inner = "1"
				}
				doc := []byte(strings.Repeat(open, depth) + inner + strings.Repeat(close, depth))
				if got, want := Valid(doc), json.Valid(doc); got != want {
					t.Errorf("depth %d of %s%s: Valid = %v, json.Valid = %v", depth, open, inner, got, want)
				}
			}
		}
	}
}

func FuzzValid(f *testing.F) {
	for _, c := range validCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := Valid(data), json.Valid(data); got != want {
			t.Fatalf("Valid(%q) = %v, json.Valid says %v", data, got, want)
		}
	})
}

func BenchmarkValid(b *testing.B) {
	frame := []byte(`{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"charge_card","arguments":{"card":"4242-0000-0000-000017","amount":117}}}`)
	b.Run("Valid", func(b *testing.B) {
		for b.Loop() {
			Valid(frame)
		}
	})
	b.Run("json.Valid", func(b *testing.B) {
		for b.Loop() {
			json.Valid(frame)
		}
	})
}

func TestAppendString(t *testing.T) {
	for _, s := range []string{"", "tools/call", "a b", `q"`, `b\s`, "<x>", "a&b", "tab\t", "é", "\x7f", "\xff", "\u2028"} {
		want, _ := json.Marshal(s)
		if got := appendString([]byte("x"), s); string(got) != "x"+string(want) {
			t.Errorf("appendString(%q) = %s, want x%s", s, got, want)
		}
	}
}

// TestDecodeKnownMethod checks that a method spelled with escapes reads as
// the same method, and that a known one costs no copy.
func TestDecodeKnownMethod(t *testing.T) {
	for _, frame := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call"}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools\/call"}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools\u002fcall"}`,
	} {
		m, err := Decode([]byte(frame))
		if err != nil || m.Method != "tools/call" {
			t.Errorf("Decode(%s) = %+v, %v", frame, m, err)
		}
	}
	frame := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}`)
	if allocs := testing.AllocsPerRun(100, func() { Decode(frame) }); allocs > 1 {
		t.Errorf("Decode allocates %v times, want 1 (the Message)", allocs)
	}
}
