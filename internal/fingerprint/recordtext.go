package fingerprint

// recordText keeps the canonical text of an action record's own members,
// before and after the arguments, for the last actor, and the last
// scope, tool and upstream, a Hasher's state wrote: a session's calls
// repeat them, and comparing a string with its text costs less than
// checking it for characters to escape and copying it again.
//
// It holds copies only where the canonical text of each string is the
// string itself, which is when escaping it left its length alone (an
// escape or a replaced byte of invalid UTF-8 lengthens it); and never
// the caller's strings, which may share an array with a large frame.
// The zero value holds nothing; a nil *recordText keeps nothing.
type recordText struct {
	head []byte // {"actor":"…","arguments":
	tail []byte // ,"scope":"…","tool":"…","upstream":"…"}
	// The lengths of the scope and the tool in tail: with tail's own
	// length they place each string in it.
	scopeLen, toolLen int
}

// The record's text around its strings, in RFC 8785 order.
const (
	actorText    = `{"actor":"`
	argsText     = `","arguments":`
	scopeText    = `,"scope":"`
	toolText     = `","tool":"`
	upstreamText = `","upstream":"`
	endText      = `"}`
)

// maxKeptText bounds the text a recordText keeps, so that a state in a
// Hasher's pool does not pin the text of one call's huge strings.
const maxKeptText = 1 << 10

// appendHead appends the record's text up to its arguments.
func (c *recordText) appendHead(out []byte, actor string) []byte {
	n := len(actorText) + len(actor) + len(argsText)
	if c != nil && len(c.head) == n && string(c.head[len(actorText):n-len(argsText)]) == actor {
		return append(out, c.head...)
	}
	start := len(out)
	out = append(appendJCSChars(append(out, actorText...), actor), argsText...)
	if c != nil {
		c.head = keepText(c.head, out[start:], n)
	}
	return out
}

// appendTail appends the record's text after its arguments.
func (c *recordText) appendTail(out []byte, a *Action) []byte {
	n := len(scopeText) + len(a.Scope) + len(toolText) + len(a.Tool) + len(upstreamText) + len(a.Upstream) + len(endText)
	if c != nil && len(c.tail) == n && c.scopeLen == len(a.Scope) && c.toolLen == len(a.Tool) {
		t := c.tail[len(scopeText):]
		if string(t[:len(a.Scope)]) == a.Scope {
			t = t[len(a.Scope)+len(toolText):]
			if string(t[:len(a.Tool)]) == a.Tool && string(t[len(a.Tool)+len(upstreamText):len(t)-len(endText)]) == a.Upstream {
				return append(out, c.tail...)
			}
		}
	}
	start := len(out)
	out = append(appendJCSChars(append(out, scopeText...), a.Scope), toolText...)
	out = append(appendJCSChars(out, a.Tool), upstreamText...)
	out = append(appendJCSChars(out, a.Upstream), endText...)
	if c != nil {
		c.tail = keepText(c.tail, out[start:], n)
		c.scopeLen, c.toolLen = len(a.Scope), len(a.Tool)
	}
	return out
}

// keepText returns text copied into kept's array, if it is of length
// plain, where each string in it is its own text, and not too long to
// keep; else kept emptied.
func keepText(kept, text []byte, plain int) []byte {
	if len(text) != plain || len(text) > maxKeptText {
		return kept[:0]
	}
	return append(kept[:0], text...)
}
