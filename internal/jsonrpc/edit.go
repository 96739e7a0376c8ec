package jsonrpc

import (
	"bytes"
	"encoding/json"
)

// Replace returns frame with value replaced by with. value must be a
// subslice of frame, as the values Decode and Member return are: the
// message is not encoded again, so every other byte is kept. It renames
// a message's id, or its progress token.
func Replace(frame, value, with []byte) []byte {
	// Both slices end in the same backing array, so the difference of
	// their capacities is value's offset in frame.
	off := cap(frame) - cap(value)
	if off < 0 || off+len(value) > len(frame) || !bytes.Equal(frame[off:off+len(value)], value) {
		panic("jsonrpc: Replace: value is not a subslice of frame")
	}
	out := make([]byte, 0, len(frame)-len(value)+len(with))
	out = append(out, frame[:off]...)
	out = append(out, with...)
	return append(out, frame[off+len(value):]...)
}

// WithMeta returns a copy of result with members (JSON members without
// braces) added to its _meta object, creating it if absent, or to each
// of them where it gives _meta twice or in another case. The stored
// result is never modified, and the rest of it is kept byte for byte. A
// result that is not an object comes back unchanged.
func WithMeta(result json.RawMessage, members []byte) json.RawMessage {
	return AppendWithMeta(nil, result, members)
}

// AppendWithMeta is WithMeta appending the copy to dst, for a caller that
// builds it in a buffer of its own; a result that is not an object comes
// back as it is, not appended.
func AppendWithMeta(dst []byte, result json.RawMessage, members []byte) json.RawMessage {
	var meta []byte
	empty := true
	metas := 0 // members named _meta in any case
	if EachMember(result, func(name, value []byte) bool {
		empty = false
		if len(name) == len("_meta") && bytes.EqualFold(name, []byte("_meta")) {
			metas++
			if string(name) == "_meta" {
				meta = value // the last one wins, as in JSON.parse
			}
		}
		return true
	}) != nil {
		return result
	}
	if dst == nil {
		dst = make([]byte, 0, len(result)+len(members)+16)
	}
	if metas > 1 || metas == 1 && meta == nil {
		return appendEveryMeta(dst, result, members, meta == nil)
	}
	return AppendInsertMeta(dst, result, meta, empty, members)
}

// appendEveryMeta is AppendWithMeta for a result that gives _meta twice,
// or in another case ("_META"). Readers differ on which they take: the
// last (JSON.parse), the first, or, as Go's encoding/json does, every
// one whose name matches without regard to case, merged in order. So
// members go into each: added to one alone, they could be read from none,
// or read as the other's older values ("replayed": false). add says
// that none is named _meta exactly: one is added last, for the readers
// that read that name alone.
func appendEveryMeta(dst []byte, result json.RawMessage, members []byte, add bool) json.RawMessage {
	from := 0 // what of result is copied to dst
	EachMember(result, func(name, value []byte) bool {
		if len(name) == len("_meta") && bytes.EqualFold(name, []byte("_meta")) {
			start := cap(result) - cap(value) // value is a slice of result
			dst = appendMetaValue(append(dst, result[from:start]...), value, members)
			from = start + len(value)
		}
		return true
	})
	if add {
		end := bytes.LastIndexByte(result, '}')
		dst = append(append(dst, result[from:end]...), `,"_meta":{`...)
		dst = append(append(dst, members...), '}')
		from = end
	}
	return append(dst, result[from:]...)
}

// InsertMeta is WithMeta for an object whose _meta member the caller has
// found already: meta is its value, a slice of obj, or nil if it has none;
// empty says obj has no members at all. The result never holds a name
// twice: members of meta that members also names are dropped (a result
// that came through another mcp-idempotent carries its _meta), and a
// _meta that is not an object (null) is replaced.
func InsertMeta(obj, meta json.RawMessage, empty bool, members []byte) json.RawMessage {
	return AppendInsertMeta(make([]byte, 0, len(obj)+len(members)+16), obj, meta, empty, members)
}

// AppendInsertMeta is InsertMeta appending the copy to out.
func AppendInsertMeta(out []byte, obj, meta json.RawMessage, empty bool, members []byte) json.RawMessage {
	if meta == nil {
		// Add a _meta member last.
		end := bytes.LastIndexByte(obj, '}')
		out = append(out, obj[:end]...)
		if !empty {
			out = append(out, ',')
		}
		out = append(append(append(out, `"_meta":{`...), members...), '}')
		return append(out, obj[end:]...)
	}
	// meta is a slice of obj, so its capacity locates it.
	start := cap(obj) - cap(meta)
	end := start + len(meta)
	out = appendMetaValue(append(out, obj[:start]...), meta, members)
	return append(out, obj[end:]...)
}

