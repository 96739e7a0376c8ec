package jsonrpc

import (
	"bytes"
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
	`"abcdefgh"`, `"abcdefghi"`, `"abcdefg\"h"`, `"abcdefgh\u00e9ijklmnop"`, "\"abcdefghij\x1fk\"", "\"abcdefghijklmno\xffp\"",
	`{"abcdefghijklmnop":"qrstuvwxyz0123456789","x":["abcdefgh","ijklmnop"]}`, `"abcdefgh\`, `"abcdefghijklmnopqrs`,
	"\x00", `"a"b`, `[1,[2,[3]],{"x":[]}]`, `{"":""}`, `{"\"":1}`,
	// Member names where quickString reads them: ending in its word, after
	// it, with an escape or a control character in it, a colon not at
	// once, and at the end of the input.
	`{"abcdefg":1}`, `{"abcdefgh":1}`, `{"abcdefg" :1}`, `[{"abcdefg":1,"abcdefg\u0041":2}]`, `{"a":{"abcdefg":{"b":1}}}`,
	"{\"abc\x01\":1}", "{\"abcdefg\x7f\":1}", `{"abc\"d":1}`, `{"ab\\":1}`, `{"abcdefg"}`, `{"abcdefg":`, `{"abcdefg"`,
	`{"ab`, `[{"a":1},{"b":2,}]`, `{"a":1,"b"}`, `{"a":1,"b":}`, `{"a":1,"abcdefg":[]}`,
}

func TestValid(t *testing.T) {
	for _, c := range validCases {
		if got, want := Valid([]byte(c)), json.Valid([]byte(c)); got != want {
			t.Errorf("Valid(%q) = %v, json.Valid says %v", c, got, want)
		}
	}
}

func TestValidDepth(t *testing.T) {
	for _, depth := range []int{MaxDepth - 1, MaxDepth, MaxDepth + 1} {
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
	strs := []string{"", "tools/call", "a b", `q"`, `b\s`, "<x>", "a&b", "tab\t", "é", "\x7f", "\xff", "\u2028"}
	for c := range 256 {
		strs = append(strs, "a"+string(byte(c))+"b")
	}
	for _, s := range strs {
		want, _ := json.Marshal(s)
		if got := AppendString([]byte("x"), s); string(got) != "x"+string(want) {
			t.Errorf("AppendString(%q) = %s, want x%s", s, got, want)
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

// TestSkipPlain puts every byte value at every place of a plain string and
// checks that skipPlain stops exactly at the special ones, by eights and
// in the tail.
func TestSkipPlain(t *testing.T) {
	for _, n := range []int{0, 1, 7, 8, 9, 16, 17} {
		for at := 0; at < n; at++ {
			for b := range 256 {
				data := []byte(strings.Repeat("a", n))
				data[at] = byte(b)
				want := n
				if b == '"' || b == '\\' || b < 0x20 {
					want = at
				}
				if got := skipPlain(data, 0); got != want {
					t.Fatalf("skipPlain(%q) = %d, want %d", data, got, want)
				}
			}
		}
	}
}

// TestSkipPlainPairs puts every pair of byte values in one eight-byte
// word, among plain bytes below and from 0x80 up, and beside the special
// ones, and checks that skipPlain stops at the first special one:
// specialBytes' flags may only go wrong above a byte that borrows, or at
// one from 0x80 up.
func TestSkipPlainPairs(t *testing.T) {
	special := func(b byte) bool { return b == '"' || b == '\\' || b < 0x20 }
	for _, fill := range []byte{'a', 0x20, 0x21, 0x23, 0x5b, 0x5d, 0x7f, 0x80, 0xa1, 0xa2, 0xdc, 0xff} {
		for a := range 256 {
			for b := range 256 {
				data := bytes.Repeat([]byte{fill}, 8)
				data[2], data[5] = byte(a), byte(b)
				want := 8
				switch {
				case special(byte(a)):
					want = 2
				case special(byte(b)):
					want = 5
				}
				if got := skipPlain(data, 0); got != want {
					t.Fatalf("skipPlain(%q) = %d, want %d", data, got, want)
				}
			}
		}
	}
}

// BenchmarkDecode decodes the two frames of a proxied tools/call: the
// client's request and the upstream's answer.
func BenchmarkDecode(b *testing.B) {
	request := []byte(`{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"charge_card","arguments":{"card":"4242-0000-0000-000017","amount":117}}}`)
	answer := []byte(`{"jsonrpc":"2.0","id":"mcp-idempotent:17","result":{"content":[{"type":"text","text":"charged 4242-0000-0000-000017 117 #17"}],"isError":false}}`)
	b.ReportAllocs()
	var m Message
	for b.Loop() {
		if DecodeInto(&m, request) != nil || DecodeInto(&m, answer) != nil {
			b.Fatal("refused")
		}
	}
}

// TestQuickString puts every byte value at every place of the word
// quickString reads, and after it, and checks that it only ever ends a
// string where scanString does, and that it does end a short plain one.
func TestQuickString(t *testing.T) {
	special := func(b byte) bool { return b == '"' || b == '\\' || b < 0x20 }
	for n := 1; n <= 10; n++ { // bytes after the opening quote
		for at := 0; at < n; at++ {
			for b := range 256 {
				data := []byte(`"` + strings.Repeat("a", n))
				data[1+at] = byte(b)
				for _, tail := range []string{"", `"`, `":1}`, `"       `} {
					d := append(bytes.Clone(data), tail...)
					got, want := quickString(d, 0), scanString(d, 0)
					if got != 0 && got != want {
						t.Fatalf("quickString(%q) = %d; scanString says %d", d, got, want)
					}
					if plainTo := strings.IndexFunc(string(d[1:]), func(r rune) bool {
						return r < 0x80 && special(byte(r))
					}); got == 0 && plainTo >= 0 && plainTo < 8 && d[1+plainTo] == '"' && len(d) >= 9 {
						t.Fatalf("quickString(%q) = 0, for a string that ends in its first word", d)
					}
				}
			}
		}
	}
}
