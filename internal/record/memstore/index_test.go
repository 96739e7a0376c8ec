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
