package proxy

import (
	"context"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/sqlitestore"
)

// TestShadowCancelled: a call the client cancels goes on in normal mode,
// and its outcome is recorded for a retry; in shadow mode the
// cancellation goes upstream, and the record waits for the upstream's
// answer to the cancelled call. A result completes it; until an answer
// comes, a retry attaches; an error, or no answer before the upstream
// exits, leaves it unknown, since the upstream answered the cancellation
// and the outcome normal mode would have waited for was not observed.
// With a store in memory and with SQLite, whose reservations wait on I/O.
func TestShadowCancelled(t *testing.T) {
	for _, tt := range []struct {
		name string
		card string
		// retryFirst sends the call again before the upstream answers
		// the cancelled one, and once more after.
		retryFirst bool
		want       map[string]int // the shadow decisions
		state      record.State   // the cancelled call's record, at the end
		note       string         // in its last transition's note
	}{
		{"answered", "C", false, map[string]int{"new": 2, "replayed": 1}, record.Delivered, ""},
		{"answered after a retry", "C", true, map[string]int{"new": 2, "attached": 1, "replayed": 1}, record.Delivered, ""},
		{"refused", "E", true, map[string]int{"new": 2, "attached": 1, "unknown": 1}, record.Unknown,
			"the client cancelled the call, and the upstream answered it with error -32800"},
		{"never answered", "N", true, map[string]int{"new": 2, "attached": 1}, record.Unknown,
			"the client cancelled the call, and the upstream exited before answering"},
	} {
		for _, st := range []struct {
			name string
			open func(*testing.T) record.Store
		}{
			{"memory", func(*testing.T) record.Store { return memstore.New(memstore.Options{}) }},
			{"sqlite", openSQLite},
		} {
			t.Run(tt.name+"/"+st.name, func(t *testing.T) {
				store := st.open(t)
				d, _, lines := runShadowScriptOn(t, store, true, func(s *shadowRig) {
					s.charge(2, tt.card, "")
					<-s.gotC
					s.decided(1) // reserved: a call cancelled first would not have run
					s.cancel(2)
					s.charge(3, "A", "") // taken after the cancellation
					s.answers(1)
					if got := s.settled(); got != record.Completed {
						t.Fatalf("an execution settled %s before the upstream answered the cancelled call; want A's, completed", got)
					}
					if tt.retryFirst {
						s.charge(4, tt.card, "") // the upstream holds it too
						<-s.gotC
						s.decided(3)
					}
					close(s.releaseC)
					if tt.retryFirst {
						s.answers(1) // the retry's
					}
					if tt.card == "N" {
						return // the upstream exits with the session
					}
					s.settled()  // the cancelled call's
					s.answers(1) // its answer, passed on for the client to ignore
					s.charge(5, tt.card, "")
					s.answers(1)
				})
				if !maps.Equal(d.shown, tt.want) {
					t.Errorf("shadow decisions %v; want %v", d.shown, tt.want)
				}
				// Call 2's is the first execution journaled.
				rec, err := store.Get(context.Background(), lines[0].Execution)
				if err != nil {
					t.Fatal(err)
				}
				last := rec.History[len(rec.History)-1]
				if rec.State != tt.state || !strings.Contains(last.Note, tt.note) {
					t.Errorf("the cancelled call's record is %s (%q); want %s (%q)", rec.State, last.Note, tt.state, tt.note)
				}
			})
		}
	}
}

// openSQLite opens a SQLite store in a directory of t's, closed when t
// ends.
func openSQLite(t *testing.T) record.Store {
	t.Helper()
	store, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "records.db"), sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}

// TestShadowCancelledIDUsedAgain: once the client sends another request
// under a cancelled call's id, an answer under it may be either's, so the
// cancelled call's outcome is not observed: unknown, and said why.
func TestShadowCancelledIDUsedAgain(t *testing.T) {
	store := memstore.New(memstore.Options{})
	var state record.State
	_, _, lines := runShadowScriptOn(t, store, true, func(s *shadowRig) {
		s.charge(2, "N", "")
		<-s.gotC
		s.cancel(2)
		s.call(2, "ping", `{}`)
		state = s.settled()
	})
	rec, err := store.Get(context.Background(), lines[0].Execution)
	if err != nil {
		t.Fatal(err)
	}
	last := rec.History[len(rec.History)-1]
	if want := "the client used its id again"; state != record.Unknown || !strings.Contains(last.Note, want) {
		t.Errorf("the cancelled call settled %s (%q); want unknown (%q)", state, last.Note, want)
	}
}
