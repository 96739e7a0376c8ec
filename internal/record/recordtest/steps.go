package recordtest

import (
	"reflect"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// Steps returns a step for the record id: it moves clock on by a second
// and a half and a nanosecond, so that every transition has a time of its
// own that no store rounds away; applies c through s; checks that what
// Update returned is what other reads back; and returns that.
func Steps(t *testing.T, clock *Clock, s, other record.Store, id string) func(what string, c record.Change) *record.Record {
	return func(what string, c record.Change) *record.Record {
		t.Helper()
		clock.Advance(1500*time.Millisecond + 1)
		got, err := s.Update(t.Context(), id, c)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		want, err := other.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: Update returned\n%+v\nstored\n%+v", what, got, want)
		}
		return want
	}
}
