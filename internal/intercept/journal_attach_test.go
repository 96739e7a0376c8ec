package intercept

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// callerLines returns the attach of each of j's lines that has one, as
// "execution how/got taken", the execution's own line kind first.
func callerLines(j *memJournal) []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	var got []string
	for _, e := range j.entries {
		if a := e.Attach; a != nil {
			taken := "taken"
			if !a.Taken {
				taken = "not taken: " + a.Error
			}
			got = append(got, e.Execution+" "+e.Event+e.State+" "+a.How+"/"+a.Got+" "+taken)
		}
	}
	return got
}

// TestJournalRecordsAKeyRefused: a call whose client key was used for
// another action is refused, and its line names the execution whose key
// it reused.
func TestJournalRecordsAKeyRefused(t *testing.T) {
	j := &memJournal{}
	h := newHarness(charged).withJournal(j, nil)
	const keyed = `{"name":"charge_card","arguments":{"card":"4242","amount":100},"_meta":{"mcp-idempotent/key":"K1"}}`
	h.call(t.Context(), t, keyed).only(t)
	h.settle(t)
	rec := h.onlyRecord(t)
	a := h.call(t.Context(), t, strings.Replace(keyed, `"amount":100`, `"amount":999`, 1)).only(t)
	if a.Error == nil || !strings.Contains(string(a.Error), "already used for a different call") {
		t.Fatalf("the reused key got %s %s; want it refused", a.Result, a.Error)
	}
	got := callerLines(j)
	want := rec.ID + " " + journal.Attached + " " + journal.JoinedKey + "/" + journal.GotKeyRefused + " taken"
	if len(got) != 1 || got[0] != want {
		t.Errorf("callers' lines %q; want [%q]", got, want)
	}
}

// losingStore is a store that loses every execution waited for, as one
// whose record was purged or deleted meanwhile does.
type losingStore struct{ record.Store }

func (losingStore) Wait(context.Context, string) (*record.Record, error) {
	return nil, record.ErrNotFound
}

// TestJournalRecordsALostAttach: a caller waiting for an execution whose
// record the store lost is told so, and its line says it got no outcome.
func TestJournalRecordsALostAttach(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, release := newHeldHarness()
		j := &memJournal{}
		h.in = New(Options{Store: losingStore{h.store}, Hasher: fingerprint.NewRandom(), Journal: j})
		first := h.call(t.Context(), t, chargeCall) // the upstream holds it
		synctest.Wait()
		a := h.call(t.Context(), t, chargeCall).only(t)
		if a.Error == nil || !strings.Contains(string(a.Error), "lost track of execution") {
			t.Fatalf("the waiting caller got %s %s; want lost track", a.Result, a.Error)
		}
		close(release)
		first.only(t)
		h.settle(t)
		rec := h.onlyRecord(t)
		got := callerLines(j)
		want := rec.ID + " " + journal.Attached + " " + journal.JoinedWaited + "/" + journal.GotNoOutcome + " taken"
		if len(got) != 1 || got[0] != want {
			t.Errorf("callers' lines %q; want [%q]", got, want)
		}
	})
}
