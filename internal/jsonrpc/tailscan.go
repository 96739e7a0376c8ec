package jsonrpc

import (
	"bytes"
	"encoding/json"
)

// A TailScan follows the top level of one frame too large to keep, a chunk
// at a time, for an "id" member its head did not hold, and a "method". JSON
// objects are unordered, and an encoder may write the id after a large
// result (Rust's jsonrpc-core does): without it, the request such an
// answer was for would wait until its session ended, and the upstream
// that sent such a request would wait for an answer. It tracks only
// nesting and strings, not
// the grammar: the frame is the upstream's, which can name any id in an
// answer anyway. Brackets must match, so that a stray one cannot pass
// off an "id" nested in the result as the message's.
type TailScan struct {
	off int // bytes of the frame scanned
	// open holds the brackets open, up to MaxDepth of them.
	open []byte
	// inStr and esc: inside a string, and just after its backslash.
	inStr, esc bool
	// wantKey: the next string at the top level names a member; key
	// collects it, up to maxScanKey bytes.
	wantKey bool
	key     []byte
	inKey   bool
	// val collects the value of a top-level "id" member while inID, up
	// to maxTailID bytes; valEnd is the offset after its last byte.
	inID   bool
	val    []byte
	valEnd int
	// ids holds the top-level "id" members read whole, up to maxScanIDs
	// of them, each with the offset after it; method is set once a
	// top-level "method" member is seen, and broken once the frame cannot
	// be followed.
	ids    []scannedID
	method bool
	broken bool
}

// A scannedID is the value of a top-level "id" member and the offset in
// the frame just after it.
type scannedID struct {
	val []byte
	end int
}

// maxScanIDs bounds the ids a TailScan keeps, as maxTailID bounds each. An
// answer giving "id" more than once may answer the request any of them
// names (readers disagree on which id it has), so each is reported, as
// HeadIDs reads a head.
const maxScanIDs = 8

// maxTailID bounds each id a TailScan keeps, as the transports bound the
// head they keep of a message too large: no id of the proxy's is larger.
const maxTailID = 1024

// maxScanKey bounds the member names a TailScan keeps: it looks only for
// "id" and "method", though either may be written with escapes.
const maxScanKey = 64

// Scan follows b, the frame's next bytes.
func (s *TailScan) Scan(b []byte) {
	for _, c := range b {
		if s.broken {
			return
		}
		s.step(c)
		s.off++
	}
}

// step follows one byte.
func (s *TailScan) step(c byte) {
	if s.inStr {
		s.stringByte(c)
		return
	}
	switch c {
	case ' ', '\t', '\r', '\n':
		return
	case '"':
		s.inStr = true
		s.inKey = len(s.open) == 1 && s.wantKey
		if s.inKey {
			s.key = s.key[:0]
			return
		}
	case '{', '[':
		s.open = append(s.open, c)
		if len(s.open) == 1 {
			s.wantKey = c == '{'
			s.broken = c != '{'
		}
		s.broken = s.broken || len(s.open) > MaxDepth
	case '}', ']':
		n := len(s.open)
		if n == 0 || s.open[n-1] != c-2 { // '{'+2 is '}', '['+2 is ']'
			s.broken = true
			return
		}
		if n == 1 {
			s.endID()
		} else {
			s.keep(c) // the end of an id that is an array or object
		}
		s.open = s.open[:n-1]
		return
	case ':':
		if len(s.open) == 1 && !s.wantKey {
			s.member()
			return
		}
	case ',':
		if len(s.open) == 1 {
			s.endID()
			s.wantKey = true
			return
		}
	}
	s.keep(c)
}

// stringByte follows a byte inside a string.
func (s *TailScan) stringByte(c byte) {
	switch {
	case s.esc:
		s.esc = false
	case c == '\\':
		s.esc = true
	case c == '"':
		s.inStr = false
		if s.inKey {
			s.inKey, s.wantKey = false, false
			return
		}
	}
	if s.inKey {
		if len(s.key) < maxScanKey {
			s.key = append(s.key, c)
		}
		return
	}
	s.keep(c)
}

// keep adds c to the id being read, if one is.
func (s *TailScan) keep(c byte) {
	if !s.inID {
		return
	}
	if len(s.val) >= maxTailID {
		s.inID = false // no id of this size is one of the proxy's
		return
	}
	s.val = append(s.val, c)
	s.valEnd = s.off + 1
}

// member starts the value of the top-level member just named.
func (s *TailScan) member() {
	name := s.key
	if bytes.IndexByte(name, '\\') >= 0 {
		var n string
		if json.Unmarshal(append(append([]byte{'"'}, name...), '"'), &n) != nil {
			return
		}
		name = []byte(n)
	}
	switch string(name) {
	case "id":
		s.inID, s.val = true, s.val[:0]
	case "method":
		s.method = true
	}
}

// endID ends the value of a top-level "id" member, if one was being read.
func (s *TailScan) endID() {
	if s.inID && len(s.val) > 0 && len(s.ids) < maxScanIDs {
		s.ids = append(s.ids, scannedID{bytes.Clone(s.val), s.valEnd})
	}
	s.inID = false
}

// LateIDs returns the ids the frame gives that its first headLen bytes,
// of the kind head tells (HeadMessage), left unanswered, and
// whether they are a request's: for a head that tells, the ids after it,
// of the kind it tells; for one that does not, every id, of the kind the
// whole frame tells ("method" makes a request). None for a frame that is
// not one object that could be followed to its end.
func (s *TailScan) LateIDs(headLen int, head HeadKind) (ids [][]byte, request bool) {
	if s.broken || len(s.open) != 0 {
		return nil, false
	}
	for _, id := range s.ids {
		// One that ends before headLen, a head that tells read.
		if id.end >= headLen || head == HeadUndecided {
			ids = append(ids, id.val)
		}
	}
	if head == HeadUndecided {
		return ids, s.method
	}
	return ids, head == HeadOfRequest
}

// LateHead returns what stands for ids, found by LateIDs, as the head of
// a message too large (HeadMessage reads it): {"id":ID,"result":null} for
// an answer, {"id":ID,"method":null} for a request, with "id" given once
// for each id. None for no ids.
func LateHead(ids [][]byte, request bool) []byte {
	if len(ids) == 0 {
		return nil
	}
	var head []byte
	for _, id := range ids {
		head = append(append(head, `,"id":`...), id...)
	}
	head[0] = '{'
	if request {
		return append(head, `,"method":null}`...)
	}
	return append(head, `,"result":null}`...)
}
