package memstore

import (
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// TestPackRoundTrip checks that a packed record decodes to what it was:
// every field, nil told from empty, UTC told from local time, a state
// outside the list, a history longer than the common life, times after
// a zero one and after the Unix epoch's, and the decisions of an
// approval.
func TestPackRoundTrip(t *testing.T) {
	at := time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC)
	full := record.Record{
		ID: record.NewID(at), Key: "client-key", Fingerprint: "9f86d081", Actor: "alice", Scope: "key",
		Upstream: "github ref:00ff", Tool: "create_issue", State: record.Delivered,
		History: []record.Transition{
			{State: record.Accepted, At: at},
			{State: record.Dispatched, At: at.Add(time.Millisecond), Note: "sent"},
			{State: record.Unknown, At: at.Add(time.Second), Note: "no answer"},
			{State: record.Dispatched, At: at.Add(time.Minute)},
			{State: record.Completed, At: at.Add(time.Hour)},
			{State: record.Delivered, At: at.Add(time.Hour)},
		},
		Attempts: 2, Attached: 7, Result: json.RawMessage(`{"content":[]}`), Error: json.RawMessage{},
		Retention: 24 * time.Hour, ExpiresAt: at.Add(25 * time.Hour), Owner: "proxy-1",
	}
	local := record.Record{
		ID: "exe_local", Key: "k", Fingerprint: "k", State: record.Failed,
		History:   []record.Transition{{State: record.Accepted, At: time.Unix(1, 5)}, {State: record.Failed, At: time.Unix(0, 0)}, {State: record.Failed, At: time.Unix(7, 9)}},
		ExpiresAt: time.Unix(3600, 0), LeaseUntil: time.Unix(2, 0), Retention: -1,
	}
	fp := "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	hexed := record.Record{ID: "exe_hex", Key: fp, Fingerprint: fp, State: record.Unknown, History: []record.Transition{{State: record.Unknown, At: at}}}
	upper := record.Record{ID: "exe_upper", Key: "9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08", Fingerprint: fp}
	odd := record.Record{ID: "exe_odd", State: "paused", History: []record.Transition{{State: "paused"}, {State: "held", By: "bob", Via: "chat"}, {State: "paused", At: at.Local()}}}
	refused := record.Record{ID: "exe_refused", Key: "k", Fingerprint: "k", State: record.Refused, History: []record.Transition{
		{State: record.Accepted, At: at},
		{State: record.Authorized, At: at, Note: "looks right", By: "bob", Via: record.ApproverOperator},
		{State: record.Refused, At: at, By: "proxy"},
		{State: record.Refused, At: at, Via: record.ViaTimeout},
	}}
	for _, r := range []record.Record{full, local, hexed, upper, odd, refused, {}} {
		var c commons
		p := pack(nil, &r, c.ref(common{actor: r.Actor, scope: r.Scope, upstream: r.Upstream, tool: r.Tool, owner: r.Owner}))
		got := unpack(p, r.Attached, &c)
		if !reflect.DeepEqual(*got, r) {
			t.Errorf("unpack(pack(r)):\n got %+v\nwant %+v", *got, r)
		}
		if st := packedState(p); st != r.State {
			t.Errorf("packedState = %q; want %q", st, r.State)
		}
		if packedCommon(p) != 0 {
			t.Errorf("packedCommon = %d; want 0", packedCommon(p))
		}
		if id, key := packedID(p), packedKey(nil, p); id != r.ID || string(key) != r.Key || !packedKeyIs(p, r.Key) {
			t.Errorf("packedID, packedKey = %q, %q; want %q, %q", id, key, r.ID, r.Key)
		}
		if packedKeyIs(p, r.Key+"0") {
			t.Errorf("packedKeyIs(%q) holds", r.Key+"0")
		}
	}
}

