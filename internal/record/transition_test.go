package record

import (
	"slices"
	"testing"
)

// TestCanTransition checks every pair of states against the moves
// DESIGN.md allows, so that how CanTransition is written cannot change
// which they are.
func TestCanTransition(t *testing.T) {
	allowed := map[State][]State{
		Accepted:   {Authorized, Refused, Dispatched, Failed},
		Authorized: {Dispatched, Failed},
		Dispatched: {Completed, Failed, Unknown, Dispatched},
		Completed:  {Delivered},
		Unknown:    {Dispatched, Completed, Failed},
	}
	for _, from := range append(States, "bogus") {
		for _, to := range append(States, "bogus") {
			if got, want := CanTransition(from, to), slices.Contains(allowed[from], to); got != want {
				t.Errorf("CanTransition(%s, %s) = %v, want %v", from, to, got, want)
			}
		}
	}
}
