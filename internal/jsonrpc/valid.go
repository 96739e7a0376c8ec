package jsonrpc

import (
	"encoding/binary"
	"math/bits"
)

// Valid reports whether data is one valid JSON value, with the same answer
// as encoding/json's Valid for every input (FuzzValid checks it): the same
// grammar, strings that may hold any byte from 0x20 up (invalid UTF-8
// included, as encoding/json accepts it), and the same nesting limit.
//
// It exists because every frame is validated before it is routed, and
// encoding/json's scanner, a state machine that makes an indirect call per
// byte, was the largest single cost of a proxied tools/call after the
// process hops. This loop reads each byte once, without calls per byte.
func Valid(data []byte) bool {
	i := skipSpace(data, 0)
	if i = validValue(data, i, 0); i < 0 {
		return false
	}
	return skipSpace(data, i) == len(data)
}

// validValue returns the index past the valid JSON value that starts at
// data[i], or -1. depth is the number of containers the value is inside,
// for the nesting limit.
func validValue(data []byte, i, depth int) int {
	// The open containers, '{' or '[', innermost last.
	var buf [64]byte
	stack := buf[:0]
	named := false // whether a member's name and colon come before the value at i
	for {
		if named {
			// Most names are short and have their colon at once
			// (quickString); any other is scanned.
			end := 0
			if i < len(data) && data[i] == '"' {
				end = quickString(data, i)
			}
			if end > 0 && end < len(data) && data[end] == ':' {
				i = end + 1
			} else if i = scanName(data, i); i < 0 {
				return -1
			}
			i = skipSpace(data, i)
		}
		// A value starts at i, after white space.
		if i >= len(data) {
			return -1
		}
		switch c := data[i]; c {
		case '{', '[':
			if depth+len(stack) == MaxDepth {
				return -1
			}
			stack = append(stack, c)
			i = skipSpace(data, i+1)
			if i < len(data) && data[i] == c+2 { // '}' is '{'+2, ']' is '['+2
				stack = stack[:len(stack)-1]
				i++
				break // an empty container is a whole value
			}
			named = c == '{'
			continue // the first element or member
		case '"':
			i = scanString(data, i)
		case 't':
			i = scanLiteral(data, i, "true")
		case 'f':
			i = scanLiteral(data, i, "false")
		case 'n':
			i = scanLiteral(data, i, "null")
		default:
			i = scanNumber(data, i)
		}
		if i < 0 {
			return -1
		}
		// After a value: the containers it closes, then either the end of
		// this value or a comma and the next element or member.
		for {
			if len(stack) == 0 {
				return i
			}
			i = skipSpace(data, i)
			if i >= len(data) {
				return -1
			}
			top := stack[len(stack)-1]
			if data[i] == ',' {
				i = skipSpace(data, i+1)
				named = top == '{'
				break
			}
			if data[i] != top+2 {
				return -1
			}
			stack = stack[:len(stack)-1]
			i++
		}
	}
}

// MaxDepth is encoding/json's limit on nested containers: deeper
// input is invalid there, so it is here.
const MaxDepth = 10000

// scanName scans a member name at data[i] and the colon after it, and
// returns the index past the colon, or -1.
func scanName(data []byte, i int) int {
	if i >= len(data) || data[i] != '"' {
		return -1
	}
	if i = scanString(data, i); i < 0 {
		return -1
	}
	return skipPast(data, i, ':')
}

// skipPast returns the index past the byte c at data[i], after any white
// space, or -1 if another byte comes first. It tests for c before it
// skips white space, as a name's colon most often follows it at once.
func skipPast(data []byte, i int, c byte) int {
	if i < len(data) && data[i] == c {
		return i + 1
	}
	if i = skipSpace(data, i); i < len(data) && data[i] == c {
		return i + 1
	}
	return -1
}

// scanString returns the index past the string that starts at data[i],
// or -1 if it is not a valid JSON string.
func scanString(data []byte, i int) int {
	end, _ := scanEscapedString(data, i)
	return end
}

