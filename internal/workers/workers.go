// Package workers runs functions on goroutines kept from one function to
// the next.
//
// A goroutine starts with a small stack and grows it, by copying it
// whole, each time its calls go deeper than it holds. A durable store's
// client runs deep (modernc.org/sqlite's statements most of all), so a
// goroutine started for each call copied its stack several times over,
// at every call: about 8% of the proxy's CPU time with the SQLite store.
// A worker keeps the stack it grew for the next function it runs.
//
// A traceback of a worker names, as the goroutine's creator, the Go that
// started it, whichever function that was for.
package workers

import (
	"slices"
	"sync"
	"time"
)

// A Pool runs functions on its workers: goroutines that, once a function
// returns, wait for the next one, and end after a while without one.
// The worker that waited least takes the next function, so that the
// ones a burst left over wait idle, and end.
type Pool struct {
	idle time.Duration
	mu   sync.Mutex
	free []*worker // waiting for a function, the latest to wait last
}

// A worker is a goroutine of a Pool's. Go hands it a function through its
// own channel, after taking it off the free list, so that a worker sees
// at most one at a time and the send never waits.
type worker struct{ next chan func() }

// New returns a Pool whose workers end once they have waited idle for a
// function to run.
func New(idle time.Duration) *Pool { return &Pool{idle: idle} }

// Go runs f on a worker waiting for one, or on a new worker if none is.
// Like a go statement, it never waits for f; on a nil Pool it is one.
func (p *Pool) Go(f func()) {
	if p == nil {
		go f()
		return
	}
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		w := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		p.mu.Unlock()
		w.next <- f
		return
	}
	p.mu.Unlock()
	go p.work(&worker{next: make(chan func(), 1)}, f)
}

// work runs f, then the functions handed to w, until w has waited idle
// for one.
func (p *Pool) work(w *worker, f func()) {
	t := time.NewTimer(p.idle)
	defer t.Stop()
	for {
		f()
		p.mu.Lock()
		p.free = append(p.free, w)
		p.mu.Unlock()
		t.Reset(p.idle)
		select {
		case f = <-w.next:
			continue
		case <-t.C:
		}
		p.mu.Lock()
		i := slices.Index(p.free, w)
		if i >= 0 {
			p.free = slices.Delete(p.free, i, i+1)
		}
		p.mu.Unlock()
		if i >= 0 {
			return
		}
		// Go took w off the list as its time ran out: a function comes.
		f = <-w.next
	}
}
