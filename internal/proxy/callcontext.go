package proxy

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
)

// callContext is the context of one client call: the session's, ended
// early when the call is answered or its caller detaches. It is part of the
// clientCall, so a call allocates no context of its own and touches
// nothing of the session's context; a Done channel is made only when one
// is asked for (a caller that waits for another's execution). Its first
// error stays its error. context.Cause is not tracked: it reports the
// session's cause.
//
// Its Err, once the session has ended, wraps intercept.ErrSessionEnded
// (sessionEnded), which the interceptor reads there, where the context
// contract allows only Canceled and DeadlineExceeded. It is kept because
// the standard library's context.WithCancelCause, whose cause could carry
// ErrSessionEnded instead, costs every call two allocations (96 bytes)
// and about 900 instructions more (BenchmarkPath, counted by cachegrind).
type callContext struct {
	context.Context // the session's
	err             atomic.Pointer[error]

	mu sync.Mutex // guards waits and what it holds, and the setting of err
	// waits is made by Done: most calls are never waited on, and keep
	// the room it takes out of the clientCall.
	waits *callWaits
}

// callWaits is what a callContext keeps once something waits on it.
type callWaits struct {
	done   chan struct{}
	closed bool        // done is closed
	stop   func() bool // stops ending the call when the session's context ends
	// funcs are the functions registered with AfterFunc, by registration,
	// until they are started.
	funcs map[int]func()
	next  int
}

// AfterFunc arranges for f to run in its own goroutine once the call's
// context ends, as context.AfterFunc does; stop unregisters f and reports
// whether that kept it from running. A context derived from the call's
// (the deadline of a caller waiting for another's execution) registers
// here rather than starting a goroutine to watch Done.
func (c *callContext) AfterFunc(f func()) (stop func() bool) {
	c.Done() // the session's end must end the call, and so run f
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.waits
	if w.closed {
		go f()
		return func() bool { return false }
	}
	if w.funcs == nil {
		w.funcs = make(map[int]func())
	}
	id := w.next
	w.next++
	w.funcs[id] = f
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, ok := w.funcs[id]
		delete(w.funcs, id)
		return ok
	}
}

func (c *callContext) Err() error {
	if p := c.err.Load(); p != nil {
		return *p
	}
	if err := c.Context.Err(); err != nil {
		// The session's context ended first: so did the call's.
		c.mu.Lock()
		defer c.mu.Unlock()
		c.endLocked(sessionEnded(err))
		return *c.err.Load()
	}
	return nil
}

func (c *callContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.waits == nil {
		c.waits = &callWaits{done: make(chan struct{})}
		if c.err.Load() != nil {
			c.endLocked(nil)
		} else {
			c.waits.stop = context.AfterFunc(c.Context, func() {
				c.mu.Lock()
				defer c.mu.Unlock()
				c.endLocked(sessionEnded(c.Context.Err()))
			})
		}
	}
	return c.waits.done
}

// end ends the call's context.
func (c *callContext) end() { c.endWith(context.Canceled) }

// endWith ends the call's context with err, unless it has ended.
func (c *callContext) endWith(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w := c.waits; w != nil && w.stop != nil {
		w.stop()
		w.stop = nil
	}
	c.endLocked(err)
}

// endLocked sets the error unless one is set, then closes done if it was
// made. c.mu must be held.
func (c *callContext) endLocked(err error) {
	if c.err.Load() == nil {
		c.err.Store(errorPointer(err))
	}
	if w := c.waits; w != nil && !w.closed {
		close(w.done)
		w.closed = true
		for _, f := range w.funcs {
			go f()
		}
		w.funcs = nil // started: a stop keeps none of them from running
	}
}

// sessionEnded is the error of a call whose session's context ended with
// err: intercept.ErrSessionEnded, which is not the caller leaving, and err.
func sessionEnded(err error) error {
	return fmt.Errorf("%w: %w", intercept.ErrSessionEnded, err)
}

// The errors a context ends with, to point at without an allocation.
var (
	errCanceled         = context.Canceled
	errDeadlineExceeded = context.DeadlineExceeded
)

func errorPointer(err error) *error {
	switch err {
	case context.Canceled:
		return &errCanceled
	case context.DeadlineExceeded:
		return &errDeadlineExceeded
	}
	other := err // err itself must not escape: that would cost every call
	return &other
}
