package fingerprint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
)

// FuzzRespelled checks the fingerprint against the meaning of the
// arguments, not against jcs: the same value written another way (every
// number as a plain mantissa and exponent with extra zeros, every string
// and name as \u escapes, members in reverse order, other white space)
// has the same fingerprint, and the value with one number changed by one
// unit in its last place has another. FuzzSum's re-encoding keeps each
// number as written, so this is what checks that number spelling, and
// the switch between appendSimple and the exact path, never changes it.
func FuzzRespelled(f *testing.F) {
	for _, c := range simpleCases {
		f.Add([]byte(c), uint8(0))
	}
	f.Add([]byte(`{"n":[0.1,1e400,-0,12345678901234567,5e-324,1.5e300,123456789012345]}`), uint8(3))
	f.Add([]byte(`{"é":"\ud83d\ude00","b":{"mcp-idempotent/decimal":1e-400}}`), uint8(17))
	h := newHasher(f)
	f.Fuzz(func(t *testing.T, data []byte, zeros uint8) {
		if !json.Valid(data) || !isObject(data) {
			return
		}
		want, err := h.SumValid(withArgs(string(data)))
		if err != nil {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("Sum accepted %q, which does not decode: %v", data, err)
		}
		r := respeller{zeros: int(zeros % 40)}
		same, ok := r.value(nil, v)
		if !ok {
			return // a number near the bounds, which respelling would cross
		}
		if got, err := h.SumValid(withArgs(string(same))); err != nil || got != want {
			t.Fatalf("%q respelled as %q: %.16s, %v; want %.16s", data, same, got, err, want)
		}
		r.bump = true
		other, ok := r.value(nil, v)
		if !ok || r.bump {
			return // no number to change
		}
		if got, err := h.SumValid(withArgs(string(other))); err == nil && got == want {
			t.Fatalf("%q and %q, another number, share a fingerprint", data, other)
		}
	})
}

// A respeller writes a decoded JSON value another way.
type respeller struct {
	zeros int  // zeros added to every number's mantissa
	bump  bool // the next number gets a digit 1 added after those zeros
}

func (r *respeller) value(b []byte, v any) ([]byte, bool) {
	ok := true
	switch v := v.(type) {
	case map[string]any:
		names := make([]string, 0, len(v))
		for k := range v {
			names = append(names, k)
		}
		slices.Sort(names)
		slices.Reverse(names)
		b = append(b, "{ "...)
		for i, k := range names {
			if i > 0 {
				b = append(b, " ,\n"...)
			}
			b = append(escapeAll(b, k), " :\t"...)
			if b, ok = r.value(b, v[k]); !ok {
				return nil, false
			}
		}
		b = append(b, "\r\n}"...)
	case []any:
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, " , "...)
			}
			if b, ok = r.value(b, e); !ok {
				return nil, false
			}
		}
		b = append(b, " ]"...)
	case string:
		b = escapeAll(b, v)
	case json.Number:
		s, ok := respellNumber(string(v), r.zeros, r.bump)
		if !ok {
			return nil, false
		}
		r.bump = false
		b = append(b, s...)
	default: // null, true, false
		m, _ := json.Marshal(v)
		b = append(b, m...)
	}
	return b, true
}

// respellNumber writes the number literal s as an integer mantissa, with
// zeros more zeros, and an exponent; with bump, a 1 after them makes it
// another number. False for a literal whose respelling would be past the
// bounds the fingerprint reads (maxExponent, maxNumberLength).
func respellNumber(s string, zeros int, bump bool) (string, bool) {
	sign := ""
	if s[0] == '-' {
		sign, s = "-", s[1:]
	}
	exp := 0
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+"))
		if err != nil {
			return "", false
		}
		exp, s = e, s[:i]
	}
	whole, frac, _ := strings.Cut(s, ".")
	mant := whole + frac + strings.Repeat("0", zeros)
	exp -= len(frac) + zeros
	if bump {
		mant += "1"
		exp--
	}
	if mant = strings.TrimLeft(mant, "0"); mant == "" {
		mant = "0"
	}
	out := sign + mant + "e" + strconv.Itoa(exp)
	return out, len(out) <= maxNumberLength && exp >= -maxExponent && exp <= maxExponent
}

// escapeAll appends s as a JSON string with every character escaped,
// those past U+FFFF as surrogate pairs, the high one in upper case.
func escapeAll(b []byte, s string) []byte {
	b = append(b, '"')
	for _, c := range s {
		if c > 0xffff {
			hi, lo := utf16.EncodeRune(c)
			b = fmt.Appendf(b, `\u%04X\u%04x`, hi, lo)
			continue
		}
		b = fmt.Appendf(b, `\u%04x`, c)
	}
	return append(b, '"')
}
