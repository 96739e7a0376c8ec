package intercept

import (
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
	b = jsonrpc.AppendString(b, r.ID)
	b = append(b, `,"state":`...)
	b = jsonrpc.AppendString(b, string(r.State))
	b = append(b, `,"tool":`...)
	b = jsonrpc.AppendString(b, r.Tool)
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
		b = jsonrpc.AppendString(b, name)
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
