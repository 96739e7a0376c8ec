package pgstore

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// FuzzPlainHistory: what the hand-written reader reads, encoding/json
// reads alike; what it declines, decodeHistory hands to encoding/json.
func FuzzPlainHistory(f *testing.F) {
	for _, s := range []string{
		`[]`,
		`[{"at": "2026-07-28T12:00:00Z", "state": "accepted"}]`,
		`[{"at": "2026-07-28T12:00:00.123456789Z", "state": "accepted"}, {"at": "2026-07-28T12:00:01+02:00", "note": "it ran", "state": "completed"}]`,
		`[{"at": "2026-07-28T12:00:00Z", "by": "bob", "via": "operator", "note": "", "state": "authorized"}]`,
		`[{"at":"2026-07-28T12:00:00Z","state":"accepted"}]`,
		`[{"at": "2026-07-28T12:00:00Z", "note": "a \"quoted\" word", "state": "failed"}]`,
		`[{"State": "accepted"}]`,
		`[{"state": "accepted", "state": "failed"}]`,
		`[{"at": "2026-13-28T12:00:00Z"}]`,
		`[{}]`,
		`null`,
		`[{"at": null}]`,
		" [ { \"state\" : \"x\" } ] ",
		"[{\"note\": \"\xff\"}]",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, ok := plainHistory(raw)
		var want []record.Transition
		err := json.Unmarshal(raw, &want)
		if !ok {
			return
		}
		if err != nil {
			t.Fatalf("plainHistory read %q, which encoding/json refuses: %v", raw, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("plainHistory(%q) = %#v; encoding/json reads %#v", raw, got, want)
		}
	})
}

// TestHistoryAsTheServerWritesIt: the histories PostgreSQL returns, its
// jsonb form, are read by hand, and one with an escape by encoding/json,
// to the same transitions.
func TestHistoryAsTheServerWritesIt(t *testing.T) {
	s := newStore(t, nil)
	ctx := t.Context()
	if err := s.ensure(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		h     []record.Transition
		plain bool // read by hand
	}{
		{[]record.Transition{{State: record.Accepted}}, true},
		{[]record.Transition{{State: record.Accepted}, {State: record.Authorized, Note: "ok", By: "bob", Via: record.ApproverOperator}}, true},
		{[]record.Transition{{State: record.Failed, Note: `a "quoted" é`}}, false},
	} {
		in, err := json.Marshal(c.h)
		if err != nil {
			t.Fatal(err)
		}
		var out []byte
		if err := s.pool.QueryRow(ctx, `SELECT $1::jsonb`, string(in)).Scan(&out); err != nil {
			t.Fatal(err)
		}
		got, err := decodeHistory(out)
		if err != nil || !reflect.DeepEqual(got, c.h) {
			t.Errorf("decodeHistory(%s) = %+v, %v; want %+v", out, got, err, c.h)
		}
		if _, plain := plainHistory(out); plain != c.plain {
			t.Errorf("plainHistory(%s) read it: %v; want %v", out, plain, c.plain)
		}
	}
}
