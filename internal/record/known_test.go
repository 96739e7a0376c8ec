package record

import (
	"bytes"
	"testing"
)

// A store keeps a record a change may still move, and not one too large.
func TestWorthKnowing(t *testing.T) {
	for _, tc := range []struct {
		state  State
		result int
		want   bool
	}{
		{Dispatched, 0, true},
		{Completed, 200, true},
		{Unknown, 0, true}, // may be dispatched again
		{Delivered, 200, false},
		{Failed, 0, false},
		{Refused, 0, false},
		{Completed, maxKnownBytes, true},
		{Completed, maxKnownBytes + 1, false},
	} {
		r := &Record{State: tc.state, Result: bytes.Repeat([]byte("x"), tc.result)}
		if got := WorthKnowing(r); got != tc.want {
			t.Errorf("%s with a result of %d bytes: WorthKnowing = %v, want %v", tc.state, tc.result, got, tc.want)
		}
	}
}
