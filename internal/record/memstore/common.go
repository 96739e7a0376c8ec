package memstore

// common is what the records of one session's calls to one tool share:
// a packed record names it by number instead of holding its strings,
// about a quarter of what it would otherwise keep.
type common struct {
	actor, scope, upstream, tool, owner string
}

// commons keeps each common once, for as long as a packed record names
// it.
type commons struct {
	ids  map[common]uint32
	sets []commonSet // by id
	free []uint32    // ids no record names, to use again
	// last is the id ref returned last: a session's calls come in runs
	// to one tool, and comparing five strings costs a fraction of
	// hashing them for the map.
	last uint32
}

type commonSet struct {
	common
	refs int // the packed records that name it
}

// ref returns the id of v, counting one more record that names it.
func (c *commons) ref(v common) uint32 {
	if id := c.last; int(id) < len(c.sets) && c.sets[id].refs > 0 && c.sets[id].common == v {
		c.sets[id].refs++
		return id
	}
	id, ok := c.ids[v]
	switch {
	case ok:
	case len(c.free) > 0:
		id = c.free[len(c.free)-1]
		c.free = c.free[:len(c.free)-1]
		c.sets[id] = commonSet{common: v}
	default:
		id = uint32(len(c.sets))
		c.sets = append(c.sets, commonSet{common: v})
	}
	if !ok {
		if c.ids == nil {
			c.ids = make(map[common]uint32)
		}
		c.ids[v] = id
	}
	c.sets[id].refs++
	c.last = id
	return id
}

// unref counts one record fewer that names id, and forgets it with the
// last.
func (c *commons) unref(id uint32) {
	set := &c.sets[id]
	if set.refs--; set.refs == 0 {
		delete(c.ids, set.common)
		*set = commonSet{}
		c.free = append(c.free, id)
	}
}

// get returns the common id names.
func (c *commons) get(id uint32) *common { return &c.sets[id].common }
