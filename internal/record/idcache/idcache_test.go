package idcache

import (
	"strconv"
	"testing"
)

// A Cache keeps what was used lately, and no more than two generations.
func TestCacheKeepsWhatWasUsedLately(t *testing.T) {
	c := New[int](2)
	c.Put("a", 1)
	c.Put("b", 2)
	c.Put("c", 3) // a new generation: a and b are old
	if v, ok := c.Get("a"); !ok || v != 1 {
		t.Fatalf("a = %d, %v; want 1 from the old generation", v, ok)
	}
	c.Put("d", 4) // a and c fill the generation; b is dropped with it
	if _, ok := c.Get("b"); ok {
		t.Error("b, not used since two generations, is still kept")
	}
	for _, id := range []string{"a", "c", "d"} {
		if _, ok := c.Get(id); !ok {
			t.Errorf("%s was dropped", id)
		}
	}
	c.Drop("a")
	if _, ok := c.Get("a"); ok {
		t.Error("a was dropped and is still kept")
	}
	for i := range 100 {
		c.Put(strconv.Itoa(i), i)
	}
	if n := len(c.cur) + len(c.old); n > 4 {
		t.Errorf("%d values kept; at most 4 for a size of 2", n)
	}
}
