package memstore

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
)

// segmentsRig is a store whose records are each delivered with a result
// of their own, and a model of what every one must read back as.
type segmentsRig struct {
	t      *testing.T
	clock  *recordtest.Clock
	s      *Store
	want   map[string][]byte // the result of each record not yet expired
	expiry map[string]time.Time
	n      int
}

func newSegmentsRig(t *testing.T) *segmentsRig {
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	return &segmentsRig{t: t, clock: clock, s: New(Options{Now: clock.Now}), want: map[string][]byte{}, expiry: map[string]time.Time{}}
}

// deliver runs a record through to delivered, kept for retention, with a
// result of size bytes, and returns its id.
func (g *segmentsRig) deliver(retention time.Duration, size int) string {
	g.t.Helper()
	g.n++
	ctx := g.t.Context()
	r := &record.Record{ID: record.NewID(g.clock.Now()), Key: fmt.Sprint("k", g.n), Owner: "me",
		LeaseUntil: g.clock.Now().Add(time.Minute), Retention: retention}
	if _, won, err := g.s.Reserve(ctx, r, record.ReserveOptions{Dispatch: true}); err != nil || !won {
		g.t.Fatalf("Reserve: won %v, %v", won, err)
	}
	result := fmt.Appendf(nil, `{"n":%d,"pad":"%s"}`, g.n, bytes.Repeat([]byte{'x'}, size))
	if _, err := g.s.Update(ctx, r.ID, record.Change{To: record.Completed, Result: result}); err != nil {
		g.t.Fatal(err)
	}
	if _, err := g.s.Update(ctx, r.ID, record.Change{To: record.Delivered}); err != nil {
		g.t.Fatal(err)
	}
	g.want[r.ID] = result
	g.expiry[r.ID] = g.clock.Now().Add(retention)
	return r.ID
}

// check reads every record the model holds back, and checks what the
// segments account for: each in-use segment's live bytes are those its
// entries name, and no more than twice the records' bytes are held, with
// one segment of slack.
func (g *segmentsRig) check() {
	g.t.Helper()
	g.s.PurgeExpired()
	for id, at := range g.expiry {
		if !g.clock.Now().Before(at) {
			delete(g.want, id)
			delete(g.expiry, id)
		}
	}
	for id, result := range g.want {
		r, err := g.s.Get(g.t.Context(), id)
		if err != nil || !bytes.Equal(r.Result, result) || r.ID != id {
			g.t.Fatalf("record %s read back as %v, %v; want result %.40s", id, r, err, result)
		}
	}
	s := g.s
	s.mu.Lock()
	defer s.mu.Unlock()
	live := make([]int, len(s.segs.all))
	named := 0
	for i := range s.byID.all() {
		if e := s.at(i); e.ref.n != 0 {
			if sg := s.segs.all[e.ref.seg]; sg.b == nil || int(e.ref.off+e.ref.n) > len(sg.b) {
				g.t.Fatalf("slot %d names %+v, outside its segment (%d bytes)", i, e.ref, len(sg.b))
			}
			live[e.ref.seg] += int(e.ref.n)
			named += int(e.ref.n)
		}
	}
	held := 0
	for k, sg := range s.segs.all {
		if sg.live != live[k] {
			g.t.Fatalf("segment %d counts %d live bytes; its entries name %d", k, sg.live, live[k])
		}
		if sg.b != nil && uint32(k) != s.segs.cur && sg.live == 0 {
			g.t.Fatalf("segment %d is kept with nothing in it", k)
		}
		held += cap(sg.b)
	}
	if held > 2*named+2*segmentSize {
		g.t.Fatalf("segments hold %d bytes for %d bytes of records", held, named)
	}
}

// TestSegmentsKeepLongRecordsCompactly: records kept a day among many kept
// an hour. When the hour's go, the day's must all read back, and their
// segments must not stay held for them.
func TestSegmentsKeepLongRecordsCompactly(t *testing.T) {
	g := newSegmentsRig(t)
	var long []string
	for i := range 3000 {
		if i%50 == 0 {
			long = append(long, g.deliver(24*time.Hour, 100))
			continue
		}
		g.deliver(time.Hour, 200)
	}
	g.check()
	g.clock.Advance(2 * time.Hour)
	g.check()
	if len(g.want) != len(long) {
		t.Fatalf("%d records left; want the %d kept a day", len(g.want), len(long))
	}
	g.s.mu.Lock()
	inUse := 0
	for _, sg := range g.s.segs.all {
		if sg.b != nil {
			inUse++
		}
	}
	g.s.mu.Unlock()
	if inUse > 2 {
		t.Errorf("%d segments in use for %d records of about 300 bytes; want them moved together", inUse, len(long))
	}
	g.clock.Advance(24 * time.Hour)
	g.check()
	if g.s.Len() != 0 {
		t.Errorf("the store holds %d records after every retention ended", g.s.Len())
	}
}

// TestSegmentsRandom runs records of random sizes and retentions, some
// larger than a segment, through the store, with the clock moving, and
// checks them against the model as it goes.
func TestSegmentsRandom(t *testing.T) {
	g := newSegmentsRig(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 40 {
		for range 200 {
			size := rng.IntN(600)
			if rng.IntN(100) == 0 {
				size = segmentSize + rng.IntN(segmentSize)
			}
			g.deliver(time.Duration(1+rng.IntN(120))*time.Minute, size)
		}
		g.clock.Advance(time.Duration(rng.IntN(20)) * time.Minute)
		if round%5 == 0 {
			g.check()
		}
	}
	g.check()
	g.clock.Advance(3 * time.Hour)
	g.check()
}

// TestSegmentEmptiedWhileCurrentGoes: every record of the segment being
// written expires before it fills; when the next one starts, the empty
// one must go, not stay held for nothing.
func TestSegmentEmptiedWhileCurrentGoes(t *testing.T) {
	g := newSegmentsRig(t)
	for range 6 {
		g.deliver(time.Minute, segmentSize/7)
	}
	g.clock.Advance(2 * time.Minute)
	g.check()
	g.deliver(time.Hour, segmentSize/4) // does not fit: a new segment
	g.check()
}
