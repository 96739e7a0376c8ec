package fingerprint

import (
	"encoding/binary"
	"math/bits"
)

// appendSimple appends the RFC 8785 form of src when src is a JSON value
// built only of what tool arguments usually hold: objects, arrays, strings
// of printable ASCII without escapes, integers of at most 15 digits, true,
// false and null. For such a value the canonical form needs no number
// formatting and no string re-encoding: it is the value with white space
// dropped and object members sorted by name (byte order, which for ASCII
// is RFC 8785's UTF-16 order). ok is false for anything else, invalid JSON
// included, and the caller then goes through jcs.Transform, which has the
// last word; FuzzSimple checks that the two agree wherever this path
// answers.
//
// It exists because jcs.Transform builds a tree of the value and copies
// every string through a builder: for the small objects of a tool call it
// was the largest allocation of the fingerprint.
func appendSimple(out, src []byte) (_ []byte, ok bool) {
	if len(out) > maxSimpleSize || len(src) > maxSimpleSize {
		return nil, false
	}
	p := simpleParser{src: src}
	out, ok = p.value(out, 0)
	if !ok {
		return nil, false
	}
	p.space()
	if p.i != len(src) {
		return nil, false
	}
	return out, true
}

// maxSimpleSize bounds the input and output appendSimple works on, so
// that offsets into them fit the int32 of a simpleMember: an object may be
// written twice, so out grows to at most three times that.
const maxSimpleSize = 1 << 28

// maxSimpleDepth bounds the nesting appendSimple handles itself; deeper
// values take the general path.
const maxSimpleDepth = 32

// maxSimpleDigits is the longest integer appendSimple copies as it is: up
// to 15 digits every integer is a double exactly, and JCS prints it as
// written.
const maxSimpleDigits = 15

type simpleParser struct {
	src []byte
	i   int
}

func (p *simpleParser) space() {
	// Every space byte is at most ' ': the common case, none, is one test.
	for p.i < len(p.src) && p.src[p.i] <= ' ' && isJSONSpace(p.src[p.i]) {
		p.i++
	}
}

func (p *simpleParser) value(out []byte, depth int) ([]byte, bool) {
	p.space()
	if p.i >= len(p.src) || depth > maxSimpleDepth {
		return nil, false
	}
	switch c := p.src[p.i]; {
	case c == '{':
		return p.object(out, depth)
	case c == '[':
		return p.array(out, depth)
	case c == '"':
		s, ok := p.str()
		if !ok {
			return nil, false
		}
		out = append(out, '"')
		out = append(out, s...)
		return append(out, '"'), true
	case c == 't':
		return p.literal(out, "true")
	case c == 'f':
		return p.literal(out, "false")
	case c == 'n':
		return p.literal(out, "null")
	case c == '-' || '0' <= c && c <= '9':
		return p.integer(out)
	}
	return nil, false
}

