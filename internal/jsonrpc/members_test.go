package jsonrpc

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestReading(t *testing.T) {
	for _, tt := range []struct {
		obj       string
		ambiguous bool
	}{
		{`{"name":"a","arguments":{},"other":1}`, false},
		{`{"name":"a","names":"b"}`, false},
		{`{"name":"balance","Name":"charge_card"}`, true},
		{`{"NAME":"charge_card"}`, true},
		{`{"name":"a","name":"b"}`, true},
		{`{"name":"a","n\u0061me":"b"}`, true},
		{`{"name":"a","argument\u017f":{}}`, true}, // a long s folds to s
	} {
		r := Reading{Names: []string{"name", "arguments"}}
		if err := EachMember([]byte(tt.obj), func(name, _ []byte) bool {
			r.Note(name)
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if got := errors.Is(r.Err(), ErrAmbiguous); got != tt.ambiguous {
			t.Errorf("%s: Err() = %v; want ambiguous %v", tt.obj, r.Err(), tt.ambiguous)
		}
	}
}

// skipStringBefore is skipString as it was before its first run of
// plain bytes was scanned inline, to test the new one against.
func skipStringBefore(b []byte, i int) int {
	for i++; ; i += 2 {
		i = skipPlain(b, i)
		for i < len(b) && b[i] < 0x20 {
			i = skipPlain(b, i+1)
		}
		switch {
		case i >= len(b):
			return -1
		case b[i] == '"':
			return i + 1
		}
	}
}

// TestSkipString checks skipString against skipStringBefore on strings
// of every length up to 24 made of plain bytes, quotes, backslashes and
// control characters, cut at every point.
func TestSkipString(t *testing.T) {
	alphabet := []byte{'a', '"', '\\', 0x01, 'z', 0xff}
	rng := uint64(1)
	for n := 0; n <= 24; n++ {
		for range 400 {
			b := make([]byte, n+1)
			b[0] = '"'
			for j := 1; j <= n; j++ {
				rng = rng*6364136223846793005 + 1442695040888963407
				b[j] = alphabet[(rng>>33)%uint64(len(alphabet))]
			}
			for cut := 1; cut <= len(b); cut++ {
				if got, want := skipString(b[:cut], 0), skipStringBefore(b[:cut], 0); got != want {
					t.Fatalf("skipString(%q) = %d, want %d", b[:cut], got, want)
				}
			}
		}
	}
}

// TestDecodeStringMember checks the strings of a message's members and of
// its params' members, which are scanned without validValue: a bad one is
// refused as in any other value, and a good one taken whole.
func TestDecodeStringMember(t *testing.T) {
	for _, v := range []string{`"2.\u0001"`, "\"2.\x01\"", `"2.0\q"`, `"\u12"`, `"\u12x4"`, `"2.0`, `"2.0\"`, `"`} {
		for _, frame := range []string{
			`{"jsonrpc":` + v + `,"id":1,"method":"ping"}`,
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":` + v + `}}`,
		} {
			err := DecodeParamsInto(new(Message), []byte(frame), func(name, value []byte) bool { return true })
			if valid := json.Valid([]byte(frame)); (err == nil) != valid {
				t.Errorf("DecodeParamsInto(%q) = %v; valid JSON: %v", frame, err, valid)
			}
		}
	}
	var name []byte
	frame := `{"jsonrpc":"2.0","id":"a\"b","method":"tools/call","params":{"name":"c\u0064\\"}}`
	var m Message
	if err := DecodeParamsInto(&m, []byte(frame), func(n, value []byte) bool {
		if string(n) == "name" {
			name = value
		}
		return true
	}); err != nil || string(m.ID) != `"a\"b"` || string(name) != `"c\u0064\\"` {
		t.Errorf("DecodeParamsInto(%q) = %v, id %s, name %s", frame, err, m.ID, name)
	}
}

// TestMemberOnce: the member is read as JSON.parse reads it, and one
// given twice, or in another case, is an error naming it.
func TestMemberOnce(t *testing.T) {
	for _, tt := range []struct {
		obj, want, err string
	}{
		{`{"a":1,"progressToken":"p","b":2}`, `"p"`, ""},
		{`{"a":1}`, ``, ""},
		{`[1]`, ``, ""},
		{`{"progressToken":1,"progressToken":2}`, `2`, `"progressToken" is given twice`},
		{`{"progressToken":1,"progress\u0054oken":2}`, `2`, `"progressToken" is given twice`},
		{`{"PROGRESSTOKEN":1,"progressToken":2}`, `2`, `"PROGRESSTOKEN" differs from "progressToken" only in case`},
		{`{"progressToken":1,"progresstoken":2,"progressToken":3}`, `3`, `"progresstoken" differs`},
	} {
		got, err := MemberOnce(json.RawMessage(tt.obj), "progressToken")
		if string(got) != tt.want || (err == nil) != (tt.err == "") || err != nil && (!errors.Is(err, ErrAmbiguous) || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("MemberOnce(%s) = %s, %v; want %s, %q", tt.obj, got, err, tt.want, tt.err)
		}
	}
	// Every request with a _meta is read so, some twice: reading
	// allocates nothing.
	obj := json.RawMessage(`{"name":"charge_card","arguments":{"card":"4242"},"_meta":{"progressToken":"p1"}}`)
	if allocs := testing.AllocsPerRun(100, func() { MemberOnce(obj, "_meta") }); allocs != 0 {
		t.Errorf("MemberOnce allocates %v times; want 0", allocs)
	}
}
