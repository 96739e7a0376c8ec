package record

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// AppendHistoryJSON stands in for json.Marshal in the stores' writers:
// a byte that differed would change what the stores compare a record's
// history with (sqlitestore/known.go), so each case must match Marshal
// exactly, its errors included.
func TestAppendHistoryJSON(t *testing.T) {
	at := time.Date(2026, 12, 4, 3, 4, 5, 123456700, time.UTC)
	histories := [][]Transition{
		nil,
		{},
		{{State: Accepted, At: at}},
		{{State: Accepted, At: at}, {State: Dispatched, At: at.Add(time.Millisecond)}},
		{{State: Authorized, At: at, Note: "ok", By: "alice", Via: "cli"}},
		{{State: Refused, At: at.In(time.FixedZone("", 5*3600+30*60)), Note: "over the limit"}},
		{{State: Failed, At: at.In(time.FixedZone("", -8*3600))}},
		{{State: Unknown, At: at.Truncate(time.Second)}},
		{{State: Unknown, At: time.Time{}}},
		{{State: Completed, At: at, Note: `quote " and \ backslash`}},
		{{State: Completed, At: at, Note: "<b>&amp;</b>"}},
		{{State: Completed, At: at, Note: "line\nbreak\ttab\x00nul"}},
		{{State: Completed, At: at, Note: "café ✓ \u2028"}},
		{{State: Completed, At: at, By: "\xff\xfe invalid"}},
		{{State: Completed, At: at, Via: "\x7f"}},
		{{State: Completed, At: at, Note: "a & b"}},
		{{State: Completed, At: at, Note: "a > b"}},
		{{State: "odd<state>", At: at}},
		{{State: Completed, At: at.In(time.FixedZone("", 3600+7))}},
		{{State: Completed, At: at.In(time.FixedZone("", 25*3600))}},
		{{State: Completed, At: at.In(time.FixedZone("", 24*3600))}},
		{{State: Completed, At: at.In(time.FixedZone("", -24*3600))}},
		{{State: Completed, At: at.In(time.FixedZone("", 24*3600-1))}},
		{{State: Completed, At: time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC)}},
		{{State: Completed, At: time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)}},
		{{State: Completed, At: time.Date(9999, 12, 31, 23, 0, 0, 0, time.UTC).In(time.FixedZone("", 2*3600))}},
		{{State: Completed, At: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}},
		{{State: Completed, At: time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)}},
		{{State: Completed, At: at}, {State: Completed, At: time.Date(12345, 1, 1, 0, 0, 0, 0, time.UTC)}},
	}
	for _, h := range histories {
		want, wantErr := json.Marshal(h)
		got, err := AppendHistoryJSON([]byte("prefix:"), h)
		if (err != nil) != (wantErr != nil) {
			t.Errorf("AppendHistoryJSON(%+v): error %v; Marshal's %v", h, err, wantErr)
			continue
		}
		if err == nil && !bytes.Equal(got, append([]byte("prefix:"), want...)) {
			t.Errorf("AppendHistoryJSON(%+v) =\n%s\nMarshal gives\n%s", h, got, want)
		}
	}
}

// FuzzAppendTransitionJSON compares AppendTransitionJSON with Marshal
// over times from second sec (Unix time, any year) and zones of any
// offset.
func FuzzAppendTransitionJSON(f *testing.F) {
	f.Add("completed", int64(1796353445), int64(123456700), 0, "note", "by", "via")
	f.Add("x", int64(-62167219200), int64(0), 3600, "<&>", "\x00", "\xff") // year 0
	f.Add("x", int64(253402300799), int64(999999999), 86400, "", "", "")   // the end of 9999
	f.Fuzz(func(t *testing.T, state string, sec, nsec int64, offset int, note, by, via string) {
		tr := Transition{State: State(state), At: time.Unix(sec, nsec).In(time.FixedZone("", offset)), Note: note, By: by, Via: via}
		want, wantErr := json.Marshal(tr)
		got, err := AppendTransitionJSON(nil, tr)
		if (err != nil) != (wantErr != nil) || err == nil && !bytes.Equal(got, want) || err != nil && got != nil {
			t.Fatalf("AppendTransitionJSON(%+v) = %s, %v; Marshal gives %s, %v", tr, got, err, want, wantErr)
		}
	})
}

// BenchmarkHistoryJSON compares AppendHistoryJSON with json.Marshal on a
// new execution's history as a store writes it.
func BenchmarkHistoryJSON(b *testing.B) {
	at := time.Now()
	h := []Transition{{State: Accepted, At: at}, {State: Dispatched, At: at}, {State: Completed, At: at}}
	b.Run("append", func(b *testing.B) {
		for b.Loop() {
			if _, err := AppendHistoryJSON(nil, h); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("marshal", func(b *testing.B) {
		for b.Loop() {
			if _, err := json.Marshal(h); err != nil {
				b.Fatal(err)
			}
		}
	})
}
