package recordtest

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// NewAttachPair returns two Stores of one backend, as two processes
// that share it have, each closed when the test ends; and stored, which
// reads an execution's attached count as the backend holds it, past
// either Store.
type NewAttachPair func(t *testing.T) (s, other record.Store, stored func(id string) int)

// RunAttachCounts checks a backend that batches its attach counts
// (record.AttachCounts): a replay writes no count, yet the records the
// Store returns show it at once; the other Store sees it once written,
// within a few seconds; and the counts not yet written are written when
// the Store closes (it must be an io.Closer).
func RunAttachCounts(t *testing.T, newPair NewAttachPair) {
	s, other, stored := newPair(t)
	ctx := context.Background()
	first, err := Execute(ctx, s, "attached")
	if err != nil {
		t.Fatal(err)
	}
	replay := func() *record.Record {
		t.Helper()
		r := &record.Record{ID: record.NewID(time.Now()), Key: "attached", Fingerprint: "attached", Tool: "charge_card", Retention: time.Hour}
		got, won, err := s.Reserve(ctx, r, record.ReserveOptions{})
		if err != nil || won {
			t.Fatalf("replay: won=%v %v", won, err)
		}
		return got
	}
	for i := range 5 {
		if got := replay(); got.Attached != i+1 {
			t.Fatalf("replay %d returned the record attached %d; want %d", i+1, got.Attached, i+1)
		}
	}
	if n := stored(first.ID); n != 0 {
		t.Errorf("the backend holds attached %d right after five replays; want 0: a replay writes nothing", n)
	}
	if got, err := s.Get(ctx, first.ID); err != nil || got.Attached != 5 {
		t.Errorf("Get after five replays: %v, %v; want attached 5", got, err)
	}
	seen := func() int {
		t.Helper()
		got, err := other.Get(ctx, first.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.Attached
	}
	for deadline := time.Now().Add(10 * time.Second); seen() != 5; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the other Store sees attached %d after 10s; want the 5 counted, written meanwhile", seen())
		}
	}
	replay()
	if err := s.(io.Closer).Close(); err != nil {
		t.Fatal(err)
	}
	if n := seen(); n != 6 {
		t.Errorf("the other Store sees attached %d after Close; want 6, the last written at Close", n)
	}
}
