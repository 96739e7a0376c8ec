package stdio

import (
	"bytes"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// Frames come in bursts: a peer with many requests in flight writes
// several before the proxy reads, and one read takes them all. Each frame
// handled writes one to the other side, and a write each costs a system
// call, and the reader there a wake-up. So while whole frames wait in the
// buffer of the side it reads, a reader holds the other side's writes
// (Hold), and writes them in one when the burst is handled (Flush). A
// frame held is not yet written: whoever needs to know when it is passes
// a function that Flush calls with the outcome (WriteAnswer,
// WriteResponseThen, WriteRequestThen).

// A heldFrame is a frame written while the Conn holds its writes, with
// what to tell once Flush writes it.
type heldFrame struct {
	end     int         // the offset in pending just past the frame's newline
	written func(error) // told nil once the frame is written whole, else why not; or nil
	// failed is told the error when the frame was not written whole, with
	// the id it was written with; or nil.
	failed func(id string, err error)
	id     string
}

// FrameWaiting reports whether a whole frame waits in the read buffer, so
// that the next ReadFrame returns without reading. Like ReadFrame, it must
// be called from the goroutine that reads.
func (c *Conn) FrameWaiting() bool {
	if c.late != nil {
		return true
	}
	n := c.r.Buffered()
	if n == 0 {
		return false
	}
	b, _ := c.r.Peek(n) // never an error: n bytes are buffered
	for {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return false
		}
		if len(bytes.TrimSpace(b[:i])) > 0 {
			return true // ReadFrame skips blank lines, and would block after them
		}
		b = b[i+1:]
	}
}

// Hold makes the frames written from now on wait, in order, until Flush
// writes them. Their writes return nil at once.
func (c *Conn) Hold() {
	c.wmu.Lock()
	c.holding = true
	c.wmu.Unlock()
}

// Flush writes the frames held since Hold, in one write, and writes
// frames at once again. Then it tells each held frame's function whether
// the frame was written whole: a write that fails part way has written
// the frames before the failure. It returns the write's error.
func (c *Conn) Flush() error {
	c.wmu.Lock()
	c.holding = false
	var n int
	var err error
	if len(c.pending) > 0 {
		n, err = c.write(c.pending)
		c.failed(err)
	}
	if cap(c.pending) > maxKeptBuffer {
		c.pending = nil
	} else {
		c.pending = c.pending[:0]
	}
	told := c.told
	c.told = c.spareTold[:0]
	c.spareTold = nil
	c.wmu.Unlock()
	// Told outside the lock: what they do may write to this Conn.
	for i, h := range told {
		whole := err == nil || h.end <= n
		switch {
		case h.written != nil && whole:
			h.written(nil)
		case h.written != nil:
			h.written(err)
		case !whole:
			h.failed(h.id, err)
		}
		told[i] = heldFrame{} // no reference kept to what the function holds
	}
	c.wmu.Lock()
	if c.spareTold == nil {
		c.spareTold = told[:0]
	}
	c.wmu.Unlock()
	return err
}

// WriteAnswer writes frame, an answer, as WriteFrame does, and calls
// written(nil) once it is written whole: at once if the Conn does not
// hold its writes, else when Flush writes it. A write made at once that
// fails returns its error, and written is not called; a held frame that
// Flush does not write whole is told the write's error.
func (c *Conn) WriteAnswer(frame []byte, written func(error)) error {
	c.wmu.Lock()
	b := c.frameBuffer()
	err := c.endFrame(append(b, frame...), len(b), heldFrame{written: written})
	return c.unlockTelling(err, written)
}

// WriteResponseThen is WriteResponse with written called as WriteAnswer
// calls it.
func (c *Conn) WriteResponseThen(id, result []byte, written func(error)) error {
	c.wmu.Lock()
	b := c.frameBuffer()
	err := c.endFrame(jsonrpc.AppendResponse(b, id, result), len(b), heldFrame{written: written})
	return c.unlockTelling(err, written)
}

// unlockTelling releases c.wmu, and calls written(nil) if the frame just
// ended, whose write returned err, was written at once and whole.
func (c *Conn) unlockTelling(err error, written func(error)) error {
	held := c.holding
	c.wmu.Unlock()
	if !held && err == nil {
		written(nil)
	}
	return err
}

// WriteFrameThen is WriteFrame, but for a held frame, which Flush writes:
// if that write does not take it whole, Flush calls failed with id and
// the error. The error of a write made at once is returned, and failed is
// not called.
func (c *Conn) WriteFrameThen(frame []byte, id string, failed func(id string, err error)) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	b := c.frameBuffer()
	return c.endFrame(append(b, frame...), len(b), heldFrame{failed: failed, id: id})
}

// WriteRequestThen is WriteRequest, but for a held frame, which Flush
// writes: if that write does not take it whole, Flush calls failed with
// id and the error. The error of a write made at once is returned, and
// failed is not called.
func (c *Conn) WriteRequestThen(id string, method string, params []byte, failed func(id string, err error)) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	b := c.frameBuffer()
	return c.endFrame(appendRequest(b, id, method, params), len(b), heldFrame{failed: failed, id: id})
}