// scanEscapedString is scanString, and reports whether the string holds
// an escape.
func scanEscapedString(data []byte, i int) (end int, escaped bool) {
	for i++; ; i++ {
		// skipPlain, by hand: most strings are short, and a call per
		// string cost more than the scan.
		for ; i+8 <= len(data); i += 8 {
			if m := specialBytes(binary.LittleEndian.Uint64(data[i : i+8])); m != 0 {
				i += bits.TrailingZeros64(m) / 8
				goto special
			}
		}
		for ; i < len(data); i++ {
			if c := data[i]; c == '"' || c == '\\' || c < 0x20 {
				goto special
			}
		}
		return -1, escaped
	special:
		switch c := data[i]; {
		case c == '"':
			return i + 1, escaped
		case c == '\\':
			escaped = true
			i++
			if i >= len(data) {
				return -1, escaped
			}
			switch data[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(data) {
					return -1, escaped
				}
				for _, h := range data[i+1 : i+5] {
					if !isHex(h) {
						return -1, escaped
					}
				}
				i += 4
			default:
				return -1, escaped
			}
		default: // below 0x20
			return -1, escaped
		}
	}
}

// skipPlain returns the index of the first byte from data[i] on that is a
// quote, a backslash or a control character (below 0x20), or len(data):
// the bytes a string scan must look at. It reads eight bytes at a time,
// with one well-predicted branch per eight, where a byte-by-byte switch
// costs a branch per byte that a cold predictor gets wrong.
func skipPlain(data []byte, i int) int {
	for ; i+8 <= len(data); i += 8 {
		if m := specialBytes(binary.LittleEndian.Uint64(data[i : i+8])); m != 0 {
			// The lowest flagged byte is a special one: a false flag
			// comes only from a borrow out of a lower flagged byte.
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(data); i++ {
		if c := data[i]; c == '"' || c == '\\' || c < 0x20 {
			return i
		}
	}
	return i
}

// specialBytes returns a mask with the high bit set in each byte of x
// that is '"', '\\' or below 0x20 (and maybe in bytes above such a
// byte), and zero when x has none: the "has zero byte" and "has less
// than" tricks of Bit Twiddling Hacks, both exact when they find nothing.
func specialBytes(x uint64) uint64 {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	// Below 0x80, a byte's high bit is set after a subtraction only if
	// it was below what was subtracted, and only such a byte borrows
	// from the next. Flipping bit 1 turns '"' (0x22) into 0x20 and keeps
	// the bytes below 0x20 below it, so one test, below 0x21, finds
	// both; a backslash is the byte x^'\\' makes zero. One &^x for both
	// drops the bytes from 0x80 up (which never borrow).
	quoteOrControl := x ^ (ones * 2)
	backslash := x ^ (ones * '\\')
	return ((quoteOrControl - ones*0x21) | (backslash - ones)) &^ x & highs
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// scanNumber returns the index past the number that starts at data[i], or
// -1: an optional minus, an integer part without leading zeros, an
// optional fraction and an optional exponent.
func scanNumber(data []byte, i int) int {
	if data[i] == '-' {
		i++
	}
	switch {
	case i >= len(data):
		return -1
	case data[i] == '0':
		i++
	case '1' <= data[i] && data[i] <= '9':
		for i++; i < len(data) && isDigit(data[i]); i++ {
		}
	default:
		return -1
	}
	if i < len(data) && data[i] == '.' {
		i++
		if i >= len(data) || !isDigit(data[i]) {
			return -1
		}
		for i++; i < len(data) && isDigit(data[i]); i++ {
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if i >= len(data) || !isDigit(data[i]) {
			return -1
		}
		for i++; i < len(data) && isDigit(data[i]); i++ {
		}
	}
	return i
}

// scanLiteral returns the index past lit at data[i], or -1.
func scanLiteral(data []byte, i int, lit string) int {
	if len(data)-i < len(lit) || string(data[i:i+len(lit)]) != lit {
		return -1
	}
	return i + len(lit)
}

// quickString returns the index past the string at data[i], a quote, if
// its closing quote is among the eight bytes after, with no other special
// byte (specialBytes) before it; else 0, and the string is for
// scanString. Most member names are that short: inlined, the test of
// their one word costs less than the call to scan them.
func quickString(data []byte, i int) int {
	if j := i + 1; j+8 <= len(data) {
		if m := specialBytes(binary.LittleEndian.Uint64(data[j : j+8])); m != 0 {
			if j += bits.TrailingZeros64(m) / 8; data[j] == '"' {
				return j + 1
			}
		}
	}
	return 0
}