// str reads a string of printable ASCII without escapes and returns what
// is between its quotes.
func (p *simpleParser) str() ([]byte, bool) {
	start := p.i + 1
	j := start
	// Eight bytes at a time up to the first byte that is not plain: the
	// closing quote, in most strings.
	for ; j+8 <= len(p.src); j += 8 {
		if m := notPlain(binary.LittleEndian.Uint64(p.src[j:])); m != 0 {
			j += bits.TrailingZeros64(m) / 8
			break
		}
	}
	for ; j < len(p.src); j++ {
		switch c := p.src[j]; {
		case c == '"':
			p.i = j + 1
			return p.src[start:j], true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

// notPlain returns a mask with the high bit set in the lowest byte of x
// that is a quote, a backslash, below 0x20 or above 0x7e, if there is
// one, and zero if there is none; bytes above that one may be flagged
// too (a borrow out of it). The tricks are those of plainASCII.
func notPlain(x uint64) uint64 {
	const (
		ones  = 0x0101010101010101
		low7  = ones * 0x7f
		highs = 0x8080808080808080
	)
	quote, backslash := x^(ones*'"'), x^(ones*'\\')
	// (x&low7)+ones reaches the high bit, without a carry out of the
	// byte, just where the low seven bits are all set: 0x7f, 0xff.
	return ((quote-ones)&^quote | (backslash-ones)&^backslash | (x-ones*0x20)&^x | (x&low7 + ones) | x) & highs
}

func (p *simpleParser) literal(out []byte, lit string) ([]byte, bool) {
	if len(p.src)-p.i < len(lit) || string(p.src[p.i:p.i+len(lit)]) != lit {
		return nil, false
	}
	p.i += len(lit)
	return append(out, lit...), true
}

// integer reads an integer of at most maxSimpleDigits digits, written
// without a fraction or an exponent; -0 is left to the general path.
func (p *simpleParser) integer(out []byte) ([]byte, bool) {
	start := p.i
	if p.src[p.i] == '-' {
		p.i++
	}
	digits := p.i
	for p.i < len(p.src) && '0' <= p.src[p.i] && p.src[p.i] <= '9' {
		p.i++
	}
	n := p.i - digits
	switch {
	case n == 0 || n > maxSimpleDigits:
		return nil, false
	case p.src[digits] == '0' && (n > 1 || digits > start):
		return nil, false // a leading zero, or -0
	case p.i < len(p.src) && (p.src[p.i] == '.' || p.src[p.i] == 'e' || p.src[p.i] == 'E'):
		return nil, false
	}
	return append(out, p.src[start:p.i]...), true
}

func (p *simpleParser) array(out []byte, depth int) ([]byte, bool) {
	p.i++ // [
	out = append(out, '[')
	p.space()
	if p.i < len(p.src) && p.src[p.i] == ']' {
		p.i++
		return append(out, ']'), true
	}
	for {
		var ok bool
		if out, ok = p.value(out, depth+1); !ok {
			return nil, false
		}
		p.space()
		if p.i >= len(p.src) {
			return nil, false
		}
		switch p.src[p.i] {
		case ',':
			p.i++
			out = append(out, ',')
		case ']':
			p.i++
			return append(out, ']'), true
		default:
			return nil, false
		}
	}
}

// maxSimpleMembers bounds the members of an object appendSimple sorts.
const maxSimpleMembers = 64

// simpleMember is one member of an object being canonicalised: where its
// name is in the input, and where the member ("name":value) was written
// in the output. Offsets without a pointer keep an object's array of them
// small and cheap to clear.
type simpleMember struct {
	nameStart, nameEnd int32
	start, end         int32
}

// object writes the object's members to out in the order they come, which
// is the canonical form when they come sorted by name; otherwise
// sortMembers puts them in order.
func (p *simpleParser) object(out []byte, depth int) ([]byte, bool) {
	p.i++ // {
	p.space()
	base := len(out)
	out = append(out, '{')
	if p.i < len(p.src) && p.src[p.i] == '}' {
		p.i++
		return append(out, '}'), true
	}
	var buf [16]simpleMember
	members := buf[:0]
	inOrder := true
	for {
		if p.i >= len(p.src) || p.src[p.i] != '"' {
			return nil, false
		}
		name, ok := p.str()
		if !ok {
			return nil, false
		}
		nameEnd := p.i - 1 // before the closing quote
		p.space()
		if p.i >= len(p.src) || p.src[p.i] != ':' {
			return nil, false
		}
		p.i++
		if len(members) > 0 {
			out = append(out, ',')
		}
		start := len(out)
		out = append(out, '"')
		out = append(out, name...)
		out = append(out, '"', ':')
		if out, ok = p.value(out, depth+1); !ok {
			return nil, false
		}
		// Insertion sort as the members come: objects are small, and a
		// large one goes to the general path, which sorts it in n log n
		// (hostile input must not cost the square of its size).
		if len(members) == maxSimpleMembers {
			return nil, false
		}
		m := simpleMember{int32(nameEnd - len(name)), int32(nameEnd), int32(start), int32(len(out))}
		k := len(members)
		members = append(members, m)
		for ; k > 0 && string(p.name(members[k-1])) > string(name); k-- {
			members[k] = members[k-1]
			inOrder = false
		}
		members[k] = m
		if k > 0 && string(p.name(members[k-1])) == string(name) {
			return nil, false // a duplicate name: the general path decides
		}
		p.space()
		if p.i >= len(p.src) {
			return nil, false
		}
		if p.src[p.i] == ',' {
			p.i++
			p.space()
			continue
		}
		if p.src[p.i] != '}' {
			return nil, false
		}
		p.i++
		break
	}
	out = append(out, '}')
	if inOrder {
		return out, true
	}
	return sortMembers(out, base, members), true
}

// sortMembers rewrites the object written from out[base:] with its
// members in the order of members: it writes it again after it, then
// moves that over it.
func sortMembers(out []byte, base int, members []simpleMember) []byte {
	sorted := len(out)
	out = append(out, '{')
	for k, m := range members {
		if k > 0 {
			out = append(out, ',')
		}
		out = append(out, out[m.start:m.end]...)
	}
	out = append(out, '}')
	n := copy(out[base:], out[sorted:])
	return out[:base+n]
}

func (p *simpleParser) name(m simpleMember) []byte { return p.src[m.nameStart:m.nameEnd] }
