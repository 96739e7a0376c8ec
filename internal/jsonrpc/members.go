package jsonrpc

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"unicode/utf8"
)

// errMalformed is returned by EachMember for input that is not a JSON
// object; callers validate first, so it means a caller's mistake.
var errMalformed = errors.New("malformed JSON object")

// EachMember calls fn with the name and the raw value of each member of the
// JSON object obj, in order, until fn returns false. Names are unescaped and
// matched as JSON defines them, exactly: encoding/json's case-insensitive
// struct matching would let {"method":"tools/call","Method":"x"} read as x
// here and as tools/call upstream. A later duplicate is seen after an
// earlier one, so a caller that keeps the last value agrees with
// JSON.parse. The value slices point into obj.
//
// obj must be valid JSON (json.Valid); EachMember checks only as much as it
// needs to never read out of bounds.
func EachMember(obj []byte, fn func(name []byte, value []byte) bool) error {
	if skimObject(obj, skipSpace(obj, 0), fn) < 0 {
		return errMalformed
	}
	return nil
}

// walkObject calls fn with each member of the object that starts at
// obj[i], as EachMember does, and returns the index just past the object,
// or -1 if it is malformed. Names and values are checked to be valid JSON
// as they are passed (the object being at the top level, for the nesting
// limit), so that a caller needs no other pass over them. If fn stops the
// walk, the index returned is 0.
func walkObject(obj []byte, i int, fn func(name, value []byte) bool) int {
	return walkObjectIn(obj, i, 0, fn)
}

// walkObjectIn is walkObject for an object inside depth containers. It
// is apart from skimObject, which does not validate, so that the walk
// every frame takes keeps its variables in registers.
func walkObjectIn(obj []byte, i, depth int, fn func(name, value []byte) bool) int {
	if i >= len(obj) || obj[i] != '{' {
		return -1
	}
	i = skipSpace(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return i + 1
	}
	for {
		if i >= len(obj) || obj[i] != '"' {
			return -1
		}
		var name []byte
		end := quickString(obj, i)
		if end > 0 {
			name = obj[i+1 : end-1]
		} else if name, end = memberName(obj, i); end < 0 {
			return -1
		}
		if i = skipPast(obj, end, ':'); i < 0 {
			return -1
		}
		if i = skipSpace(obj, i); i >= len(obj) {
			return -1
		}
		var vend int
		switch c := obj[i]; {
		case c == '"':
			// What validValue would do for a string, without its set-up:
			// most members' values are strings or numbers.
			vend = scanString(obj, i)
		case c == '-' || '0' <= c && c <= '9':
			vend = scanNumber(obj, i)
		default:
			vend = validValue(obj, i, depth+1)
		}
		if vend < 0 {
			return -1
		}
		if !fn(name, obj[i:vend]) {
			return 0
		}
		i = skipSpace(obj, vend)
		switch {
		case i < len(obj) && obj[i] == ',':
			i = skipSpace(obj, i+1)
		case i < len(obj) && obj[i] == '}':
			return i + 1
		default:
			return -1
		}
	}
}

// skimObject is walkObject without validation, for EachMember: it checks
// the object only enough never to read out of bounds.
func skimObject(obj []byte, i int, fn func(name, value []byte) bool) int {
	if i >= len(obj) || obj[i] != '{' {
		return -1
	}
	i = skipSpace(obj, i+1)
	if i < len(obj) && obj[i] == '}' {
		return i + 1
	}
	for {
		if i >= len(obj) || obj[i] != '"' {
			return -1
		}
		end := skipString(obj, i)
		if end < 0 {
			return -1
		}
		name := obj[i+1 : end-1]
		if bytes.IndexByte(name, '\\') >= 0 {
			var ok bool
			if name, ok = unescapeName(obj[i:end]); !ok {
				return -1
			}
		}
		i = skipSpace(obj, end)
		if i >= len(obj) || obj[i] != ':' {
			return -1
		}
		i = skipSpace(obj, i+1)
		vend := skipValue(obj, i)
		if vend < 0 {
			return -1
		}
		if !fn(name, obj[i:vend]) {
			return 0
		}
		i = skipSpace(obj, vend)
		switch {
		case i < len(obj) && obj[i] == ',':
			i = skipSpace(obj, i+1)
		case i < len(obj) && obj[i] == '}':
			return i + 1
		default:
			return -1
		}
	}
}

