package fingerprint

import (
	"bytes"
	"encoding/binary"
	"math/bits"
)

// appendSimple appends the RFC 8785 form of src, which must be valid JSON
// (json.Valid), when src is built only of what tool arguments usually
// hold: objects, arrays, strings of printable ASCII without escapes,
// integers of at most 15 digits, true, false and null, with no member
// name that exactNumbers would escape (decimalKey). For such a value
// the canonical form needs no number formatting and no string
// re-encoding: it is the value with white space dropped and object
// members sorted by name (byte order, which for ASCII is RFC 8785's UTF-16
// order). ok is false for any other value, and the caller then goes
// through jcs.Transform; FuzzSimple checks that the two agree wherever
// this path answers.
//
// It trusts src's grammar, which its callers have checked (or jsonrpc did,
// as it read the frame the value came in): it reads a byte at most ' '
// outside a string as white space, a colon where one must be, a literal
// by its first letter. Given invalid JSON its answer means nothing, but it
// never reads out of bounds.
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

// space skips white space: in valid JSON a byte at most ' ' outside a
// string is one.
func (p *simpleParser) space() {
	for p.i < len(p.src) && p.src[p.i] <= ' ' {
		p.i++
	}
}

func (p *simpleParser) value(out []byte, depth int) ([]byte, bool) {
	p.space()
	if p.i >= len(p.src) || depth > maxSimpleDepth {
		return nil, false
	}
	switch p.src[p.i] {
	case '{':
		return p.object(out, depth)
	case '[':
		return p.array(out, depth)
	}
	start := p.i
	if !p.scalar() {
		return nil, false
	}
	return append(out, p.src[start:p.i]...), true
}

// scalar moves past the string, number or literal at p.i, reporting
// whether it is written in canonical form already.
func (p *simpleParser) scalar() bool {
	switch p.src[p.i] {
	case '"':
		return p.str()
	case 't', 'n':
		return p.skip(len("true"))
	case 'f':
		return p.skip(len("false"))
	}
	return p.integer()
}

func (p *simpleParser) skip(n int) bool {
	if len(p.src)-p.i < n {
		return false
	}
	p.i += n
	return true
}

// str moves past the string at p.i, reporting whether it holds only
// printable ASCII without escapes (valid JSON has no control characters
// in a string).
func (p *simpleParser) str() bool {
	j := p.i + 1
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
			return true
		case c > 0x7e || c == '\\':
			return false
		}
	}
	return false
}

// notPlain returns a mask with the high bit set in the lowest byte of x
// that is a quote, a backslash or above 0x7e, if there is one, and zero if
// there is none; bytes above that one may be flagged too (a borrow out of
// it). The tricks are those of plainASCII.
func notPlain(x uint64) uint64 {
	const (
		ones  = 0x0101010101010101
		low7  = ones * 0x7f
		highs = 0x8080808080808080
	)
	quote, backslash := x^(ones*'"'), x^(ones*'\\')
	// (x&low7)+ones reaches the high bit, without a carry out of the
	// byte, just where the low seven bits are all set: 0x7f, 0xff.
	return ((quote-ones)&^quote | (backslash-ones)&^backslash | (x&low7 + ones) | x) & highs
}

