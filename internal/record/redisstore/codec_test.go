package redisstore

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// TestDecodeHistory: a history of triples, as the store wrote before
// decisions, still decodes; a decision's By and Via come back; and a
// reader that knows only triples (the previous version, during a rolling
// upgrade) still decodes a history with decisions.
func TestDecodeHistory(t *testing.T) {
	at := time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC)
	ns := encTime(at)
	tests := []struct {
		name, hist string
		want       []record.Transition
	}{
		{"triples", `[["accepted","` + ns + `",""],["dispatched","` + ns + `","again"]]`, []record.Transition{
			{State: record.Accepted, At: at},
			{State: record.Dispatched, At: at, Note: "again"},
		}},
		{"decisions", `[["accepted","` + ns + `",""],["authorized","` + ns + `","ticket 42","bob","operator"],["refused","` + ns + `","","","timeout"]]`, []record.Transition{
			{State: record.Accepted, At: at},
			{State: record.Authorized, At: at, Note: "ticket 42", By: "bob", Via: record.ApproverOperator},
			{State: record.Refused, At: at, Via: record.ViaTimeout},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decHistory(tt.hist)
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("decHistory = %+v, %v; want %+v", got, err, tt.want)
			}
			var old [][3]string // how the previous version decodes it
			if err := json.Unmarshal([]byte(tt.hist), &old); err != nil || len(old) != len(tt.want) || old[1][2] != tt.want[1].Note {
				t.Fatalf("a reader of triples got %q, %v", old, err)
			}
		})
	}
}

// TestDecodeWithoutAwaiting: a record hash of the previous version, which
// has no awaiting field, decodes as awaiting nothing.
func TestDecodeWithoutAwaiting(t *testing.T) {
	m := map[string]string{
		"id": "exe_old", "key": "k", "fingerprint": "k", "state": "accepted",
		"history": `[["accepted","1",""]]`, "attempts": "0", "attached": "0",
		"retention": "3600000000000", "expires_at": "", "owner": "", "lease_until": "",
	}
	r, err := decode(m)
	if err != nil || r.Awaiting != "" || len(r.History) != 1 || r.History[0].By != "" {
		t.Fatalf("decode = %+v, %v; want accepted, awaiting nothing", r, err)
	}
	m["awaiting"] = record.ApproverOperator
	if r, err := decode(m); err != nil || r.Awaiting != record.ApproverOperator {
		t.Fatalf("decode with awaiting = %+v, %v; want it kept", r, err)
	}
}

// FuzzPlainHistory: what the fast reader of a history accepts, it reads
// exactly as encoding/json does.
func FuzzPlainHistory(f *testing.F) {
	for _, s := range []string{
		`[]`, `[[]]`, `[["accepted","1764547200000000000",""]]`,
		`[["accepted","1",""],["authorized","2","","alice","elicitation"]]`,
		`[["a\/b","1",""]]`, `[ ["a","1",""] ]`, `[["é","1","\u00e9"]]`, `[["a",1,""]]`, `[["a"],]`, `[[""]]x`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := plainHistory(s)
		if !ok {
			return
		}
		var want [][]string
		if err := json.Unmarshal([]byte(s), &want); err != nil {
			t.Fatalf("plainHistory read %q, which encoding/json refuses: %v", s, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("plainHistory(%q) = %q; encoding/json reads %q", s, got, want)
		}
	})
}

// TestPlainHistoryReadsWhatScriptsWrite: the histories the scripts write
// take the fast reader, and one it does not take (an escape, white
// space) is still read, by encoding/json.
func TestPlainHistoryReadsWhatScriptsWrite(t *testing.T) {
	for _, s := range []string{`[]`, `[["accepted","1764547200000000000",""],["dispatched","1764547200000000001",""]]`,
		`[["accepted","1",""],["authorized","2","","alice","elicitation"]]`} {
		if _, ok := plainHistory(s); !ok {
			t.Errorf("plainHistory(%q) did not read it", s)
		}
	}
	for _, s := range []string{`[["accepted","1","a\/b"]]`, `[ ["accepted","1",""] ]`} {
		if _, ok := plainHistory(s); ok {
			t.Errorf("plainHistory(%q) read it; want it left to encoding/json", s)
		}
		if h, err := decHistory(s); err != nil || len(h) != 1 || h[0].State != record.Accepted {
			t.Errorf("decHistory(%q) = %v, %v", s, h, err)
		}
	}
}
