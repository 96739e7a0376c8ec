package memstore

import (
	"math"
	"time"
)

// expiryHeap orders settled entries by expiry, soonest first. It holds
// each entry's slot and its key, so it holds no pointer and comparing two
// items reads no entry.
type expiryHeap struct {
	items []heapItem
}

// A heapItem is an entry in the expiry heap. expires is the record's
// expiry when it was pushed (expirySecond). A later change only moves the
// expiry later, so the key may lag behind it; purge pushes such an entry
// again rather than dropping it. The heap is thus not reordered on every
// change.
type heapItem struct {
	expires uint32
	slot    slot
}

// expirySecond returns the heap's key for an expiry at ns, in Unix
// nanoseconds: the Unix second at or after it, which makes an item 8
// bytes, not 16, and a record purged at most a second late. An expiry
// past 2106 counts as then.
func expirySecond(ns int64) uint32 {
	const second = int64(time.Second)
	if ns <= 0 {
		return 0
	}
	return uint32(min(ns/second+min(ns%second, 1), math.MaxUint32))
}

// push adds the entry in slot i, which expires at expires.
func (h *expiryHeap) push(s *Store, i slot, expires uint32) {
	h.items = append(h.items, heapItem{expires: expires, slot: i})
	s.at(i).index = int32(len(h.items) - 1)
	h.up(s, len(h.items)-1)
}

// remove takes out the item at position pos.
func (h *expiryHeap) remove(s *Store, pos int) {
	last := len(h.items) - 1
	s.at(h.items[pos].slot).index = -1
	if pos != last {
		h.set(s, pos, h.items[last])
	}
	h.items = h.items[:last]
	if pos != last {
		h.fix(s, pos)
	}
}

// shrink gives back the room of a heap that a purge left less than a
// quarter full, keeping twice what it holds, as index.shrink does for
// the indexes. Items keep their positions.
func (h *expiryHeap) shrink() {
	if c := cap(h.items); c > minShrunk && len(h.items)*4 < c {
		h.items = append(make([]heapItem, 0, 2*len(h.items)), h.items...)
	}
}

// fix restores the order after the key at pos changed.
func (h *expiryHeap) fix(s *Store, pos int) {
	if !h.down(s, pos) {
		h.up(s, pos)
	}
}

// set puts it at pos, and tells its entry.
func (h *expiryHeap) set(s *Store, pos int, it heapItem) {
	h.items[pos] = it
	s.at(it.slot).index = int32(pos)
}

func (h *expiryHeap) up(s *Store, pos int) {
	it := h.items[pos]
	for pos > 0 {
		parent := (pos - 1) / 2
		if h.items[parent].expires <= it.expires {
			break
		}
		h.set(s, pos, h.items[parent])
		pos = parent
	}
	h.set(s, pos, it)
}

// down moves the item at pos down to its place and reports whether it
// moved.
func (h *expiryHeap) down(s *Store, pos int) bool {
	it, start, n := h.items[pos], pos, len(h.items)
	for {
		child := 2*pos + 1
		if child >= n {
			break
		}
		if r := child + 1; r < n && h.items[r].expires < h.items[child].expires {
			child = r
		}
		if it.expires <= h.items[child].expires {
			break
		}
		h.set(s, pos, h.items[child])
		pos = child
	}
	h.set(s, pos, it)
	return pos > start
}
