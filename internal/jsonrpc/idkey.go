package jsonrpc

import (
	"bytes"
	"encoding/json"
	"math/big"
	"strconv"
)

// IDKey returns the key under which a request id is remembered until its
// answer comes: one key for the ids that JSON reads as one value, however
// they are spelled, since a peer that decodes and encodes again answers
// with its own spelling. A string is keyed by its value ("req-\u00e9" and
// "req-é" are one id), a number by its exact value (1, 1.0 and 1e0 are one;
// 0 and -0 too), anything else by its text. The key of an id spelled the
// usual way (a string without escapes, an integer) is id itself, so that
// looking it up costs no allocation. id must be valid JSON.
func IDKey(id json.RawMessage) []byte {
	if len(id) == 0 {
		return id
	}
	switch c := id[0]; {
	case c == '"':
		if bytes.IndexByte(id, '\\') < 0 {
			return id // the common case: the text is the value
		}
		if v, ok := StringValue(id); ok {
			// Not a text without escapes, which holds no quote: a key of
			// this form is never another string's.
			return []byte(`"` + v + `"`)
		}
	case c == '-' || '0' <= c && c <= '9':
		return numberKey(id)
	}
	return id
}

// numberKey returns the key of the JSON number n: its exact value as
// big.Rat writes it ("1", "-3/2"), which for an integer spelled without a
// fraction or an exponent is its text.
func numberKey(n []byte) []byte {
	spelled, exp := numberShape(n)
	if !spelled && string(n) != "-0" {
		return n
	}
	r := exactNumber(n, exp)
	if r == nil {
		return n
	}
	return []byte(r.RatString())
}

// maxSpelled bounds the text of a number whose exact value is worked
// out: big.Rat takes time quadratic in its digits, and a peer could send
// millions. No id a peer spells with a fraction or an exponent is that
// long; ValidID refuses a longer one.
const maxSpelled = 64

// numberShape reports whether the JSON number n has a fraction or an
// exponent, and where its exponent begins (-1 for none).
func numberShape(n []byte) (spelled bool, exp int) {
	exp = -1
	for i, c := range n {
		switch c {
		case '.':
			spelled = true
		case 'e', 'E':
			spelled, exp = true, i
		}
	}
	return spelled, exp
}

// exactNumber returns the exact value of the JSON number n, whose
// exponent begins at n[exp] (-1 for none), or nil for one too long or
// whose exponent is too large to expand.
func exactNumber(n []byte, exp int) *big.Rat {
	if len(n) > maxSpelled {
		return nil
	}
	if exp >= 0 {
		e, err := strconv.Atoi(string(n[exp+1:]))
		if err != nil || e > 400 || e < -400 {
			return nil
		}
	}
	r, ok := new(big.Rat).SetString(string(n))
	if !ok {
		return nil
	}
	return r
}