// integer moves past the number at p.i, reporting whether it is an
// integer of at most maxSimpleDigits digits, written without a fraction or
// an exponent; -0 is left to the general path.
func (p *simpleParser) integer() bool {
	start := p.i
	j := start
	if p.src[j] == '-' {
		j++
	}
	digits := j
	for j < len(p.src) && '0' <= p.src[j] && p.src[j] <= '9' {
		j++
	}
	p.i = j
	switch n := j - digits; {
	case n == 0 || n > maxSimpleDigits:
		return false
	case p.src[digits] == '0' && digits > start:
		return false // -0
	case j < len(p.src) && (p.src[j] == '.' || p.src[j] == 'e' || p.src[j] == 'E'):
		return false
	}
	return true
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
// name is in the input, and where its canonical text ("name":value) is:
// in the input, for a scalar written without white space, else in the
// output, where object wrote it. Offsets without a pointer keep an
// object's array of them small and cheap to clear.
type simpleMember struct {
	nameStart, nameEnd int32
	start, end         int32
	inOut              bool
}

// object writes the object at p.i to out with its members sorted by name.
// A member it can copy from the input as it is, it does not write until
// it knows their order; the others it writes at the end of out as they
// come, and then the object after them, which it moves over them.
func (p *simpleParser) object(out []byte, depth int) ([]byte, bool) {
	p.i++ // {
	p.space()
	if p.i < len(p.src) && p.src[p.i] == '}' {
		p.i++
		return append(out, '{', '}'), true
	}
	base := len(out)
	var buf [16]simpleMember
	members := buf[:0]
	for {
		if len(members) == maxSimpleMembers || p.i >= len(p.src) {
			// Insertion sort as the members come: objects are small,
			// and a large one goes to the general path, which sorts it
			// in n log n (hostile input must not cost the square of
			// its size).
			return nil, false
		}
		nameStart := p.i // the quote
		if !p.str() {
			return nil, false
		}
		nameEnd := p.i
		if nameEnd-nameStart-2 >= len(decimalKey) && string(p.src[nameStart+1:nameStart+1+len(decimalKey)]) == decimalKey {
			return nil, false // exactNumbers escapes it
		}
		p.space()
		p.i++ // the colon
		p.space()
		if p.i >= len(p.src) {
			return nil, false
		}
		m := simpleMember{nameStart: int32(nameStart + 1), nameEnd: int32(nameEnd - 1)}
		if c := p.src[p.i]; p.i == nameEnd+1 && c != '{' && c != '[' {
			// "name":value, as it comes.
			if !p.scalar() {
				return nil, false
			}
			m.start, m.end = int32(nameStart), int32(p.i)
		} else {
			m.start, m.inOut = int32(len(out)), true
			out = append(out, p.src[nameStart:nameEnd]...)
			out = append(out, ':')
			var ok bool
			if out, ok = p.value(out, depth+1); !ok {
				return nil, false
			}
			m.end = int32(len(out))
		}
		k := len(members)
		members = append(members, m)
		for ; k > 0; k-- {
			c := p.compareNames(members[k-1], m)
			if c == 0 {
				return nil, false // a duplicate name: the general path decides
			}
			if c < 0 {
				break
			}
			members[k] = members[k-1]
		}
		members[k] = m
		p.space()
		if p.i >= len(p.src) {
			return nil, false
		}
		if p.src[p.i] == '}' {
			p.i++
			break
		}
		p.i++ // the comma
		p.space()
	}
	return p.writeObject(out, base, members), true
}

// writeObject appends the object of members, in their order, to out, of
// which out[base:] holds the members object wrote: if any, it writes the
// object after them, then moves it over them.
func (p *simpleParser) writeObject(out []byte, base int, members []simpleMember) []byte {
	start := len(out)
	out = append(out, '{')
	for k, m := range members {
		if k > 0 {
			out = append(out, ',')
		}
		if m.inOut {
			out = append(out, out[m.start:m.end]...)
		} else {
			out = append(out, p.src[m.start:m.end]...)
		}
	}
	out = append(out, '}')
	if start == base {
		return out
	}
	n := copy(out[base:], out[start:])
	return out[:base+n]
}

func (p *simpleParser) name(m simpleMember) []byte { return p.src[m.nameStart:m.nameEnd] }

// compareNames compares two members' names in byte order, which is RFC
// 8785's for the ASCII names appendSimple reads. Most names differ in
// their first byte: that is one test, and no call. (A name holds no
// quote: the byte after the opening one is the closing one only for "".)
func (p *simpleParser) compareNames(x, y simpleMember) int {
	if a, b := p.src[x.nameStart], p.src[y.nameStart]; a != b && a != '"' && b != '"' {
		return int(a) - int(b)
	}
	return bytes.Compare(p.name(x), p.name(y))
}
