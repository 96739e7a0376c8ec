package redisstore

import "sync"

// tagCacheSize bounds the records whose place a Store remembers: between
// one and two times this many.
const tagCacheSize = 1 << 16

// cache remembers a value by record id. It keeps two generations: when
// the current one is full it becomes the old one and the old one is
// dropped, so the records used recently stay and memory stays bounded.
type cache[V any] struct {
	size int

	mu       sync.Mutex // protects cur and old
	cur, old map[string]V
}

func newCache[V any](size int) cache[V] {
	return cache[V]{size: size, cur: make(map[string]V)}
}

func (c *cache[V]) get(id string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.cur[id]; ok {
		return v, true
	}
	v, ok := c.old[id]
	if ok {
		c.putLocked(id, v)
	}
	return v, ok
}

func (c *cache[V]) put(id string, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putLocked(id, v)
}

func (c *cache[V]) putLocked(id string, v V) {
	if _, ok := c.cur[id]; !ok && len(c.cur) >= c.size {
		c.old, c.cur = c.cur, make(map[string]V)
	}
	c.cur[id] = v
}

func (c *cache[V]) drop(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.cur, id)
	delete(c.old, id)
}
