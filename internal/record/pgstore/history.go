package pgstore

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// decodeHistory reads a record's history column, the text of a jsonb
// array of transitions. Every record a statement returns carries it, and
// encoding/json's reflection over it was a tenth of the client's CPU at
// 32 executions in flight, so the form PostgreSQL writes jsonb in is read
// by hand (plainHistory); anything else goes to encoding/json.
func decodeHistory(raw []byte) ([]record.Transition, error) {
	if h, ok := plainHistory(raw); ok {
		return h, nil
	}
	var h []record.Transition
	if err := json.Unmarshal(raw, &h); err != nil {
		return nil, err
	}
	return h, nil
}

// plainHistory reads raw as encoding/json reads it into []record.Transition,
// if raw is an array of objects whose members are the Transition's own
// names, spelled as its tags are, each once, with string values free of
// escapes and valid UTF-8, and times that time.Time reads: the form jsonb
// gives them in. ok is false for anything else.
func plainHistory(raw []byte) (h []record.Transition, ok bool) {
	p := historyParser{b: raw}
	if !p.next('[') {
		return nil, false
	}
	h = []record.Transition{}
	if p.next(']') {
		return h, p.end()
	}
	for {
		t, ok := p.transition()
		if !ok {
			return nil, false
		}
		h = append(h, t)
		if p.next(']') {
			return h, p.end()
		}
		if !p.next(',') {
			return nil, false
		}
	}
}

// historyParser reads plainHistory's form from b, from i on.
type historyParser struct {
	b []byte
	i int
}

// next skips white space and takes c, if it comes next.
func (p *historyParser) next(c byte) bool {
	for p.i < len(p.b) && isJSONSpace(p.b[p.i]) {
		p.i++
	}
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// end reports whether nothing but white space is left.
func (p *historyParser) end() bool {
	for p.i < len(p.b) && isJSONSpace(p.b[p.i]) {
		p.i++
	}
	return p.i == len(p.b)
}

// str takes a string without escapes, valid UTF-8, and returns what it
// holds.
func (p *historyParser) str() ([]byte, bool) {
	if !p.next('"') {
		return nil, false
	}
	n := bytes.IndexByte(p.b[p.i:], '"')
	if n < 0 {
		return nil, false
	}
	v := p.b[p.i : p.i+n]
	for _, c := range v {
		if c < 0x20 || c == '\\' {
			return nil, false
		}
	}
	if !utf8.Valid(v) {
		return nil, false
	}
	p.i += n + 1
	return v, true
}

// transition takes one object of the array.
func (p *historyParser) transition() (t record.Transition, ok bool) {
	if !p.next('{') {
		return t, false
	}
	if p.next('}') {
		return t, true
	}
	var seen [5]bool
	for {
		name, ok := p.str()
		if !ok || !p.next(':') {
			return t, false
		}
		v, ok := p.str()
		if !ok {
			return t, false
		}
		var field int
		switch string(name) {
		case "state":
			field, t.State = 0, record.State(v)
		case "at":
			field = 1
			if t.At.UnmarshalText(v) != nil {
				return t, false
			}
		case "note":
			field, t.Note = 2, string(v)
		case "by":
			field, t.By = 3, string(v)
		case "via":
			field, t.Via = 4, string(v)
		default:
			return t, false // encoding/json matches names without case
		}
		if seen[field] {
			return t, false // a repeat: encoding/json keeps the last
		}
		seen[field] = true
		if p.next('}') {
			return t, true
		}
		if !p.next(',') {
			return t, false
		}
	}
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }
