package fingerprint

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/gowebpki/jcs"
)

var simpleCases = []string{
	`{}`, `[]`, `{"card":"4242-0000-0000-000017","amount":117}`, ` { "b" : [ 1 , 2 ] , "a" : { "z" : null , "y" : true } } `,
	`{"a":1,"a":2}`, `{"b":1,"a":2,"c":3,"B":4,"_":5,"0":6}`, `"x"`, `123`, `-5`, `-0`, `0`, `00`, `01`, `1.0`, `1e2`, `1E2`,
	`123456789012345`, `1234567890123456`, `-123456789012345`, `{"a":"\u00e9"}`, `{"a":"é"}`, `{"a":"x/y<>&\u007f"}`,
	"{\"a\":\"\x7f\"}", `{"a":"tab\there"}`, `{"a":[1,[2,[3,{"b":[]}]]]}`, `{"a":}`, `{"a" 1}`, `{"a":1,}`, `[1,]`, `{"a":1}x`,
	`tru`, `nul`, `falsee`, `[true,false,null]`, `{"q":"a\"b"}`, `{"":""}`, `{"k":{"k":{"k":{}}}}`,
	`{"l":[{"b":2,"a":1},{"d":4,"c":3}],"m":-12,"n":0}`,
	`{"1":1,"10":2,"2":3,"a":4,"A":5,"~":6}`, `{"a":1 , "b":2}`, "{\n\"a\":\r\n1\t}",
	`{"mcp-idempotent/decimal":"1/3"}`, `{"b":{"mcp-idempotent/decimal~":1},"a":"decimal"}`, `{"mcp-idempotent/decima":1}`,
}

func TestSimple(t *testing.T) {
	for _, c := range simpleCases {
		checkSimple(t, []byte(c))
	}
	if _, ok := appendSimple(nil, []byte(`{"card":"4242","amount":100,"nested":{"b":[1,2],"a":null}}`)); !ok {
		t.Error("typical arguments did not take the simple path")
	}
}

func checkSimple(t *testing.T, data []byte) {
	t.Helper()
	prefix := []byte("prefix:")
	got, ok := appendSimple(bytes.Clone(prefix), data)
	if !json.Valid(data) {
		// appendSimple trusts its input's grammar: for invalid JSON
		// its answer means nothing, but it must come back (and not
		// panic).
		return
	}
	if !ok {
		return
	}
	want, err := jcs.Transform(data)
	if err != nil {
		t.Fatalf("appendSimple accepted %q, which jcs refuses: %v", data, err)
	}
	if !bytes.HasPrefix(got, prefix) || !bytes.Equal(got[len(prefix):], want) {
		t.Fatalf("appendSimple(%q) = %q, jcs gives %q", data, got, want)
	}
	// appendCanonicalValue takes this path without asking
	// exactNumbers: it must have left the value as it is.
	if ex, err := exactNumbers(data); err != nil || !bytes.Equal(ex, data) {
		t.Fatalf("appendSimple accepted %q, which exactNumbers makes %q, %v", data, ex, err)
	}
}

// FuzzSimple checks that wherever appendSimple answers for valid JSON, it
// gives exactly what jcs.Transform gives, and that it reads any other
// input without panicking.
func FuzzSimple(f *testing.F) {
	for _, c := range simpleCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkSimple(t, data)
	})
}

func BenchmarkCanonicalValue(b *testing.B) {
	args := []byte(`{"card":"4242-0000-0000-000017","amount":117}`)
	b.Run("simple", func(b *testing.B) {
		b.ReportAllocs()
		var out []byte
		for b.Loop() {
			out, _ = appendCanonicalValue(out[:0], args, true)
		}
	})
	// Members that come in canonical order are written once.
	sorted := []byte(`{"amount":117,"card":"4242-0000-0000-000017"}`)
	b.Run("sorted", func(b *testing.B) {
		b.ReportAllocs()
		var out []byte
		for b.Loop() {
			out, _ = appendCanonicalValue(out[:0], sorted, true)
		}
	})
	b.Run("jcs", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			jcs.Transform(args)
		}
	})
}

// TestSimpleString checks the string reader, which reads eight bytes at
// a time, against the byte-by-byte rule: every byte value at every place
// of strings of every length across one and two words, followed by a
// plain byte or a special one.
func TestSimpleString(t *testing.T) {
	// A control character is not valid JSON in a string: str, which
	// trusts its input, need not tell it apart.
	plain := func(c byte) bool { return c <= 0x7e && c != '"' && c != '\\' }
	for n := 1; n <= 20; n++ {
		for k := 0; k < n; k++ {
			for b := 0; b < 256; b++ {
				for _, after := range []byte{'a', 0x01, 0xff} {
					body := bytes.Repeat([]byte{'a'}, n)
					body[k] = byte(b)
					if k+1 < n {
						body[k+1] = after
					}
					src := append(append([]byte{'"'}, body...), '"')
					// What is read: up to the first quote, if no byte
					// before it is special.
					wantLen, wantOK := n, true
					for j, c := range body {
						if c == '"' || !plain(c) {
							wantLen, wantOK = j, c == '"'
							break
						}
					}
					p := simpleParser{src: src}
					ok := p.str()
					if ok != wantOK || ok && p.i != wantLen+2 {
						t.Fatalf("str(%q) = %v, ending at %d; want %v, %d bytes", src, ok, p.i, wantOK, wantLen)
					}
				}
			}
		}
	}
}