// memberName returns the name of the member at obj[i], a quote,
// unescaped, and the index past its closing quote; or -1 if it is not a
// valid string.
func memberName(obj []byte, i int) ([]byte, int) {
	end, escaped := scanEscapedString(obj, i)
	if end < 0 {
		return nil, -1
	}
	name := obj[i+1 : end-1]
	if escaped {
		var ok bool
		if name, ok = unescapeName(obj[i:end]); !ok {
			return nil, -1
		}
	}
	return name, end
}

// unescapeName returns the name a member's raw name, quotes included,
// spells when it holds an escape, or false if it does not decode.
func unescapeName(raw []byte) ([]byte, bool) {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return nil, false
	}
	return []byte(s), true
}

// StringValue returns the string a raw JSON value holds.
func StringValue(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	if inner := raw[1 : len(raw)-1]; bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner), true
	}
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err == nil
}

// skipSpace returns the index of the first byte from b[i] on that is not
// JSON white space. Every byte that is sits at or below ' ', so the
// common case, no space at all, costs one test, not four: it runs
// between every two tokens of every frame.
func skipSpace(b []byte, i int) int {
	for i < len(b) && b[i] <= ' ' && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string starting at b[i], or
// -1 if it does not end. It does not check what the string holds.
func skipString(b []byte, i int) int {
	// The first run of plain bytes by hand, as scanEscapedString does:
	// most strings end with it, and a call per string cost more than
	// the scan.
	for i++; i+8 <= len(b); i += 8 {
		if m := specialBytes(binary.LittleEndian.Uint64(b[i : i+8])); m != 0 {
			i += bits.TrailingZeros64(m) / 8
			goto special
		}
	}
	i = skipPlain(b, i) // the last bytes of b
special:
	for {
		for i < len(b) && b[i] < 0x20 {
			i = skipPlain(b, i+1) // not checked here
		}
		switch {
		case i >= len(b):
			return -1
		case b[i] == '"':
			return i + 1
		}
		// A backslash: the byte after it is escaped.
		i = skipPlain(b, i+2)
	}
}

// skipValue returns the index just past the value starting at b[i], or -1.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				end := skipString(b, i)
				if end < 0 {
					return -1
				}
				i = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return -1
	default:
		for ; i < len(b); i++ {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
		}
		return i
	}
}

// Member returns the raw value of the member name of the JSON object obj,
// or nil if obj is not an object or has no such member. Of duplicate
// members it keeps the last, as JSON.parse does, and names are matched
// exactly (see EachMember). obj must be valid JSON.
func Member(obj []byte, name string) json.RawMessage {
	obj = obj[skipSpace(obj, 0):]
	if len(obj) == 0 || obj[0] != '{' {
		return nil
	}
	var v []byte
	_ = EachMember(obj, func(n, value []byte) bool {
		if string(n) == name {
			v = value
		}
		return true
	})
	return v
}

// HeadRequest returns what head, the first bytes of a message too large
// to read whole, tells of it as a request: its id, if a top-level "id"
// member ends inside head, and its method, if a "method" member does,
// among the valid members that head holds whole. A message with a method
// and no id may be a notification, or a request whose id comes later.
func HeadRequest(head []byte) (id json.RawMessage, method string) {
	walkObject(head, skipSpace(head, 0), func(name, value []byte) bool {
		switch string(name) {
		case "method":
			method, _ = StringValue(value)
		case "id":
			if end := cap(head) - cap(value) + len(value); end < len(head) {
				id = value
			}
		}
		return true
	})
	return id, method
}

