package intercept

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// TestJournalFencedOutcome: a proxy paused past its lease (SIGSTOP) with
// a call sent; another settles the execution unknown; then the first
// one's upstream answers. The store refuses that outcome (fencing), and
// the record stays unknown, so the first proxy's journal is the one place
// that says the send got an answer, and which.
func TestJournalFencedOutcome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, release := newHeldHarness()
		hasher := fingerprint.NewRandom()
		j := &memJournal{}
		slow := New(Options{Store: h.store, Hasher: hasher, Owner: "proxy-slow", Journal: j, Lease: 10 * time.Second})
		taker := New(Options{Store: h.store, Hasher: hasher, Owner: "proxy-taker", Lease: 10 * time.Second})

		h.in = slow
		first := h.call(t.Context(), t, chargeCall)
		synctest.Wait()
		time.Sleep(11 * time.Second) // the slow proxy renews nothing: paused
		h.in = taker
		h.call(t.Context(), t, chargeCall).only(t) // settles the orphan unknown
		close(release)                             // the slow proxy's send is answered
		synctest.Wait()
		first.only(t)

		for _, r := range h.store.Records() {
			if r.State != record.Unknown {
				t.Errorf("record %s is %s; the fenced outcome must not overwrite the takeover's unknown", r.ID, r.State)
			}
		}
		for _, e := range j.entries {
			if e.Event == journal.Fenced {
				if e.Writer.Owner != "proxy-slow" || !strings.Contains(e.Note, "(completed)") || e.Result == nil || e.Execution == "" {
					t.Errorf("fenced line %+v; want it by proxy-slow, naming the refused completion, with its result", e)
				}
				return
			}
		}
		t.Fatalf("the slow proxy's journal has no line for the outcome the store refused: %+v", j.entries)
	})
}
