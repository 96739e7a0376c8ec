package intercept

import (
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// withExecution returns a copy of result, appended to dst (allocated if
// dst is nil), whose _meta names r's execution, and marks it a replay if
// replay is set; a result that is not an object comes back as it is. The
// members are written into a pooled buffer, since the copy holds them: a
// replay then makes its answer only, not a second buffer as large.
func withExecution(dst []byte, result json.RawMessage, r *record.Record, replay bool) json.RawMessage {
	bp := metaBufs.Get().(*[]byte)
	b := (*bp)[:0]
	if replay {
		b = append(b, `"`+mcp.MetaReplayed+`":true,`...)
	}
	b = appendExecution(append(b, `"`+mcp.MetaExecution+`":`...), r)
	result = jsonrpc.AppendWithMeta(dst, result, b)
	if cap(b) <= maxKeptMeta {
		*bp = b
		metaBufs.Put(bp)
	}
	return result
}

// metaBufs holds *[]byte buffers for withExecution.
var metaBufs = sync.Pool{New: func() any { return new([]byte) }}

// maxKeptMeta bounds the buffers metaBufs keeps: one execution with a
// long history does not pin its buffer.
const maxKeptMeta = 4 << 10

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
		b = appendTime(b, r.At(record.State(name)))
	}
	b = append(b, `},"attempts":`...)
	b = strconv.AppendInt(b, int64(r.Attempts), 10)
	b = append(b, `,"attached":`...)
	b = strconv.AppendInt(b, int64(r.Attached), 10)
	return append(b, '}') // describe leaves Upstream out
}

// appendTime appends t as json.Marshal writes it, in RFC 3339 with
// nanoseconds, or null for a year RFC 3339 cannot write (where
// json.Marshal fails: no time rather than no answer). It writes by hand
// what time.AppendFormat writes (TestAppendTime): the general formatter
// cost more than the rest of a replay's _meta.
func appendTime(b []byte, t time.Time) []byte {
	_, offset := t.Zone()
	u := t.Unix()
	if u < minTime || u > maxTime || offset <= -86400 || offset >= 86400 {
		return appendTimeSlowly(b, t)
	}
	// Days since 0000-03-01, the start of a 400-year cycle that ends
	// with its leap day: Howard Hinnant's civil_from_days, unsigned (the
	// bounds above keep sec positive), as unsigned division by a
	// constant is cheaper.
	sec := uint64(u + int64(offset) + 719468*86400)
	days, secs := sec/86400, uint32(sec%86400)
	era := days / 146097
	doe := days - era*146097
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365
	doy := doe - (365*yoe + yoe/4 - yoe/100)
	mp := (5*doy + 2) / 153
	day := doy - (153*mp+2)/5 + 1
	month := mp + 3
	year := yoe + era*400
	if month > 12 {
		month -= 12
		year++
	}
	// Written into an array and appended once: an append per field cost
	// more than the arithmetic.
	var f [37]byte
	f[0] = '"'
	put2(f[1:], uint32(year/100))
	put2(f[3:], uint32(year%100))
	f[5] = '-'
	put2(f[6:], uint32(month))
	f[8] = '-'
	put2(f[9:], uint32(day))
	f[11] = 'T'
	put2(f[12:], secs/3600)
	f[14] = ':'
	put2(f[15:], secs/60%60)
	f[17] = ':'
	put2(f[18:], secs%60)
	n := 20
	if ns := uint32(t.Nanosecond()); ns != 0 {
		f[20] = '.'
		for i := 29; i > 20; i-- {
			f[i] = byte('0' + ns%10)
			ns /= 10
		}
		n = 30
		for f[n-1] == '0' {
			n--
		}
	}
	if offset == 0 {
		f[n], f[n+1] = 'Z', '"'
		return append(b, f[:n+2]...)
	}
	zone := offset / 60 // minutes, as RFC 3339 writes the offset
	f[n] = '+'
	if zone < 0 {
		f[n], zone = '-', -zone
	}
	put2(f[n+1:], uint32(zone/60))
	f[n+3] = ':'
	put2(f[n+4:], uint32(zone%60))
	f[n+6] = '"'
	return append(b, f[:n+7]...)
}

// minTime and maxTime bound the Unix times appendTime writes itself, with
// a day's margin for the zone: 0000-03-02 and 9999-12-30, UTC.
const (
	minTime = -62161948800
	maxTime = 253402128000
)

// appendTimeSlowly is appendTime for any time.
func appendTimeSlowly(b []byte, t time.Time) []byte {
	if y := t.Year(); y < 0 || y > 9999 {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

// put2 writes n, below 100, as two digits.
func put2(b []byte, n uint32) { b[0], b[1] = byte('0'+n/10), byte('0'+n%10) }
