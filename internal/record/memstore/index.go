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
	// matches reports whether key is the string of the record in a slot.
	matches func(i slot, key string) bool
}

func newIndex(matches func(slot, string) bool) index {
	return index{seed: maphash.MakeSeed(), matches: matches}
}

// A bucket's tag also places it: a string's home bucket is its tag modulo
// the table's size, so growing the table needs no string.
func bucketOf(tag uint64, i slot) uint64 { return tag<<32 | (uint64(i) + 1) }
func tagOf(b uint64) uint64              { return b >> 32 }
func slotOf(b uint64) slot               { return slot(uint32(b) - 1) }

// A place is where find left a string: its bucket, or the empty one
// where it would go.
type place struct {
	pos   int
	tag   uint64
	found bool
}

// find returns key's place.
func (x *index) find(key string) place {
	tag := x.tag(key)
	if len(x.buckets) == 0 {
		return place{tag: tag}
	}
	mask := uint64(len(x.buckets) - 1)
	for p := tag & mask; ; p = (p + 1) & mask {
		b := x.buckets[p]
		if b == 0 {
			return place{pos: int(p), tag: tag}
		}
		if tagOf(b) == tag && x.matches(slotOf(b), key) {
			return place{pos: int(p), tag: tag, found: true}
		}
	}
}

// tag returns the upper half of key's hash.
func (x *index) tag(key string) uint64 { return maphash.String(x.seed, key) >> 32 }

// tagBytes returns the upper half of key's hash, as tag(string(key)).
func (x *index) tagBytes(key []byte) uint64 { return maphash.Bytes(x.seed, key) >> 32 }

// get returns the slot key is at.
func (x *index) get(key string) (slot, bool) {
	if x.n == 0 {
		return 0, false
	}
	return x.slotAt(x.find(key))
}

// slotAt returns the slot at pl, a place find returned, if it found one.
func (x *index) slotAt(pl place) (slot, bool) {
	if !pl.found {
		return 0, false
	}
	return slotOf(x.buckets[pl.pos]), true
}

// set points key at slot i, whose record must have key as its string.
func (x *index) set(key string, i slot) { x.put(key, x.find(key), i) }

// put points key at slot i, as set does, given key's place, which find
// returned with x unchanged since: a reservation looks its strings up
// and then adds them, and hashes and probes each once.
func (x *index) put(key string, pl place, i slot) {
	if !pl.found {
		if (x.n+1)*4 > len(x.buckets)*3 {
			x.grow()
			pl = x.find(key)
		}
		x.n++
	}
	x.buckets[pl.pos] = bucketOf(pl.tag, i)
}

// remove drops the string whose tag is tag if it points at slot i. It
// compares no string: a slot has one record.
func (x *index) remove(tag uint64, i slot) {
	if x.n == 0 {
		return
	}
	mask := len(x.buckets) - 1
	p := int(tag) & mask
	for x.buckets[p] != bucketOf(tag, i) {
		if x.buckets[p] == 0 {
			return
		}
		p = (p + 1) & mask
	}
	// Shift back the buckets after it that its own made probe past it,
	// so that no probe stops early at the hole.
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
func (x *index) grow() { x.resize(max(16, 2*len(x.buckets))) }

// shrink halves the table until it is at least an eighth full, once a
// purge has let most of its strings go: a store that held many records
// once would otherwise keep their room for good. Between growing at
// three quarters and shrinking under an eighth, a table that holds about
// as many strings as before does neither.
func (x *index) shrink() {
	size := len(x.buckets)
	for size > minShrunk && x.n*8 < size {
		size /= 2
	}
	if size < len(x.buckets) {
		x.resize(size)
	}
}

// minShrunk is the size under which a table is not shrunk: 8 KiB.
const minShrunk = 1024

// resize moves the buckets to a table of size, a power of two that
// holds them at most three quarters full. A bucket's tag places it: no
// string is read.
func (x *index) resize(size int) {
	old := x.buckets
	x.buckets = make([]uint64, size)
	mask := uint64(size - 1)
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
