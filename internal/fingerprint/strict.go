package fingerprint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// checkStrict refuses in raw, a valid JSON value, what jcs.Transform
// refuses and decoding with encoding/json hides: invalid UTF-8, a lone
// surrogate escape, and a member name twice in one object.
func checkStrict(raw []byte) error {
	if !utf8.Valid(raw) {
		return errors.New("canonicalising: invalid UTF-8")
	}
	if err := checkSurrogates(raw); err != nil {
		return err
	}
	return checkDuplicates(raw)
}

// checkSurrogates refuses a \u escape of a surrogate that is not a high
// one followed at once by an escaped low one.
func checkSurrogates(raw []byte) error {
	in := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case c == '"':
			in = !in
		case c == '\\' && in:
			i++
			if i >= len(raw) || raw[i] != 'u' {
				continue
			}
			u, ok := hex4(raw, i+1)
			i += 4
			switch {
			case !ok:
				return errors.New("canonicalising: bad \\u escape")
			case u >= 0xdc00 && u <= 0xdfff:
				return fmt.Errorf("canonicalising: lone low surrogate \\u%04x", u)
			case u >= 0xd800 && u <= 0xdbff:
				if i+2 >= len(raw) || raw[i+1] != '\\' || raw[i+2] != 'u' {
					return fmt.Errorf("canonicalising: lone high surrogate \\u%04x", u)
				}
				if lo, ok := hex4(raw, i+3); !ok || lo < 0xdc00 || lo > 0xdfff {
					return fmt.Errorf("canonicalising: lone high surrogate \\u%04x", u)
				}
				i += 6
			}
		}
	}
	return nil
}

// hex4 returns the value of the four hex digits at raw[i:].
func hex4(raw []byte, i int) (rune, bool) {
	if i+4 > len(raw) {
		return 0, false
	}
	var u rune
	for _, c := range raw[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			u = u<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			u = u<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			u = u<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return u, true
}

// checkDuplicates refuses an object that holds a member name twice, the
// names compared as decoded ("a" and "\u0061" are one).
func checkDuplicates(raw []byte) error {
	type frame struct {
		names   map[string]bool // nil in an array
		wantKey bool
	}
	var stack []frame
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil // the end; a malformed value is refused later
		}
		if n := len(stack); n > 0 && stack[n-1].wantKey {
			if name, ok := tok.(string); ok {
				if stack[n-1].names[name] {
					return fmt.Errorf("canonicalising: Duplicate key: %q", name)
				}
				stack[n-1].names[name], stack[n-1].wantKey = true, false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{names: map[string]bool{}, wantKey: true})
			continue
		case json.Delim('['):
			stack = append(stack, frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		// A value ended: in an object, a name comes next.
		if n := len(stack); n > 0 && stack[n-1].names != nil {
			stack[n-1].wantKey = true
		}
	}
}
