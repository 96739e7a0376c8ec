package jsonrpc

import "encoding/binary"

// The members of envelope, by their index in it.
const (
	memberVersion = iota
	memberID
	memberMethod
	memberParams
	memberResult
	memberError
)

// walkMessage is walkObject for the message at obj[i], which it reads
// into m as DecodeParamsInto does, with the raw value of its method, and
// the name of the first member given twice or in another case; end is
// the index just past the object, or -1 if it is malformed. A member
// named "params" whose value is an object is validated by a walk of its
// own, which hands each of its members to params (if not nil), which
// must return true.
//
// It is walkObject with what is done with a member done here rather than
// called for: the walk of every frame made an indirect call a member, and
// scanned as strings names that are, all but always, one of six spelled
// without escapes, after the same seventeen bytes.
func walkMessage(m *Message, obj []byte, i int, params func(name, value []byte) bool) (method, repeated []byte, end int) {
	// Where each member of envelope goes, by its index (not a switch).
	slots := [...]*[]byte{
		(*[]byte)(&m.Version), (*[]byte)(&m.ID), &method,
		(*[]byte)(&m.Params), (*[]byte)(&m.Result), (*[]byte)(&m.Error),
	}
	switch {
	case i+17 < len(obj) && binary.LittleEndian.Uint64(obj[i:i+8]) == wordStart &&
		binary.LittleEndian.Uint64(obj[i+8:i+16]) == wordVersion && obj[i+16] == ',':
		// What all but a rare message begins with, read at once:
		// {"jsonrpc":"2.0",
		m.Version = obj[i+11 : i+16]
		i = skipSpace(obj, i+17)
	case i >= len(obj) || obj[i] != '{':
		return nil, nil, -1
	default:
		if i = skipSpace(obj, i+1); i < len(obj) && obj[i] == '}' {
			return method, repeated, i + 1
		}
	}
	for {
		if i >= len(obj) || obj[i] != '"' {
			return nil, nil, -1
		}
		k, nameEnd := -1, 0
		if i+9 <= len(obj) {
			k, nameEnd = envelopeName(binary.LittleEndian.Uint64(obj[i+1 : i+9]))
			nameEnd += i
		}
		var name []byte // a name not known by its spelling
		if k < 0 {
			if name, nameEnd = memberName(obj, i); nameEnd < 0 {
				return nil, nil, -1
			}
			k = envelopeIndex(name)
		}
		if i = skipPast(obj, nameEnd, ':'); i < 0 {
			return nil, nil, -1
		}
		if i = skipSpace(obj, i); i >= len(obj) {
			return nil, nil, -1
		}
		var vend int
		switch c := obj[i]; {
		case c == '"':
			vend = scanString(obj, i)
		case c == '-' || '0' <= c && c <= '9':
			vend = scanNumber(obj, i) // ids are numbers
		case c == '{' && params != nil && k == memberParams:
			// The params are handed to params as they are validated.
			vend = walkObjectIn(obj, i, 1, params)
		default:
			vend = validValue(obj, i, 1)
		}
		if vend < 0 {
			return nil, nil, -1
		}
		// A value is never empty, so a member already set was met.
		if k >= 0 {
			if *slots[k] != nil && repeated == nil {
				repeated = []byte(envelope[k])
			}
			*slots[k] = obj[i:vend]
		} else if repeated == nil && FoldsTo(name, envelope) {
			repeated = name
		}
		if vend+1 < len(obj) && obj[vend] == ',' && obj[vend+1] == '"' {
			i = vend + 1 // the next member at once, as encoders write it
			continue
		}
		if i = skipSpace(obj, vend); i < len(obj) && obj[i] == '}' {
			return method, repeated, i + 1
		} else if i >= len(obj) || obj[i] != ',' {
			return nil, nil, -1
		}
		i = skipSpace(obj, i+1)
	}
}

// The first eight bytes of each of envelope's names after its opening
// quote, closing quote included, as a little-endian word, for
// envelopeName.
const (
	wordJSONRPC = 'j' | 's'<<8 | 'o'<<16 | 'n'<<24 | 'r'<<32 | 'p'<<40 | 'c'<<48 | '"'<<56
	wordID      = 'i' | 'd'<<8 | '"'<<16
	wordMethod  = 'm' | 'e'<<8 | 't'<<16 | 'h'<<24 | 'o'<<32 | 'd'<<40 | '"'<<48
	wordParams  = 'p' | 'a'<<8 | 'r'<<16 | 'a'<<24 | 'm'<<32 | 's'<<40 | '"'<<48
	wordResult  = 'r' | 'e'<<8 | 's'<<16 | 'u'<<24 | 'l'<<32 | 't'<<40 | '"'<<48
	wordError   = 'e' | 'r'<<8 | 'r'<<16 | 'o'<<24 | 'r'<<32 | '"'<<40
)

// How encoders begin a message, its version first, as two words:
// {"jsonrpc":"2.0" (and a comma).
const (
	wordStart   = '{' | '"'<<8 | 'j'<<16 | 's'<<24 | 'o'<<32 | 'n'<<40 | 'r'<<48 | 'p'<<56
	wordVersion = 'c' | '"'<<8 | ':'<<16 | '"'<<24 | '2'<<32 | '.'<<40 | '0'<<48 | '"'<<56
)

// envelopeName returns the index in envelope of the member name that x,
// the eight bytes after a name's opening quote, begins with, its closing
// quote included, and its length quoted; or -1: one of envelope's spelled
// without escapes. It compares words, not bytes, so as to be inlined in
// the walk.
func envelopeName(x uint64) (k, n int) {
	switch {
	case x == wordJSONRPC:
		return memberVersion, len(`"jsonrpc"`)
	case x&(1<<24-1) == wordID:
		return memberID, len(`"id"`)
	case x&(1<<56-1) == wordMethod:
		return memberMethod, len(`"method"`)
	case x&(1<<56-1) == wordParams:
		return memberParams, len(`"params"`)
	case x&(1<<56-1) == wordResult:
		return memberResult, len(`"result"`)
	case x&(1<<48-1) == wordError:
		return memberError, len(`"error"`)
	}
	return -1, 0
}

// envelopeIndex returns the index of name in envelope, or -1.
func envelopeIndex(name []byte) int {
	for k, n := range envelope {
		if string(name) == n {
			return k
		}
	}
	return -1
}
