package journal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Verify parses every line of a journal, so the parse is a walk of its
// own over the line's bytes: encoding/json's (json.Valid, then a
// Decoder's tokens and an Unmarshal per member) took most of Verify's
// time. The walk refuses what encoding/json refuses, and reads member
// names as encoding/json decodes them, so a name spelled with an escape,
// or with bytes that are not UTF-8, is the name it decodes to:
// TestParseLineAgrees and FuzzParseLine compare the two.

// maxDepth is how deeply arrays and objects may nest, the top-level object
// counting as 1: encoding/json's limit, past which json.Valid refuses.
const maxDepth = 10000

var (
	errInvalid   = errors.New("not valid JSON")
	errNotObject = errors.New("not a JSON object")
	errPrev      = errors.New("prev is not 64 lowercase hex digits")
	errBOM       = errors.New("it starts with a byte order mark (bytes EF BB BF), which no writer of a journal writes: a program saved the file with one; take it out and check the file again")
)

// utf8BOM is the byte order mark in UTF-8, which some editors write at
// the start of a file they save.
var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// parseLine checks that line is one JSON object with no member twice and
// a prev member of 64 lowercase hex digits, and returns that prev and the
// line's checkpoint member, if it has one. A line that is not valid JSON
// is refused as such, whatever else is wrong with it.
func parseLine(line []byte) (prev string, checkpoint json.RawMessage, err error) {
	if len(line) == 0 {
		return "", nil, errors.New("empty line")
	}
	if line[len(line)-1] == '\r' {
		// JSON takes the \r as white space, and the chain does not: told
		// apart, lest a copy whose line ends were converted read as lines
		// changed or inserted.
		return "", nil, errors.New("it ends in a carriage return (\\r\\n), which no writer of a journal writes: its line ends were converted, as by a copy through Windows or git; convert them back (dos2unix) and check it again")
	}
	if bytes.HasPrefix(line, utf8BOM) {
		// JSON has no place for it: named, lest "not valid JSON" send
		// the reader looking for what a program added unseen.
		return "", nil, errBOM
	}
	s := scanner{b: line}
	s.space()
	if s.i == len(s.b) {
		return "", nil, errInvalid
	}
	if s.b[s.i] != '{' {
		if s.value(0) && s.end() {
			return "", nil, errNotObject
		}
		return "", nil, errInvalid
	}
	var m members
	if !s.object(&m) || !s.end() {
		return "", nil, errInvalid
	}
	switch {
	case m.err != nil:
		return "", nil, m.err
	case !m.hasPrev:
		return "", nil, errors.New("no prev member")
	}
	return m.prev, m.checkpoint, nil
}

// members gathers what parseLine wants of an object's members.
type members struct {
	// names holds the first names seen, decoded, and set all of them
	// once there are more, so that a line of many members is not checked
	// in quadratic time.
	names [16][]byte
	n     int // names used
	set   map[string]struct{}

	prev       string
	hasPrev    bool
	checkpoint json.RawMessage
	// err is the first member found wrong, reported only if the whole
	// line is valid JSON; no member is looked at after it.
	err error
}

// add takes the member named name, decoded, whose value is value.
func (m *members) add(name, value []byte) {
	if m.err != nil {
		return
	}
	if m.dup(name) {
		m.err = fmt.Errorf("member %q appears twice", name)
		return
	}
	switch string(name) {
	case "prev":
		if len(value) == 0 || value[0] != '"' {
			m.err = errPrev
			return
		}
		p := unquote(value)
		if !isHash(p) {
			m.err = errPrev
			return
		}
		m.prev, m.hasPrev = string(p), true
	case "checkpoint":
		m.checkpoint = value
	}
}

// dup reports whether name was seen before, and notes it.
func (m *members) dup(name []byte) bool {
	if m.set != nil {
		if _, ok := m.set[string(name)]; ok {
			return true
		}
		m.set[string(name)] = struct{}{}
		return false
	}
	for _, n := range m.names[:m.n] {
		if bytes.Equal(n, name) {
			return true
		}
	}
	if m.n < len(m.names) {
		m.names[m.n] = name
		m.n++
		return false
	}
	m.set = make(map[string]struct{}, 2*m.n)
	for _, n := range m.names {
		m.set[string(n)] = struct{}{}
	}
	m.set[string(name)] = struct{}{}
	return false
}

// A scanner walks JSON text (RFC 8259) as encoding/json's scanner does:
// the same grammar and nesting limit, and bytes that are not UTF-8 taken
// inside strings.
type scanner struct {
	b     []byte
	i     int  // the next byte to read
	plain bool // see str
}

// space moves past white space.
func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// end reports whether only white space is left.
func (s *scanner) end() bool {
	s.space()
	return s.i == len(s.b)
}

