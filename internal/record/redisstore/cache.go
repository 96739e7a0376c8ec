package redisstore

import "sync"

// tagCacheSize bounds the records whose place a Store remembers: between
// one and two times this many.
const tagCacheSize = 1 << 16

// tagCache remembers where records are, by id. It keeps two generations:
// when the current one is full it becomes the old one and the old one is
// dropped, so the records used recently stay and memory stays bounded.
type tagCache struct {
	size int

	mu       sync.Mutex // protects cur and old
	cur, old map[string]loc
}

func newTagCache(size int) tagCache {
	return tagCache{size: size, cur: make(map[string]loc)}
}

func (c *tagCache) get(id string) (loc, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.cur[id]; ok {
		return l, true
	}
	l, ok := c.old[id]
	if ok {
		c.putLocked(id, l)
	}
	return l, ok
}

func (c *tagCache) put(id string, l loc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putLocked(id, l)
}

func (c *tagCache) putLocked(id string, l loc) {
	if _, ok := c.cur[id]; !ok && len(c.cur) >= c.size {
		c.old, c.cur = c.cur, make(map[string]loc)
	}
	c.cur[id] = l
}

func (c *tagCache) drop(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.cur, id)
	delete(c.old, id)
}
