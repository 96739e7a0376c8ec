package recordtest

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// NewAttachPair returns two Stores of one backend, as two processes
// that share it have, each closed when the test ends; and stored, which
// reads an execution's attached count as the backend holds it, past
// either Store.
type NewAttachPair func(t *testing.T) (s, other record.Store, stored func(id string) int)

// Flusher is a Store that writes the attaches it counted when told to,
// as it does every so often (record.AttachCounts.Flush).
type Flusher interface {
	FlushAttaches(ctx context.Context) error
}

// RunAttachCounts checks a backend that batches its attach counts
// (record.AttachCounts): a replay writes no count, yet the records the
// Store returns show it at once; the other Store sees it once written,
// within a few seconds; a record read while the counts are written shows
// each attach once; and the counts not yet written are written when the
// Store closes (it must be an io.Closer and a Flusher).
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
	attached := 5
	for round := range 200 {
		for range 3 {
			attached++
			if got := replay(); got.Attached != attached {
				t.Fatalf("round %d: a replay returned the record attached %d; want %d", round, got.Attached, attached)
			}
		}
		if !readWhileWritten(t, s, first.ID, attached) {
			t.Fatalf("round %d: a record read while the counts were written showed an attach twice or not at all", round)
		}
	}
	replay()
	if err := s.(io.Closer).Close(); err != nil {
		t.Fatal(err)
	}
	if n := seen(); n != attached+1 {
		t.Errorf("the other Store sees attached %d after Close; want %d, the last written at Close", n, attached+1)
	}
}

// readWhileWritten reads the record id ten times while s writes its
// counts, and reports whether each read showed attached callers.
func readWhileWritten(t *testing.T, s record.Store, id string, attached int) bool {
	t.Helper()
	flusher, ok := s.(Flusher)
	if !ok {
		t.Fatalf("%T is not a recordtest.Flusher", s)
	}
	ctx := context.Background()
	var seen []int
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := flusher.FlushAttaches(ctx); err != nil {
			t.Error(err)
		}
	})
	wg.Go(func() {
		for range 10 {
			got, err := s.Get(ctx, id)
			if err != nil {
				t.Error(err)
				return
			}
			seen = append(seen, got.Attached)
		}
	})
	wg.Wait()
	for _, n := range seen {
		if n != attached {
			t.Logf("read attached %v; want %d each time", seen, attached)
			return false
		}
	}
	return true
}
