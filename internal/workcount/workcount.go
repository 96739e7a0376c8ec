// Package workcount counts work under way, for a waiter to see all of it
// end: a sync.WaitGroup for counts taken and released on every call. A
// WaitGroup's Add checks for a synctest bubble and for misuse each time,
// several times the cost of the atomic add itself; here Start and Done
// are an atomic add each, inlined, and Done does more only when the
// count reaches zero with a Wait under way.
package workcount

import (
	"sync"
	"sync/atomic"
)

// A Count counts work under way. Its zero value counts none. As with a
// WaitGroup, the Start of work that a Wait must see happens before that
// Wait, or is done by work the count already holds.
type Count struct {
	// state holds the count in its high 32 bits and the Waits under
	// way in its low 32: Done learns from its one atomic add whether
	// it has a Wait to wake, and a Wait from its own whether any work
	// is left, so neither misses the other.
	state atomic.Int64
	mu    sync.Mutex
	zero  chan struct{} // closed for the Waits when the count reaches zero
}

const one = 1 << 32 // one piece of work, in state

// Start counts one piece of work more.
func (c *Count) Start() { c.state.Add(one) }

// Done counts one piece of work less, and wakes the Waits if it was the
// last.
func (c *Count) Done() {
	// A state below one is a count of zero, or below: with no Wait
	// (zero) there is nothing more to do.
	if s := c.state.Add(-one); s < one && s != 0 {
		c.wake(s)
	}
}

// wake wakes the Waits, the state having come to s.
func (c *Count) wake(s int64) {
	if s < 0 {
		panic("workcount: negative count")
	}
	c.mu.Lock()
	if c.zero != nil {
		close(c.zero)
		c.zero = nil
	}
	c.mu.Unlock()
}

// Wait blocks until the count is zero: until every piece of work started
// before it, and every one started while it waits, is done.
func (c *Count) Wait() {
	if c.state.Add(1) < one {
		c.state.Add(-1)
		return
	}
	defer c.state.Add(-1)
	for {
		c.mu.Lock()
		if c.state.Load() < one {
			c.mu.Unlock()
			return
		}
		if c.zero == nil {
			c.zero = make(chan struct{})
		}
		zero := c.zero
		c.mu.Unlock()
		<-zero // woken at a zero, which a Start may have left since: look again
	}
}
