package record

import (
	"encoding/json"
	"time"
)

// AppendHistoryJSON appends h as encoding/json's Marshal writes it, byte
// for byte, and fails where Marshal does (a time outside the years 0 to
// 9999, or in a zone 24 hours or more off UTC), returning nil. A durable
// store writes a record's history on every transition, in its single
// writer; Marshal's reflection was a twelfth of SQLite's.
func AppendHistoryJSON(b []byte, h []Transition) ([]byte, error) {
	if h == nil {
		return append(b, "null"...), nil
	}
	b = append(b, '[')
	for i, t := range h {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = AppendTransitionJSON(b, t); err != nil {
			return nil, err
		}
	}
	return append(b, ']'), nil
}

// AppendTransitionJSON appends t as encoding/json's Marshal writes it,
// or returns nil and the error Marshal returns.
func AppendTransitionJSON(b []byte, t Transition) ([]byte, error) {
	if !plainTime(t.At) || !plainJSON(string(t.State)) ||
		!plainJSON(t.Note) || !plainJSON(t.By) || !plainJSON(t.Via) {
		// Escapes, and Marshal's errors.
		out, err := json.Marshal(t)
		if err != nil {
			return nil, err
		}
		return append(b, out...), nil
	}
	b = append(b, `{"state":"`...)
	b = append(b, t.State...)
	b = append(b, `","at":"`...)
	b = t.At.AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	b = appendMember(b, `,"note":"`, t.Note)
	b = appendMember(b, `,"by":"`, t.By)
	b = appendMember(b, `,"via":"`, t.Via)
	return append(b, '}'), nil
}

// appendMember appends an omitempty string member, its opening quote in
// name, if v is not empty.
func appendMember(b []byte, name, v string) []byte {
	if v == "" {
		return b
	}
	b = append(b, name...)
	b = append(b, v...)
	return append(b, '"')
}

// plainTime reports whether Marshal writes t as AppendFormat does with
// RFC3339Nano, without its errors for a year outside 0 to 9999 or a zone
// of 24 hours or more.
func plainTime(t time.Time) bool {
	_, offset := t.Zone()
	y := t.Year()
	return 0 <= y && y <= 9999 && -24*3600 < offset && offset < 24*3600
}

// plainJSON reports whether Marshal writes s as it is, between quotes:
// printable ASCII, without the quote and backslash it escapes, nor the
// '<', '>' and '&' it escapes for HTML.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}