// HeadID returns the id of the message whose first bytes are head, the
// part of a frame too large, or too broken, to read whole: the value of a
// top-level "id" member that ends inside head, among the valid members
// that head holds whole before anything that is not JSON; the last, if it
// gives several. isResponse is false when one of those is "method": the
// message is then a request or notification, not an answer. The members
// are validated as they are read, so that a stray bracket inside one
// cannot end it early and pass off what follows, an "id" nested inside
// it, as a member of the message.
func HeadID(head []byte) (id json.RawMessage, isResponse bool) {
	ids, isResponse := HeadIDs(head)
	if len(ids) == 0 {
		return nil, false
	}
	return ids[len(ids)-1], isResponse
}

// HeadIDs is HeadID for a head that may give "id" more than once: every
// such id, in order. Readers disagree on which of them a message has, as
// on any member given twice (ErrAmbiguous), so each names a request the
// message may answer.
func HeadIDs(head []byte) (ids []json.RawMessage, isResponse bool) {
	isResponse = true
	walkObject(head, skipSpace(head, 0), func(name, value []byte) bool {
		switch string(name) {
		case "method":
			isResponse = false
			return false
		case "id":
			// value points into head: the id was read whole if head goes
			// on after it (a number cut short would read as another).
			if end := cap(head) - cap(value) + len(value); end < len(head) {
				ids = append(ids, value)
			}
		}
		return true
	})
	if len(ids) == 0 {
		return nil, false
	}
	return ids, isResponse
}

// A HeadKind says what the first bytes of a message too large to read
// whole tell of it: a request (or notification), an answer, or neither.
type HeadKind int

const (
	// HeadUndecided: the head names neither "method" nor "result" nor
	// "error"; only the rest of the message can tell.
	HeadUndecided HeadKind = iota
	// HeadOfRequest: the head names "method", as a request or notification.
	HeadOfRequest
	// HeadOfAnswer: the head names "result" or "error", and not "method".
	HeadOfAnswer
)

// HeadMessage returns what head, the first bytes of a message too large
// to read whole, tells of it: its ids, as HeadIDs reads them (every
// top-level "id" read whole, without stopping at "method"), and its kind.
// A member counts for the kind once its name and colon are in head, its
// value whole or not: an answer's result is what makes it too large. The
// kind is only decided by "method" (JSON-RPC's request) or "result" or
// "error" (its answer): an id alone, with a large member in between, may
// be a request's whose "method" comes later, and taken for an answer it
// would answer another request that holds the same id.
func HeadMessage(head []byte) (ids []json.RawMessage, kind HeadKind) {
	var method, answer bool
	name := func(n []byte) {
		switch string(n) {
		case "method":
			method = true
		case "result", "error":
			answer = true
		}
	}
	start := skipSpace(head, 0)
	next := start + 1 // where the member after the last one read begins
	walkObject(head, start, func(n, value []byte) bool {
		name(n)
		end := cap(head) - cap(value) + len(value)
		if string(n) == "id" && end < len(head) { // as in HeadIDs
			ids = append(ids, value)
		}
		next = end
		return true
	})
	if n := cutMemberName(head, start, next); n != nil {
		name(n)
	}
	switch {
	case method:
		kind = HeadOfRequest
	case answer:
		kind = HeadOfAnswer
	}
	return ids, kind
}

// cutMemberName returns the name of the member of the object at
// head[start] that begins at head[i], after the members walkObject read
// whole: the one head cuts off, if its name and colon are in head.
func cutMemberName(head []byte, start, i int) []byte {
	if start >= len(head) || head[start] != '{' {
		return nil
	}
	i = skipSpace(head, i)
	if i < len(head) && head[i] == ',' && i > start+1 {
		i = skipSpace(head, i+1)
	}
	if i >= len(head) || head[i] != '"' {
		return nil
	}
	end, escaped := scanEscapedString(head, i)
	if end < 0 {
		return nil
	}
	n := head[i+1 : end-1]
	if escaped {
		var s string
		if json.Unmarshal(head[i:end], &s) != nil {
			return nil
		}
		n = []byte(s)
	}
	if c := skipSpace(head, end); c >= len(head) || head[c] != ':' {
		return nil
	}
	return n
}

// ErrAmbiguous is the error for an object that gives a member its reader
// looks for twice, or once more under a name that differs only in case.
// Readers disagree on such an object: JSON.parse keeps the last of two
// members, some parsers the first, and Go's encoding/json matches names
// without regard to case, so {"method":"ping","Method":"tools/call"} is
// a ping here and a tools/call to an upstream written in Go. The proxy
// never decides on a message an upstream could read otherwise: it refuses
// it (DESIGN section 10).
var ErrAmbiguous = errors.New("ambiguous member")

// envelope holds the members of a JSON-RPC message.
var envelope = []string{"jsonrpc", "id", "method", "params", "result", "error"}

// FoldsTo reports whether name matches one of names under case folding,
// as encoding/json matches names (bytes.EqualFold): a reader that looks
// for exactly those names would not see it, and one written in Go would.
func FoldsTo(name []byte, names []string) bool {
	for _, n := range names {
		if bytes.EqualFold(name, []byte(n)) {
			return true
		}
	}
	return false
}

// Ambiguous returns the ErrAmbiguous error for name, one of names given
// twice, or a member that differs from one of them only in case.
func Ambiguous(name []byte, names []string) error {
	for _, n := range names {
		if string(name) == n {
			return fmt.Errorf("%w: %q is given twice", ErrAmbiguous, n)
		}
	}
	for _, n := range names {
		if bytes.EqualFold(name, []byte(n)) {
			return fmt.Errorf("%w: %q differs from %q only in case, and a reader that matches names without regard to case (Go's encoding/json) takes it for %q", ErrAmbiguous, name, n, n)
		}
	}
	return fmt.Errorf("%w: %q", ErrAmbiguous, name)
}

// A Reading checks the members of one object against the names its reader
// looks for, as DecodeInto checks a message's envelope: Note each member's
// name as it is met, then Err says whether any of them was given twice or
// in another case. The zero value with Names set is ready to use.
type Reading struct {
	Names []string // what the reader looks for; the first 64 are checked for repeats
	seen  uint64   // a bit for each name met
	err   error    // the first ambiguity
}

// Note notes a member's name and returns its index among the names looked
// for, or -1 if it is none of them.
func (r *Reading) Note(name []byte) int {
	for i, n := range r.Names {
		if string(name) == n {
			if i < 64 {
				if r.seen&(1<<i) != 0 && r.err == nil {
					r.err = Ambiguous(name, r.Names)
				}
				r.seen |= 1 << i
			}
			return i
		}
	}
	if r.err == nil {
		for _, n := range r.Names {
			if bytes.EqualFold(name, []byte(n)) {
				r.err = Ambiguous(name, r.Names)
				break
			}
		}
	}
	return -1
}

// Err returns the first ambiguity noted, an ErrAmbiguous, or nil.
func (r *Reading) Err() error { return r.err }

// MemberOnce returns the member name of the JSON object obj, or nil if
// it has none or obj is no object. A member given twice, or in another
// case, is an error (Reading): readers would take it for two.
func MemberOnce(obj json.RawMessage, name string) (json.RawMessage, error) {
	// As a Reading of name would, but without one: its Names escape
	// with its error, which costs every request an allocation here.
	var v json.RawMessage
	var seen bool
	var bad []byte // the first name given again, or in another case
	if EachMember(obj, func(n, value []byte) bool {
		switch {
		case string(n) == name:
			if seen && bad == nil {
				bad = n
			}
			seen, v = true, value
		case bad == nil && bytes.EqualFold(n, []byte(name)):
			bad = n
		}
		return true
	}) != nil {
		return nil, nil // not an object: nothing in it
	}
	if bad != nil {
		return v, Ambiguous(bad, []string{name})
	}
	return v, nil
}

// CancelledID returns the requestId of notifications/cancelled params, or
// nil if they name none, refusing one readers would take for two
// (MemberOnce).
func CancelledID(params json.RawMessage) (json.RawMessage, error) {
	return MemberOnce(params, "requestId")
}
