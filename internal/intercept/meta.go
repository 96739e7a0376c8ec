package intercept

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// replayMeta returns the _meta members that mark a replay, as JSON
// members without the braces.
func replayMeta(r *record.Record) []byte {
	return appendExecution(append(make([]byte, 0, 320), `"`+mcp.MetaReplayed+`":true,"`+mcp.MetaExecution+`":`...), r)
}

// executionMember returns the _meta member that names r's execution.
func executionMember(r *record.Record) []byte {
	return appendExecution(append(make([]byte, 0, 300), `"`+mcp.MetaExecution+`":`...), r)
}

// appendExecution appends the JSON of describe(r), byte for byte what
// json.Marshal makes of it (TestAppendExecution), without reflection: it is
// on the path of every replay.
func appendExecution(b []byte, r *record.Record) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, r.ID)
	b = append(b, `,"state":`...)
	b = appendJSONString(b, string(r.State))
	b = append(b, `,"tool":`...)
	b = appendJSONString(b, r.Tool)
	b = append(b, `,"times":{`...)
	// The last time of each state, in the order of the names, as
	// json.Marshal writes a map.
	names := make([]string, 0, 8)
	for _, t := range r.History {
		if !slices.Contains(names, string(t.State)) {
			names = append(names, string(t.State))
		}
	}
	slices.Sort(names)
	for i, name := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, name)
		b = append(b, ':')
		at := r.At(record.State(name))
		if y := at.Year(); y < 0 || y > 9999 {
			// Outside what RFC 3339 can write, where json.Marshal
			// fails: no time rather than no answer.
			b = append(b, "null"...)
			continue
		}
		b = append(b, '"')
		b = at.AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	b = append(b, `},"attempts":`...)
	b = strconv.AppendInt(b, int64(r.Attempts), 10)
	b = append(b, `,"attached":`...)
	b = strconv.AppendInt(b, int64(r.Attached), 10)
	return append(b, '}') // describe leaves Upstream out
}

// appendJSONString appends s as json.Marshal writes a string: a string of
// plain printable ASCII between quotes as it is, anything else through
// json.Marshal (which escapes <, > and & too).
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// withMeta returns a copy of result with members (JSON members without
// braces) added to its _meta object, creating it if absent. The stored
// result is never modified, and the rest of it is kept byte for byte. A
// result that is not an object comes back unchanged.
func withMeta(result json.RawMessage, members []byte) json.RawMessage {
	var meta []byte
	empty := true
	if jsonrpc.EachMember(result, func(name, value []byte) bool {
		empty = false
		if string(name) == "_meta" {
			meta = value // the last one wins, as in JSON.parse
		}
		return true
	}) != nil {
		return result
	}
	return insertMeta(result, meta, empty, members)
}

// insertMeta is withMeta for an object whose _meta member the caller has
// found already: meta is its value, a slice of obj, or nil if it has none;
// empty says obj has no members at all. The result never holds a name
// twice: members of meta that members also names are dropped (a result
// that came through another mcp-idempotent carries its _meta), and a
// _meta that is not an object (null) is replaced.
func insertMeta(obj, meta json.RawMessage, empty bool, members []byte) json.RawMessage {
	if meta == nil {
		// Add a _meta member last.
		end := bytes.LastIndexByte(obj, '}')
		out := make([]byte, 0, len(obj)+len(members)+16)
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
	out := make([]byte, 0, len(obj)+len(members)+16)
	out = append(out, obj[:start]...)
	switch {
	case meta[0] != '{':
		out = append(append(append(out, '{'), members...), '}')
	case !bytes.Contains(meta, []byte("mcp-idempotent")) && bytes.IndexByte(meta, '\\') < 0:
		// The common case: none of ours in it. Insert before its
		// closing brace, leaving the rest as it came.
		out = append(out, meta[:len(meta)-1]...)
		if len(bytes.TrimSpace(meta[1:len(meta)-1])) > 0 {
			out = append(out, ',')
		}
		out = append(append(out, members...), '}')
	default:
		out = appendWithout(out, meta, members)
	}
	return append(out, obj[end:]...)
}

// appendWithout appends the object meta less the members whose names
// members (a list of members, as inside braces) also has, with members
// last. The members kept are copied as they came, name and spacing.
func appendWithout(out, meta, members []byte) []byte {
	own := map[string]bool{}
	wrapped := append(append([]byte{'{'}, members...), '}')
	jsonrpc.EachMember(wrapped, func(name, _ []byte) bool { // our own text: well formed
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
	jsonrpc.EachMember(meta, func(name, value []byte) bool {
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

// withoutProgressToken returns params, whose _meta is meta (a slice of
// them, or nil), less _meta's progressToken, and the new _meta. A call the
// proxy sends again goes without it: the client has had the first
// attempt's progress, and MCP asks progress to increase, which a second
// attempt's would not.
func withoutProgressToken(params, meta json.RawMessage) (json.RawMessage, json.RawMessage) {
	if meta == nil || meta[0] != '{' || !bytes.Contains(meta, []byte("progressToken")) && bytes.IndexByte(meta, '\\') < 0 {
		return params, meta
	}
	start := cap(params) - cap(meta) // meta is a slice of params
	end := start + len(meta)
	out := append([]byte(nil), params[:start]...)
	out = appendDropping(out, meta, map[string]bool{"progressToken": true}, nil)
	newEnd := len(out)
	out = append(out, params[end:]...)
	return out, out[start:newEnd] // its capacity locates it in out, as insertMeta needs
}
