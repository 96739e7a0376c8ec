package memstore

import "testing"

// TestCommons checks that ref gives one id to one common while a record
// names it, whether the last one asked for or not, and that an id freed
// and used again names its new common only.
func TestCommons(t *testing.T) {
	var c commons
	a, b, d := common{actor: "a", tool: "t"}, common{actor: "b", tool: "t"}, common{actor: "d", tool: "t"}
	ia := c.ref(a)
	if c.ref(a) != ia || *c.get(ia) != a {
		t.Fatalf("a second ref of a gave another id")
	}
	ib := c.ref(b)
	if ib == ia || c.ref(a) != ia || c.ref(b) != ib {
		t.Fatalf("a and b share an id, or one changed: %d %d", ia, ib)
	}
	for range 3 {
		c.unref(ia)
	}
	// a is forgotten; its id goes to d, and a, asked for again, gets
	// an id of its own.
	id := c.ref(d)
	if id != ia || *c.get(id) != d {
		t.Fatalf("d got id %d (%+v); want the freed %d", id, *c.get(id), ia)
	}
	if ia2 := c.ref(a); ia2 == id || ia2 == ib || *c.get(ia2) != a {
		t.Fatalf("a again got id %d, of %+v", ia2, *c.get(ia2))
	}
	if c.sets[ib].refs != 2 || c.sets[id].refs != 1 {
		t.Fatalf("refs: b %d, d %d; want 2 and 1", c.sets[ib].refs, c.sets[id].refs)
	}
}
