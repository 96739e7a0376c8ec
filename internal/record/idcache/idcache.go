// Package idcache keeps values by record id, for the stores that
// remember what they last learnt of a record, in bounded memory.
package idcache

import "sync"

// A Cache remembers a value by record id. It keeps two generations: when
// the current one is full it becomes the old one and the old one is
// dropped, so the records used recently stay and memory stays bounded,
// at between one and two times its size. It is safe for concurrent use.
type Cache[V any] struct {
	size int

	mu       sync.Mutex // protects cur and old
	cur, old map[string]V
}

// New returns a Cache of size.
func New[V any](size int) *Cache[V] {
	return &Cache[V]{size: size, cur: make(map[string]V)}
}

// Get returns the value kept for id.
func (c *Cache[V]) Get(id string) (V, bool) {
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

// Put keeps v for id.
func (c *Cache[V]) Put(id string, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putLocked(id, v)
}

func (c *Cache[V]) putLocked(id string, v V) {
	if _, ok := c.cur[id]; !ok && len(c.cur) >= c.size {
		c.old, c.cur = c.cur, make(map[string]V)
	}
	c.cur[id] = v
}

// Drop forgets id.
func (c *Cache[V]) Drop(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.cur, id)
	delete(c.old, id)
}
