package memstore

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestIndexAgreesWithAMap runs random sets and removes on an index and on
// a map, and checks that both find the same slots, through the growth of
// the table and the shifts back of its removals.
func TestIndexAgreesWithAMap(t *testing.T) {
	keys := make([]string, 5000)
	for i := range keys {
		keys[i] = fmt.Sprint("exe_", i)
	}
	// Slot i holds keys[i]: an index only finds a slot by its own string.
	x := newIndex(func(i slot, key string) bool { return keys[i] == key })
	want := make(map[string]slot)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		i := slot(rng.IntN(len(keys)))
		k := keys[i]
		if rng.IntN(3) == 0 {
			x.remove(x.tag(k), i)
			delete(want, k)
		} else {
			x.set(k, i)
			want[k] = i
		}
	}
	if x.n != len(want) {
		t.Fatalf("the index holds %d; want %d", x.n, len(want))
	}
	for i, k := range keys {
		got, ok := x.get(k)
		if w, wok := want[k]; ok != wok || got != w {
			t.Fatalf("get(%s) = %d, %v; want %d, %v (slot %d)", k, got, ok, w, wok, i)
		}
	}
	n := 0
	for range x.all() {
		n++
	}
	if n != len(want) {
		t.Errorf("all yields %d slots; want %d", n, len(want))
	}
}

// TestIndexRemovesOnlyItsSlot checks that a key that has moved on to
// another slot stays when the slot it left is removed.
func TestIndexRemovesOnlyItsSlot(t *testing.T) {
	x := newIndex(func(_ slot, key string) bool { return key == "k" })
	x.set("k", 1)
	x.set("k", 2)
	x.remove(x.tag("k"), 1)
	if x.tag("k") != x.tagBytes([]byte("k")) {
		t.Fatal("a string and its bytes have different tags")
	}
	if i, ok := x.get("k"); !ok || i != 2 || x.n != 1 {
		t.Fatalf("get(k) = %d, %v with %d held; want 2", i, ok, x.n)
	}
}

// TestIndexShrinks checks that a table most of whose strings went is
// made smaller, and still finds every string it holds; and that one that
// holds as many as it was grown for is not.
func TestIndexShrinks(t *testing.T) {
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = fmt.Sprint("exe_", i)
	}
	x := newIndex(func(i slot, key string) bool { return keys[i] == key })
	for i, k := range keys {
		x.set(k, slot(i))
	}
	grown := len(x.buckets)
	x.shrink()
	if len(x.buckets) != grown {
		t.Fatalf("a table of %d holding %d shrank to %d", grown, x.n, len(x.buckets))
	}
	const kept = 1000
	for i, k := range keys[kept:] {
		x.remove(x.tag(k), slot(kept+i))
	}
	x.shrink()
	if x.n*8 < len(x.buckets) || x.n*4 > len(x.buckets)*3 || len(x.buckets)*32 > grown {
		t.Fatalf("%d strings left of %d: the table went from %d buckets to %d; want it between an eighth and three quarters full",
			x.n, len(keys), grown, len(x.buckets))
	}
	for i, k := range keys {
		got, ok := x.get(k)
		if want := i < kept; ok != want || ok && got != slot(i) {
			t.Fatalf("after the shrink, get(%s) = %d, %v; want %d, %v", k, got, ok, i, want)
		}
	}
}
