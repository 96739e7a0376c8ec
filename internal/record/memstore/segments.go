package memstore

// Packed records are kept back to back in segments, large byte slices,
// and an entry names its record by segment, offset and length. An entry
// then holds no pointer to its record: a collection follows one pointer
// a segment, not one a record. With a pointer a record, each cycle
// looked up and marked every record the store kept: the collector's CPU
// per retained record was about four times what it is now
// (docs/benchmarks.md, "The memory store").
//
// A segment's bytes are only ever appended to, never written over: a
// record decoded from them shares them (unpack), and keeps them alive
// and unchanged after the store has moved the record or let it go.

// segmentSize is the room of a segment: a record larger than that has a
// segment of its own.
const segmentSize = 64 << 10

// A packedRef names a packed record: n bytes at off in segment seg. The
// zero packedRef names none.
type packedRef struct {
	seg, off, n uint32
}

// A segment holds packed records.
type segment struct {
	b    []byte // nil when the segment is not in use
	live int    // the bytes of b that entries still name
	// slots are the slots whose records were written to b, in order,
	// some perhaps more than once: compact checks each entry's ref.
	slots []slot
}

// segments are the store's segments.
type segments struct {
	all  []segment
	cur  uint32   // the segment being appended to, if all is not empty
	free []uint32 // segments not in use, to take again
}

// bytes returns the packed record ref names, or nil.
func (g *segments) bytes(ref packedRef) []byte {
	if ref.n == 0 {
		return nil
	}
	end := ref.off + ref.n
	return g.all[ref.seg].b[ref.off:end:end]
}

// put keeps a copy of p, the packed record of slot i, and returns where.
func (g *segments) put(p []byte, i slot) packedRef {
	if len(g.all) == 0 || len(g.all[g.cur].b)+len(p) > cap(g.all[g.cur].b) {
		g.start(max(segmentSize, len(p)))
	}
	sg := &g.all[g.cur]
	ref := packedRef{seg: g.cur, off: uint32(len(sg.b)), n: uint32(len(p))}
	sg.b = append(sg.b, p...)
	sg.live += len(p)
	sg.slots = append(sg.slots, i)
	return ref
}

// start makes a new segment of room n the current one. The one it
// replaces goes if nothing is left in it.
func (g *segments) start(n int) {
	prev := g.cur
	sg := segment{b: make([]byte, 0, n)}
	if k := len(g.free); k > 0 {
		g.cur = g.free[k-1]
		g.free = g.free[:k-1]
		g.all[g.cur] = sg
	} else {
		g.cur = uint32(len(g.all))
		g.all = append(g.all, sg)
	}
	if int(prev) < len(g.all) && prev != g.cur && g.all[prev].b != nil && g.all[prev].live == 0 {
		g.drop(prev)
	}
}

// drop lets segment k go. Records decoded from it keep its bytes.
func (g *segments) drop(k uint32) {
	g.all[k] = segment{}
	g.free = append(g.free, k)
}

// release lets go of the record ref names, whose entry no longer names
// it, and reports a segment now mostly unused, which the caller should
// compact: other than the current one, less than half its room in use.
func (g *segments) release(ref packedRef) (compact uint32, ok bool) {
	if ref.n == 0 {
		return 0, false
	}
	sg := &g.all[ref.seg]
	sg.live -= int(ref.n)
	switch {
	case ref.seg == g.cur:
		return 0, false
	case sg.live == 0:
		g.drop(ref.seg)
		return 0, false
	case sg.live < cap(sg.b)/2:
		return ref.seg, true
	}
	return 0, false
}

// compact moves the records still in segment k to the current one, and
// lets k go: a segment that a few long-kept records hold would otherwise
// keep all its room. A record moved has been let go from k at least as
// many bytes as are moved, so the copying costs at most what the store
// freed. s.mu must be held.
func (s *Store) compact(k uint32) {
	g := &s.segs
	for _, i := range g.all[k].slots {
		if !s.ents.held(i) {
			continue // purged since, and its chunk given back
		}
		e := s.at(i)
		if e.ref.n == 0 || e.ref.seg != k {
			continue // moved, unpacked or purged since; or written twice
		}
		p := g.bytes(e.ref)
		g.all[k].live -= len(p)
		e.ref = g.put(p, i)
	}
	if k != g.cur {
		g.drop(k)
	}
}
