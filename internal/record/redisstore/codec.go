package redisstore

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// A record is a Redis hash with these fields. Times are unix nanoseconds in
// decimal, "" for none; durations are nanoseconds. history is a JSON array
// of [state, time, note] triples, appended to by the scripts; a decision's
// is [state, time, note, by, via], which a reader that knows only triples
// decodes without its by and via. result, error and awaiting are present
// only when set; the scripts delete awaiting when the record leaves
// accepted.
//
//	id key fingerprint actor scope upstream tool
//	state history attempts attached result error awaiting
//	retention expires_at owner lease_until

// encTime returns t as the scripts store it. Times outside the years 1970
// to 2262 are clamped: a clock that far off is a test's, and the scripts
// compare only non-negative times.
func encTime(t time.Time) string {
	switch {
	case t.IsZero():
		return ""
	case t.Before(time.Unix(0, 0)):
		return "0"
	case t.After(time.Unix(0, math.MaxInt64)):
		return strconv.FormatInt(math.MaxInt64, 10)
	}
	return strconv.FormatInt(t.UnixNano(), 10)
}

func decTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	ns, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("bad time %q", s)
	}
	return time.Unix(0, ns).UTC(), nil
}

// encDuration returns d in nanoseconds; a negative one is zero.
func encDuration(d time.Duration) string {
	return strconv.FormatInt(max(int64(d), 0), 10)
}

// encBytes marks b as set ("=" and b) or not (""), for the update script.
func encBytes(b json.RawMessage) string {
	if b == nil {
		return ""
	}
	return "=" + string(b)
}

// newFields returns the hash fields of r, reserved at now as accepted,
// or as accepted and dispatched at once, as arguments for HSET, and the
// length of its history field. A record dispatched at once awaits no
// decision, as reserved says.
func newFields(r *record.Record, now string, dispatch bool) ([]any, int) {
	state, attempts := record.Accepted, r.Attempts
	hist := [][3]string{{string(record.Accepted), now, ""}}
	if dispatch {
		state, attempts = record.Dispatched, attempts+1
		hist = append(hist, [3]string{string(record.Dispatched), now, ""})
	}
	histJSON, _ := json.Marshal(hist)
	f := []any{
		"id", r.ID, "key", r.Key, "fingerprint", r.Fingerprint,
		"actor", r.Actor, "scope", r.Scope, "upstream", r.Upstream, "tool", r.Tool,
		"state", string(state), "history", histJSON,
		"attempts", attempts, "attached", r.Attached,
		"retention", encDuration(r.Retention), "expires_at", "",
		"owner", r.Owner, "lease_until", encTime(r.LeaseUntil),
	}
	if r.Result != nil {
		f = append(f, "result", []byte(r.Result))
	}
	if r.Error != nil {
		f = append(f, "error", []byte(r.Error))
	}
	if r.Awaiting != "" && !dispatch {
		f = append(f, "awaiting", r.Awaiting)
	}
	return f, len(histJSON)
}

// reserved returns what Reserve stored for r at now, as newFields does:
// memstore's rules, a copy of r as accepted, and dispatched if asked.
func reserved(r *record.Record, now string, dispatch bool) *record.Record {
	at, _ := decTime(now)
	rec := r.Clone()
	rec.State = record.Accepted
	rec.History = []record.Transition{{State: record.Accepted, At: at}}
	rec.ExpiresAt = time.Time{}
	rec.LeaseUntil, _ = decTime(encTime(r.LeaseUntil))
	if dispatch {
		rec.Apply(&record.Change{To: record.Dispatched}, at)
	}
	return rec
}

// fields turns a flat HGETALL reply into a map.
func fields(v any) (map[string]string, error) {
	list, ok := v.([]any)
	if !ok || len(list)%2 != 0 {
		return nil, fmt.Errorf("unexpected record reply %T", v)
	}
	m := make(map[string]string, len(list)/2)
	for i := 0; i < len(list); i += 2 {
		k, ok1 := list[i].(string)
		val, ok2 := list[i+1].(string)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("unexpected record field %T %T", list[i], list[i+1])
		}
		m[k] = val
	}
	return m, nil
}

// decode builds a record from its hash fields.
func decode(m map[string]string) (*record.Record, error) {
	r, err := decodeHash(m)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", record.ErrUnreadable, err)
	}
	return r, nil
}

