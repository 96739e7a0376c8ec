package memstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
)

// settle reserves and fails, so that it settles at once, a record of key
// k kept for retention; it returns the record's id.
func settle(t *testing.T, s *Store, clock *recordtest.Clock, k string, retention time.Duration) string {
	t.Helper()
	r := &record.Record{ID: record.NewID(clock.Now()), Key: k, Retention: retention}
	if _, _, err := s.Reserve(t.Context(), r, record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(t.Context(), r.ID, record.Change{To: record.Failed}); err != nil {
		t.Fatal(err)
	}
	return r.ID
}

// checkKept fails t unless every id of ids is still held, under key
// prefix+i.
func checkKept(t *testing.T, s *Store, prefix string, ids map[int]string) {
	t.Helper()
	for i, id := range ids {
		if r, err := s.Get(t.Context(), id); err != nil || r.Key != fmt.Sprint(prefix, i) {
			t.Fatalf("Get(%s) = %v, %v; want the record of %s%d", id, r, err, prefix, i)
		}
	}
}

// renewTwice purges s as two renewals of an idle proxy do: the first
// drops what expired, the second, finding nothing freed since, gives back
// the chunks the first emptied.
func renewTwice(s *Store) {
	s.PurgeExpired()
	s.PurgeExpired()
}

// TestPurgeGivesBackTheChunks fills six chunks of entries, keeps the
// records of the first hundred slots and lets the rest expire: the purge
// gives back the five chunks it empties, and the slots of the first are
// the ones used next.
func TestPurgeGivesBackTheChunks(t *testing.T) {
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	s := New(Options{Now: clock.Now})
	const n, kept = 5*chunkLen + 100, 100
	ids := map[int]string{}
	for i := range n {
		retention := time.Minute
		if i < kept {
			retention = time.Hour
		}
		id := settle(t, s, clock, fmt.Sprint("k", i), retention)
		if i < kept {
			ids[i] = id
		}
	}
	if len(s.ents.chunks) != 6 {
		t.Fatalf("%d chunks for %d records; want 6", len(s.ents.chunks), n)
	}
	clock.Advance(2 * time.Minute)
	renewTwice(s)
	if len(s.ents.chunks) != 1 || len(s.ents.free) != chunkLen-kept || cap(s.ents.free) > 2*chunkLen {
		t.Errorf("after the purge: %d chunks, %d slots free in room for %d; want 1, %d and no more than %d",
			len(s.ents.chunks), len(s.ents.free), cap(s.ents.free), chunkLen-kept, 2*chunkLen)
	}
	checkKept(t, s, "k", ids)

	// The store fills again: the first chunk's free slots, then a new one.
	again := map[int]string{}
	for i := range 2*chunkLen - kept {
		again[i] = settle(t, s, clock, fmt.Sprint("again", i), time.Hour)
	}
	if len(s.ents.chunks) != 2 {
		t.Errorf("%d chunks for %d records; want 2", len(s.ents.chunks), 2*chunkLen)
	}
	checkKept(t, s, "k", ids)
	checkKept(t, s, "again", again)
}

// TestPurgeGivesBackAChunkBetween empties the middle one of three chunks:
// it is given back, and made anew once the other two are full again.
func TestPurgeGivesBackAChunkBetween(t *testing.T) {
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	s := New(Options{Now: clock.Now})
	ids := map[int]string{}
	for i := range 3 * chunkLen {
		retention := time.Minute
		if i/chunkLen != 1 && i%chunkLen < 10 {
			retention = time.Hour // ten in each of the first and the last
		}
		id := settle(t, s, clock, fmt.Sprint("k", i), retention)
		if retention == time.Hour {
			ids[i] = id
		}
	}
	clock.Advance(2 * time.Minute)
	renewTwice(s)
	if len(s.ents.chunks) != 3 || s.ents.chunks[1] != nil || len(s.ents.spare) != 1 {
		t.Fatalf("after the purge: %d chunks, the middle one %p, %d spare; want 3, nil and 1",
			len(s.ents.chunks), s.ents.chunks[1], len(s.ents.spare))
	}
	again := map[int]string{}
	for i := range 2*chunkLen - 20 + 1 { // the free slots of the two, and one more
		again[i] = settle(t, s, clock, fmt.Sprint("again", i), time.Hour)
	}
	if len(s.ents.chunks) != 3 || s.ents.chunks[1] == nil || len(s.ents.spare) != 0 {
		t.Errorf("full again: %d chunks, the middle one %p, %d spare; want 3, made anew and 0",
			len(s.ents.chunks), s.ents.chunks[1], len(s.ents.spare))
	}
	checkKept(t, s, "k", ids)
	checkKept(t, s, "again", again)
}

// TestGivenBackChunksAndCompaction packs the records of two chunks
// side by side, a small one of the first beside a large one of the
// second, and lets the first chunk's expire: their segments stay more
// than half used, and the chunk is given back. When the second's expire,
// the segments are compacted, past the slots of the chunk given back.
func TestGivenBackChunksAndCompaction(t *testing.T) {
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	s := New(Options{Now: clock.Now})
	ctx := t.Context()
	reserve := func(k string, retention time.Duration) string {
		r := &record.Record{ID: record.NewID(clock.Now()), Key: k, Retention: retention}
		if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{Dispatch: true}); err != nil {
			t.Fatal(err)
		}
		return r.ID
	}
	update := func(id string, c record.Change) {
		if _, err := s.Update(ctx, id, c); err != nil {
			t.Fatal(err)
		}
	}
	var small, large [chunkLen]string
	for i := range chunkLen {
		small[i] = reserve(fmt.Sprint("small", i), time.Minute)
	}
	for i := range chunkLen {
		large[i] = reserve(fmt.Sprint("large", i), 2*time.Minute)
	}
	kept := map[int]string{}
	for i := range 10 {
		kept[i] = reserve(fmt.Sprint("kept", i), time.Hour)
		update(kept[i], record.Change{To: record.Failed})
	}
	result := []byte(fmt.Sprintf(`{"content":[{"type":"text","text":"%0400d"}]}`, 0))
	for i := range chunkLen {
		update(small[i], record.Change{To: record.Failed})
		update(large[i], record.Change{To: record.Completed, Result: result})
		update(large[i], record.Change{To: record.Delivered, From: record.Completed})
	}
	clock.Advance(90 * time.Second)
	renewTwice(s)
	if s.ents.chunks[0] != nil {
		t.Fatal("the first chunk, every entry of it free, was not given back")
	}
	clock.Advance(time.Minute)
	s.PurgeExpired()
	if s.Len() != len(kept) {
		t.Fatalf("%d records left; want %d", s.Len(), len(kept))
	}
	checkKept(t, s, "kept", kept)
}