// FuzzPackRoundTrip packs records made of arbitrary strings, numbers and
// times, and checks that each decodes to what it was.
func FuzzPackRoundTrip(f *testing.F) {
	f.Add("exe_01J", "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "", "alice", "note", []byte(`{}`), int64(1796222441324701012), int64(86400e9), 3, true)
	f.Add("", "", "fp", "", "", []byte(nil), int64(-1), int64(-5), 0, false)
	f.Fuzz(func(t *testing.T, id, key, fp, actor, note string, result []byte, at, retention int64, n int, utc bool) {
		if fp == "" {
			fp = key
		}
		// Times a Unix nanosecond count holds, sums included.
		at, retention = at%(1<<61), retention%(1<<61)
		when := time.Unix(0, at)
		if utc {
			when = when.UTC()
		}
		r := record.Record{ID: id, Key: key, Fingerprint: fp, Actor: actor, State: record.Delivered,
			Attempts: n, Attached: n % 7, Result: result, Retention: time.Duration(retention),
			ExpiresAt: when.Add(time.Duration(retention)), LeaseUntil: when}
		for i := range n % 9 {
			st := record.States[i%len(record.States)]
			if i == 5 {
				st = record.State(note)
			}
			r.History = append(r.History, record.Transition{State: st, At: when.Add(time.Duration(i) * time.Second), Note: note})
		}
		var c commons
		p := pack(nil, &r, c.ref(common{actor: r.Actor}))
		got := unpack(p, r.Attached, &c)
		// A packed time keeps its instant and whether it was in UTC.
		same := func(a, b time.Time) bool {
			return a.Equal(b) && (a.Location() == time.UTC) == (b.Location() == time.UTC)
		}
		if got.ID != r.ID || got.Key != r.Key || got.Fingerprint != r.Fingerprint || got.Actor != r.Actor ||
			got.State != r.State || got.Attempts != r.Attempts || got.Attached != r.Attached ||
			string(got.Result) != string(r.Result) || (got.Result == nil) != (r.Result == nil) ||
			got.Retention != r.Retention || !same(got.ExpiresAt, r.ExpiresAt) || !same(got.LeaseUntil, r.LeaseUntil) ||
			len(got.History) != len(r.History) {
			t.Fatalf("unpack(pack(r)):\n got %+v\nwant %+v", *got, r)
		}
		for i, tr := range r.History {
			if g := got.History[i]; g.State != tr.State || g.Note != tr.Note || !same(g.At, tr.At) {
				t.Fatalf("History[%d] = %+v; want %+v", i, g, tr)
			}
		}
		if !packedKeyIs(p, r.Key) || packedID(p) != r.ID || string(packedKey(nil, p)) != r.Key {
			t.Fatalf("the packed id and key of %q, %q do not match them", r.ID, r.Key)
		}
	})
}

// TestHexKey checks unhexKey against encoding/hex: every byte value, at
// every position of a fingerprint.
func TestHexKey(t *testing.T) {
	fp := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, key := range []string{fp, fp[:62], fp + "00", ""} {
		want := len(key) == 2*hexKeyLen
		if _, got := unhexKey(key); got != want {
			t.Errorf("unhexKey(%q) reports %v", key, got)
		}
	}
	for c := range 256 {
		for at := range len(fp) {
			key := fp[:at] + string(byte(c)) + fp[at+1:]
			raw, err := hex.DecodeString(key)
			want := err == nil && hex.EncodeToString(raw) == key // lowercase only
			got, ok := unhexKey(key)
			if ok != want {
				t.Fatalf("unhexKey(%q) reports %v; want %v", key, ok, want)
			}
			if want && string(got[:]) != string(raw) {
				t.Fatalf("unhexKey(%q) = %x; want %x", key, got, raw)
			}
		}
	}
}

// TestStateCode checks that stateCode gives each state its index in
// record.States, and otherState to any other.
func TestStateCode(t *testing.T) {
	for i, st := range record.States {
		if got := stateCode(st); int(got) != i {
			t.Errorf("stateCode(%q) = %d; want %d", st, got, i)
		}
	}
	for _, st := range []record.State{"", "other", "Accepted"} {
		if got := stateCode(st); got != otherState {
			t.Errorf("stateCode(%q) = %d; want otherState", st, got)
		}
	}
}

// TestHexKeyRandom checks unhexKey on random fingerprints, each digit's
// value at each position.
func TestHexKeyRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		var raw [hexKeyLen]byte
		for i := range raw {
			raw[i] = byte(r.Uint32())
		}
		key := hex.EncodeToString(raw[:])
		if got, ok := unhexKey(key); !ok || got != raw {
			t.Fatalf("unhexKey(%q) = %x, %v; want %x", key, got, ok, raw)
		}
	}
}
