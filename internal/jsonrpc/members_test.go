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