// next moves past white space and the byte c, reporting whether it was
// there.
func (s *scanner) next(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// object moves past the object at s.i, the top-level value, handing each
// member to m, and reports whether it is well formed.
func (s *scanner) object(m *members) bool {
	s.i++ // the '{'
	if s.next('}') {
		return true
	}
	for {
		s.space()
		start := s.i
		if !s.str() {
			return false
		}
		name := s.b[start+1 : s.i-1]
		if !s.plain {
			name = unquote(s.b[start:s.i])
		}
		if !s.next(':') {
			return false
		}
		s.space()
		start = s.i
		if !s.value(1) {
			return false
		}
		m.add(name, s.b[start:s.i])
		if s.next('}') {
			return true
		}
		if !s.next(',') {
			return false
		}
	}
}

// value moves past the value at s.i, nested in depth arrays and objects,
// and reports whether it is well formed. It keeps its own stack of the
// arrays and objects it is in, so that deep nesting costs no Go stack.
func (s *scanner) value(depth int) bool {
	var inline [64]byte
	open := inline[:0] // '{' or '[' for each array or object s.i is in
	for {
		if s.i >= len(s.b) {
			return false
		}
		switch c := s.b[s.i]; {
		case c == '{' || c == '[':
			if depth+len(open)+1 > maxDepth {
				return false
			}
			s.i++
			if s.next(c + 2) { // '}' and ']' are '{' and '[' plus 2
				break // an empty one, a value ended
			}
			open = append(open, c)
			if c == '{' && !s.name() {
				return false
			}
			s.space()
			continue
		case c == '"':
			if !s.str() {
				return false
			}
		case c == 't':
			if !s.literal("true") {
				return false
			}
		case c == 'f':
			if !s.literal("false") {
				return false
			}
		case c == 'n':
			if !s.literal("null") {
				return false
			}
		default:
			if !s.number() {
				return false
			}
		}
		// A value ended: close what it ends, up to the next value.
		for {
			if len(open) == 0 {
				return true
			}
			top := open[len(open)-1]
			if s.next(top + 2) {
				open = open[:len(open)-1]
				continue
			}
			if !s.next(',') || top == '{' && !s.name() {
				return false
			}
			s.space()
			break
		}
	}
}

// name moves past white space, a member's name and its colon.
func (s *scanner) name() bool {
	s.space()
	return s.str() && s.next(':')
}

// literal moves past lit, which must be at s.i.
func (s *scanner) literal(lit string) bool {
	if !bytes.HasPrefix(s.b[s.i:], []byte(lit)) {
		return false
	}
	s.i += len(lit)
	return true
}

// number moves past the number at s.i: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() bool {
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i >= len(s.b):
		return false
	case s.b[s.i] == '0':
		s.i++
	case '1' <= s.b[s.i] && s.b[s.i] <= '9':
		s.digits()
	default:
		return false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if !s.digits() {
			return false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if !s.digits() {
			return false
		}
	}
	return true
}

// digits moves past decimal digits, reporting whether there was one.
func (s *scanner) digits() bool {
	start := s.i
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

// str moves past the string at s.i, quotes included, noting in s.plain
// whether it is its own bytes: no escape, and ASCII only.
func (s *scanner) str() bool {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return false
	}
	s.plain = true
	for i := s.i + 1; i < len(s.b); i++ {
		for i < len(s.b) && ascii[s.b[i]] {
			i++
		}
		if i >= len(s.b) {
			return false
		}
		switch c := s.b[i]; {
		case c == '"':
			s.i = i + 1
			return true
		case c == '\\':
			s.plain = false
			i++
			if i >= len(s.b) {
				return false
			}
			switch s.b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if hex4(s.b[i+1:]) < 0 {
					return false
				}
				i += 4
			default:
				return false
			}
		case c < 0x20:
			return false
		default: // not ASCII, and not always UTF-8: taken as it is
			s.plain = false
		}
	}
	return false
}

// ascii holds the bytes a string holds as they are: ASCII but for quote,
// backslash and control characters.
var ascii = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// hex4 returns the number that b's first four bytes spell in hex, or -1.
func hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// unquote returns what the well-formed string q (quotes included) decodes
// to, as encoding/json decodes it: each byte that is not UTF-8, and each
// \u escape of half a surrogate pair, becomes U+FFFD. A string with no
// escape and only UTF-8 is its own bytes, without copying.
func unquote(q []byte) []byte {
	q = q[1 : len(q)-1]
	if bytes.IndexByte(q, '\\') < 0 && utf8.Valid(q) {
		return q
	}
	b := make([]byte, 0, len(q)+utf8.UTFMax)
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == '\\' && q[i+1] == 'u':
			r := hex4(q[i+2:])
			i += 6
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if i+1 < len(q) && q[i] == '\\' && q[i+1] == 'u' {
					r2 = hex4(q[i+2:])
				}
				if r = utf16.DecodeRune(r, r2); r != unicode.ReplacementChar {
					i += 6 // a pair: the second half is taken too
				}
			}
			b = utf8.AppendRune(b, r)
		case c == '\\':
			b = append(b, unescape[q[i+1]])
			i += 2
		default:
			r, size := utf8.DecodeRune(q[i:])
			if r == utf8.RuneError && size == 1 {
				b = utf8.AppendRune(b, r)
			} else {
				b = append(b, q[i:i+size]...)
			}
			i += size
		}
	}
	return b
}

// unescape maps the letter of a one-letter escape to the byte it stands for.
var unescape = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}
