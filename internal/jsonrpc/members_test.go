package jsonrpc

import (
	"errors"
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
