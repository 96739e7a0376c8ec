package memstore

// entries holds the store's entries, a chunk of chunkLen at a time, and
// the slots free to use again. A chunk whose every entry is free is given
// back (giveBack): after a burst of records has expired, the entries
// that held them would otherwise stay for the life of the process, 24
// bytes a record.
type entries struct {
	chunks []*[chunkLen]entry // by slot/chunkLen; nil where given back
	free   []slot             // slots of purged entries, to use again
	spare  []int              // chunks given back, nil in chunks, to make again first
	freed  int                // slots released, ever
	looked int                // freed when giveBack last looked for empty chunks
	quiet  int                // freed when a renewal's purge last ended (renewed)
}

// at returns the entry in slot i.
func (es *entries) at(i slot) *entry { return &es.chunks[i/chunkLen][i%chunkLen] }

// held reports whether slot i is in a chunk the store holds: a slot a
// segment still lists may be in one given back since.
func (es *entries) held(i slot) bool {
	k := int(i / chunkLen)
	return k < len(es.chunks) && es.chunks[k] != nil
}

// alloc returns an unused slot and its entry, cleared: a free one, else
// the first of a chunk made anew.
func (es *entries) alloc() (slot, *entry) {
	if n := len(es.free); n > 0 {
		i := es.free[n-1]
		es.free = es.free[:n-1]
		return i, es.at(i)
	}
	k := len(es.chunks)
	if n := len(es.spare); n > 0 {
		k = es.spare[n-1]
		es.spare = es.spare[:n-1]
		es.chunks[k] = new([chunkLen]entry)
	} else {
		es.chunks = append(es.chunks, new([chunkLen]entry))
	}
	// Pushed from the last, so that the chunk's slots are used in order.
	for i := chunkLen - 1; i > 0; i-- {
		es.free = append(es.free, slot(k*chunkLen+i))
	}
	return slot(k * chunkLen), es.at(slot(k * chunkLen))
}

// release frees slot i, whose entry is cleared and named by nothing.
func (es *entries) release(i slot) {
	es.free = append(es.free, i)
	es.freed++
}

// idle gives back the empty chunks if no slot was freed since a
// renewal's purge last ended: giveBack, as a purge calls it, leaves the
// chunks emptied after its last look.
func (es *entries) idle() {
	if es.freed == es.quiet {
		es.giveBack(true)
	}
}

// renewed notes that a renewal's purge ended, for idle.
func (es *entries) renewed() { es.quiet = es.freed }

// giveBack drops the chunks whose every entry is free, once at least
// half the slots are free and slots were freed since it last looked: a
// quarter of the room's worth, unless idle. Each look costs a pass over
// the free slots, which a store purged a batch at a time would otherwise
// pay for each batch.
func (es *entries) giveBack(idle bool) {
	room := (len(es.chunks) - len(es.spare)) * chunkLen
	switch since := es.freed - es.looked; {
	case 2*len(es.free) < room, since == 0:
		return
	case !idle && since < room/4:
		return
	}
	freeIn := make([]int32, len(es.chunks))
	for _, i := range es.free {
		freeIn[i/chunkLen]++
	}
	empty := func(i slot) bool { return freeIn[i/chunkLen] == chunkLen }
	kept := es.free[:0]
	for _, i := range es.free {
		if !empty(i) {
			kept = append(kept, i)
		}
	}
	for k, n := range freeIn {
		if n == chunkLen {
			es.chunks[k] = nil
			es.spare = append(es.spare, k)
		}
	}
	// Chunks given back at the end go for good: a chunk made anew is
	// made at the end of those kept.
	for n := len(es.chunks); n > 0 && es.chunks[n-1] == nil; n-- {
		es.chunks = es.chunks[:n-1]
	}
	spare := es.spare[:0]
	for _, k := range es.spare {
		if k < len(es.chunks) {
			spare = append(spare, k)
		}
	}
	es.spare = spare
	if cap(kept) > 2*len(kept)+chunkLen {
		kept = append([]slot(nil), kept...) // the room of the slots given back too
	}
	es.free = kept
	es.looked = es.freed
}