// appendMetaValue appends meta, the value of a _meta member, with
// members added, as InsertMeta describes.
func appendMetaValue(out, meta, members []byte) []byte {
	switch {
	case meta[0] != '{':
		return append(append(append(out, '{'), members...), '}')
	case !holdsAName(meta, members) && bytes.IndexByte(meta, '\\') < 0:
		// The common case: none of members' names in it (nor an escape,
		// which could spell one). Insert before its closing brace,
		// leaving the rest as it came.
		out = append(out, meta[:len(meta)-1]...)
		if len(bytes.TrimSpace(meta[1:len(meta)-1])) > 0 {
			out = append(out, ',')
		}
		return append(append(out, members...), '}')
	}
	return appendWithout(out, meta, members)
}

// holdsAName reports whether meta holds the name of one of members (a
// list of members, as inside braces, written by the caller and well
// formed), or might: a name with an escape counts as held.
func holdsAName(meta, members []byte) bool {
	for i := skipSpace(members, 0); i < len(members) && members[i] == '"'; {
		end := skipString(members, i)
		if end < 0 {
			return true
		}
		name := members[i+1 : end-1]
		if bytes.IndexByte(name, '\\') >= 0 || bytes.Contains(meta, name) {
			return true
		}
		i = skipValue(members, skipSpace(members, skipSpace(members, end)+1))
		if i < 0 {
			return true
		}
		i = skipSpace(members, i)
		if i < len(members) && members[i] == ',' {
			i = skipSpace(members, i+1)
		}
	}
	return false
}

// appendWithout appends the object meta less the members whose names
// members (a list of members, as inside braces) also has, with members
// last. The members kept are copied as they came, name and spacing.
func appendWithout(out, meta, members []byte) []byte {
	own := map[string]bool{}
	wrapped := append(append([]byte{'{'}, members...), '}')
	EachMember(wrapped, func(name, _ []byte) bool { // our own text: well formed
		own[string(name)] = true
		return true
	})
	return appendDropping(out, meta, own, members)
}

// appendDropping appends the object meta less the members named in drop,
// copied as they came, and then members (a list of members, as inside
// braces, or none).
func appendDropping(out, meta []byte, drop map[string]bool, members []byte) []byte {
	out = append(out, '{')
	first := true
	// from is where the member being read starts in meta: after its '{'
	// or the comma before it. meta was checked by the caller's reader.
	from := 1
	EachMember(meta, func(name, value []byte) bool {
		end := cap(meta) - cap(value) + len(value) // value is a slice of meta
		if !drop[string(name)] {
			if !first {
				out = append(out, ',')
			}
			first = false
			out = append(out, bytes.TrimLeft(meta[from:end], " \t\r\n")...)
		}
		from = end + bytes.IndexByte(meta[end:], ',') + 1 // past the comma; at the end, unused
		return true
	})
	if len(members) > 0 {
		if !first {
			out = append(out, ',')
		}
		out = append(out, members...)
	}
	return append(out, '}')
}

// WithoutMetaMember returns params, whose _meta is meta (a slice of
// them, or nil), less _meta's member name, and the new _meta, a slice of
// the new params as InsertMeta needs it.
func WithoutMetaMember(params, meta json.RawMessage, name string) (json.RawMessage, json.RawMessage) {
	if meta == nil || meta[0] != '{' || !bytes.Contains(meta, []byte(name)) && bytes.IndexByte(meta, '\\') < 0 {
		return params, meta
	}
	start := cap(params) - cap(meta) // meta is a slice of params
	end := start + len(meta)
	out := append([]byte(nil), params[:start]...)
	out = appendDropping(out, meta, map[string]bool{name: true}, nil)
	newEnd := len(out)
	out = append(out, params[end:]...)
	return out, out[start:newEnd] // its capacity locates it in out, as insertMeta needs
}

// WithoutMembers returns the object obj less its members named in names,
// the others copied as they came.
func WithoutMembers(obj json.RawMessage, names ...string) json.RawMessage {
	drop := make(map[string]bool, len(names))
	for _, n := range names {
		drop[n] = true
	}
	return appendDropping(make([]byte, 0, len(obj)), obj, drop, nil)
}
