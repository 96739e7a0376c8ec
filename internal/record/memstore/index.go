package memstore

import (
	"hash/maphash"
	"iter"
)

// An index finds an entry's slot by one of its record's strings, the id
// or the key, in an open-addressed table with linear probing. A bucket
// holds the upper half of the string's hash and the slot, and nothing
// else: no pointer for a collection to follow, and no string, as the
// strings are the records'. A Go map from string to slot held both
// strings, about 38 bytes a record with its load, and was walked on every
// collection; this takes 11 to 21 bytes a record.
type index struct {
	seed    maphash.Seed
	buckets []uint64 // tag<<32 | slot+1, where tag is the hash's upper half; 0 is empty
	n       int
	keyOf   func(slot) string // the string the index finds the slot's entry by
}

func newIndex(keyOf func(slot) string) index {
	return index{seed: maphash.MakeSeed(), keyOf: keyOf}
}

// A bucket's tag also places it: a string's home bucket is its tag modulo
// the table's size, so growing the table needs no string.
func bucketOf(tag uint64, i slot) uint64 { return tag<<32 | (uint64(i) + 1) }
func tagOf(b uint64) uint64              { return b >> 32 }
func slotOf(b uint64) slot               { return slot(uint32(b) - 1) }

// find returns the position of key's bucket, or of the empty bucket
// where it would go, and whether key is there.
func (x *index) find(key string) (pos int, tag uint64, found bool) {
	tag = maphash.String(x.seed, key) >> 32
	mask := uint64(len(x.buckets) - 1)
	for p := tag & mask; ; p = (p + 1) & mask {
		b := x.buckets[p]
		if b == 0 {
			return int(p), tag, false
		}
		if tagOf(b) == tag && x.keyOf(slotOf(b)) == key {
			return int(p), tag, true
		}
	}
}

// get returns the slot key is at.
func (x *index) get(key string) (slot, bool) {
	if x.n == 0 {
		return 0, false
	}
	p, _, found := x.find(key)
	if !found {
		return 0, false
	}
	return slotOf(x.buckets[p]), true
}

// set points key at slot i, whose record must have key as its string.
func (x *index) set(key string, i slot) {
	if (x.n+1)*4 > len(x.buckets)*3 {
		x.grow()
	}
	p, tag, found := x.find(key)
	if !found {
		x.n++
	}
	x.buckets[p] = bucketOf(tag, i)
}

// remove drops key if it points at slot i.
func (x *index) remove(key string, i slot) {
	if x.n == 0 {
		return
	}
	p, _, found := x.find(key)
	if !found || slotOf(x.buckets[p]) != i {
		return
	}
	// Shift back the buckets after it that its own made probe past it,
	// so that no probe stops early at the hole.
	mask := len(x.buckets) - 1
	hole := p
	for q := (p + 1) & mask; x.buckets[q] != 0; q = (q + 1) & mask {
		home := int(tagOf(x.buckets[q])) & mask
		if (q-home)&mask >= (q-hole)&mask {
			x.buckets[hole] = x.buckets[q]
			hole = q
		}
	}
	x.buckets[hole] = 0
	x.n--
}

// grow doubles the table, at most three quarters full.
func (x *index) grow() {
	old := x.buckets
	x.buckets = make([]uint64, max(16, 2*len(old)))
	mask := uint64(len(x.buckets) - 1)
	for _, b := range old {
		if b == 0 {
			continue
		}
		p := tagOf(b) & mask
		for x.buckets[p] != 0 {
			p = (p + 1) & mask
		}
		x.buckets[p] = b
	}
}

// all yields every slot in the index.
func (x *index) all() iter.Seq[slot] {
	return func(yield func(slot) bool) {
		for _, b := range x.buckets {
			if b != 0 && !yield(slotOf(b)) {
				return
			}
		}
	}
}