func decodeHash(m map[string]string) (*record.Record, error) {
	r := &record.Record{
		ID:          m["id"],
		Key:         m["key"],
		Fingerprint: m["fingerprint"],
		Actor:       m["actor"],
		Scope:       m["scope"],
		Upstream:    m["upstream"],
		Tool:        m["tool"],
		State:       record.State(m["state"]),
		Owner:       m["owner"],
		Awaiting:    m["awaiting"],
	}
	if r.ID == "" {
		return nil, fmt.Errorf("record has no id")
	}
	if r.State == "" {
		return nil, fmt.Errorf("record %s has no state", r.ID)
	}
	var err error
	if r.History, err = decHistory(m["history"]); err != nil {
		return nil, fmt.Errorf("record %s: history: %w", r.ID, err)
	}
	if r.Attempts, err = strconv.Atoi(m["attempts"]); err != nil {
		return nil, fmt.Errorf("record %s: attempts: %w", r.ID, err)
	}
	if r.Attached, err = strconv.Atoi(m["attached"]); err != nil {
		return nil, fmt.Errorf("record %s: attached: %w", r.ID, err)
	}
	ret, err := strconv.ParseInt(m["retention"], 10, 64)
	if err != nil {
		return nil, fmt.Errorf("record %s: retention: %w", r.ID, err)
	}
	r.Retention = time.Duration(ret)
	if r.ExpiresAt, err = decTime(m["expires_at"]); err != nil {
		return nil, fmt.Errorf("record %s: expires_at: %w", r.ID, err)
	}
	if r.LeaseUntil, err = decTime(m["lease_until"]); err != nil {
		return nil, fmt.Errorf("record %s: lease_until: %w", r.ID, err)
	}
	if v, ok := m["result"]; ok {
		r.Result = json.RawMessage(v)
	}
	if v, ok := m["error"]; ok {
		r.Error = json.RawMessage(v)
	}
	return r, nil
}

// decHistory decodes a history field. Its transitions have three members,
// or five for a decision; a missing member is "", as it was when every
// transition was decoded as a triple.
func decHistory(s string) ([]record.Transition, error) {
	hist, ok := plainHistory(s)
	if !ok {
		if err := json.Unmarshal([]byte(s), &hist); err != nil {
			return nil, err
		}
	}
	ts := make([]record.Transition, len(hist))
	for i, h := range hist {
		h = append(h, make([]string, max(5-len(h), 0))...)
		at, err := decTime(h[1])
		if err != nil {
			return nil, err
		}
		ts[i] = record.Transition{State: record.State(h[0]), At: at, Note: h[2], By: h[3], Via: h[4]}
	}
	return ts, nil
}

// plainHistory reads s as encoding/json reads it into [][]string, if s is
// in the form the scripts write: arrays of strings with no white space and
// no escapes, every string valid UTF-8. ok is false for anything else,
// which encoding/json then reads. Every record a store returns carries its
// history, and reflection made this a seventh of a Redis store's CPU.
func plainHistory(s string) (hist [][]string, ok bool) {
	i := 0
	next := func(c byte) bool {
		if i < len(s) && s[i] == c {
			i++
			return true
		}
		return false
	}
	if !next('[') {
		return nil, false
	}
	hist = [][]string{}
	if next(']') {
		return hist, i == len(s)
	}
	for {
		if !next('[') {
			return nil, false
		}
		t := make([]string, 0, 5)
		for !next(']') {
			if len(t) > 0 && !next(',') {
				return nil, false
			}
			if !next('"') {
				return nil, false
			}
			n := strings.IndexByte(s[i:], '"')
			if n < 0 {
				return nil, false
			}
			v := s[i : i+n]
			if strings.IndexByte(v, '\\') >= 0 || !utf8.ValidString(v) || hasControl(v) {
				return nil, false
			}
			t = append(t, v)
			i += n + 1
		}
		hist = append(hist, t)
		if next(']') {
			return hist, i == len(s)
		}
		if !next(',') {
			return nil, false
		}
	}
}

// hasControl reports whether v holds a byte JSON does not allow in a
// string as it is.
func hasControl(v string) bool {
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 {
			return true
		}
	}
	return false
}

// encAttempts encodes a change's Attempts for the update script: "" for
// none.
func encAttempts(n int) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(n)
}