// TestIdlePurgeGivesBackTheLastChunk lets the last hundred records of
// four chunks expire after the rest: too few to make a purge a batch at a
// time look for empty chunks again, but the store, idle a renewal later,
// gives back the chunk they held.
func TestIdlePurgeGivesBackTheLastChunk(t *testing.T) {
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	s := New(Options{Now: clock.Now})
	const n, last = 4 * chunkLen, 100
	for i := range n {
		retention := time.Minute
		if i >= n-last {
			retention = 2 * time.Minute
		}
		settle(t, s, clock, fmt.Sprint("k", i), retention)
	}
	clock.Advance(90 * time.Second)
	renewTwice(s)
	if len(s.ents.chunks) != 4 || s.ents.chunks[3] == nil || len(s.ents.spare) != 3 {
		t.Fatalf("the last hundred records kept: %d chunks, %d spare; want the last of 4 kept, 3 spare",
			len(s.ents.chunks), len(s.ents.spare))
	}
	clock.Advance(time.Minute)
	s.PurgeExpired()
	if s.Len() != 0 || len(s.ents.chunks) != 4 || s.ents.chunks[3] == nil {
		t.Fatalf("a renewal purged all: %d records, %d chunks; want none, and the last chunk kept until a renewal finds nothing freed",
			s.Len(), len(s.ents.chunks))
	}
	s.PurgeExpired()
	if len(s.ents.chunks) != 0 || len(s.ents.free) != 0 || len(s.ents.spare) != 0 {
		t.Errorf("a renewal later: %d chunks, %d slots free, %d spare; want none",
			len(s.ents.chunks), len(s.ents.free), len(s.ents.spare))
	}
}

// TestBusyPurgeGivesBackChunks purges eight chunks' expired records as
// reservations do, a small batch at a time, with no renewal: chunks are
// given back as they empty, and the store looks for them only a few
// times, never before half its slots are free.
func TestBusyPurgeGivesBackChunks(t *testing.T) {
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	s := New(Options{Now: clock.Now})
	const n = 8 * chunkLen
	for i := range n {
		settle(t, s, clock, fmt.Sprint("k", i), time.Minute)
	}
	clock.Advance(2 * time.Minute)
	looks, purges, first := 0, 0, -1
	for more := true; more; purges++ {
		s.mu.Lock()
		looked := s.ents.looked
		more = s.purge(clock.Now(), purgeBatch)
		if s.ents.looked != looked {
			looks++
			if first < 0 {
				first = s.ents.looked // the slots freed by then
			}
		}
		s.mu.Unlock()
	}
	if s.Len() != 0 {
		t.Fatalf("%d records left", s.Len())
	}
	if kept := len(s.ents.chunks) - len(s.ents.spare); kept > n/chunkLen/2 {
		t.Errorf("%d chunks of %d kept after every record expired; want no more than half", kept, n/chunkLen)
	}
	if looks == 0 || looks > 8 || first < n/2 {
		t.Errorf("in %d purges the store looked for empty chunks %d times, first with %d slots freed; want 1 to 8, from %d",
			purges, looks, first, n/2)
	}
}

// TestBusyRenewalsDoNotLook renews the leases of a store whose calls
// free slots between renewals: a renewal then looks for no empty chunk,
// a pass over every free slot, but leaves it to the purges as they go.
func TestBusyRenewalsDoNotLook(t *testing.T) {
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	s := New(Options{Now: clock.Now})
	const n = 4 * chunkLen
	for i := range n {
		// Every other record first: half the slots free, no chunk
		// empty; then a reservation's batch a second.
		retention := time.Minute
		if i%2 == 1 {
			retention += time.Duration(1+i/2/purgeBatch) * time.Second
		}
		settle(t, s, clock, fmt.Sprint("k", i), retention)
	}
	clock.Advance(time.Minute + time.Second/2)
	renewTwice(s)
	looked := s.ents.looked
	if looked == 0 {
		t.Fatal("an idle renewal with half the slots free did not look for empty chunks")
	}
	for i := range 50 {
		clock.Advance(time.Second)
		settle(t, s, clock, fmt.Sprint("new", i), time.Hour) // its reservation purges a batch
		s.PurgeExpired()
		if s.ents.looked != looked {
			t.Fatalf("renewal %d, after a call freed slots, looked for empty chunks", i+1)
		}
	}
}
