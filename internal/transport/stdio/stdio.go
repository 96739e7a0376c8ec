// Package stdio carries newline-delimited JSON-RPC frames over pipes: the
// proxy's own stdin and stdout, and the stdin and stdout of an upstream
// server it starts as a child process.
package stdio

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// DefaultMaxFrame is the default limit on one frame's size.
const DefaultMaxFrame = 16 << 20

// A FrameTooLargeError reports a frame over the size limit. It comes as
// soon as the limit is passed; the rest of the frame is dropped by the
// next ReadFrame, which reads the frame after it.
type FrameTooLargeError struct {
	Limit int
	// Head is the frame's first bytes (at most headSize), from which a
	// reader can tell what the dropped message was, and its id.
	Head []byte
	// Late marks a second report of a frame already reported: its end has
	// come, and Head stands for what the first report's head left out,
	// the ids found after it: {"id":ID,"result":null} for an answer,
	// {"id":ID,"method":null} for a request, with "id" given once for each
	// id (jsonrpc.HeadMessage reads it). Where the first report's head did
	// not tell a request from an answer, every id is given, and the kind
	// is the whole frame's. Only a Conn that follows late ids
	// (FollowLateIDs) makes one.
	Late bool
}

// headSize bounds FrameTooLargeError.Head: enough for the members a
// JSON-RPC encoder writes before a large result.
const headSize = 1024

// FrameTooLarge marks the error as one after which the stream is still
// usable.
func (e *FrameTooLargeError) FrameTooLarge() bool { return true }

// FrameHead returns the dropped frame's first bytes.
func (e *FrameTooLargeError) FrameHead() []byte { return e.Head }

func (e *FrameTooLargeError) Error() string {
	return fmt.Sprintf("message larger than the %d-byte limit (--max-message-size)", e.Limit)
}

// A CutFrameError is the last line of a peer's output, ended by the end
// of the output rather than a newline, that is not JSON: the start of a
// message the peer was writing when it exited. Only a Conn that reports
// cut frames (ReportCutFrames) makes one.
type CutFrameError struct{ Size int }

func (e *CutFrameError) Error() string {
	return fmt.Sprintf("the output ended in the middle of a message (%d bytes of it)", e.Size)
}

// Unwrap makes a cut frame an io.ErrUnexpectedEOF: nothing follows it.
func (e *CutFrameError) Unwrap() error { return io.ErrUnexpectedEOF }

// A Conn reads and writes newline-delimited frames. ReadFrame must be called
// from one goroutine at a time; WriteFrame is safe for concurrent use.
type Conn struct {
	r   *bufio.Reader
	max int
	// skipping: the line being read was reported too large before its
	// end, which the next read drops.
	skipping bool
	// lateIDs is set for a Conn reading an upstream (FollowLateIDs): a
	// frame too large is followed to its end by tail, and late, the report
	// of the ids found there that its head, of kind headKind, did not
	// answer for, is the next read's error.
	lateIDs   bool
	cutFrames bool // ReportCutFrames
	tail      *jsonrpc.TailScan
	headLen   int
	headKind  jsonrpc.HeadKind
	late      error

	wmu  sync.Mutex // serializes writes so frames never interleave
	w    io.Writer
	wbuf []byte    // the frame and its newline, reused under wmu
	c    io.Closer // closes the write side; nil if none

	// While holding (hold.go), frames wait in pending, and those whose
	// writers want to know when they are written, in told; spareTold is
	// told's other buffer, which Flush hands back.
	holding         bool
	pending         []byte
	told, spareTold []heldFrame

	// begun and ended count the writes to w (WriteUnderWay).
	begun, ended atomic.Uint64

	// writeFailed is closed by the first write that fails, whose error
	// writeErr then holds: the peer closed the pipe it reads, say.
	writeFailed chan struct{}
	writeErr    atomic.Pointer[error]
	failOnce    sync.Once
}

// NewConn returns a Conn reading from r and writing to w. Frames longer than
// maxFrame bytes are refused; maxFrame <= 0 means DefaultMaxFrame. If w is an
// io.Closer, Close closes it.
func NewConn(r io.Reader, w io.Writer, maxFrame int) *Conn {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	c := &Conn{r: bufio.NewReaderSize(r, 64<<10), max: maxFrame, w: w, writeFailed: make(chan struct{})}
	if cl, ok := w.(io.Closer); ok {
		c.c = cl
	}
	return c
}

// ReadFrame returns the next non-empty frame without its line ending. The
// returned slice is the caller's to keep. At the end of input it returns
// io.EOF; a final frame without a newline is still returned first.
func (c *Conn) ReadFrame() ([]byte, error) {
	for {
		frame, err := c.readLine()
		if err != nil {
			return nil, err
		}
		frame = bytes.TrimRight(frame, "\r")
		if len(bytes.TrimSpace(frame)) == 0 {
			continue
		}
		return frame, nil
	}
}

// readLine returns the next line without its line ending (an LF, or a CR
// and an LF). A line whose content is over the limit is reported as a
// FrameTooLargeError once the limit is passed, not at its end: a peer
// that stalls in the middle of a huge answer must not hold up the answer
// the proxy owes for it. The rest of the line is dropped by the next call.
func (c *Conn) readLine() ([]byte, error) {
	if c.skipping {
		if err := c.skipLine(); err != nil {
			return nil, err
		}
	}
	if err := c.late; err != nil {
		c.late = nil
		return nil, err
	}
	// A whole line holds the frame, a CR and the LF; the sum stays in
	// range where int has 32 bits.
	limit := c.max + min(2, math.MaxInt-c.max)
	var buf []byte
	for {
		chunk, err := c.r.ReadSlice('\n')
		full := errors.Is(err, bufio.ErrBufferFull)
		if len(buf)+len(chunk) > limit && (err == nil || full || errors.Is(err, io.EOF)) {
			n := min(len(buf), headSize)
			head := append(bytes.Clone(buf[:n]), chunk[:min(len(chunk), headSize-n)]...)
			c.skipping = full
			c.followTail(buf, chunk, head)
			return nil, &FrameTooLargeError{Limit: c.max, Head: head}
		} else if buf == nil && err == nil {
			// The common case: the whole line was in the buffer.
			line, err := c.endLine(chunk)
			return bytes.Clone(line), err
		}
		buf = append(buf, chunk...)
		switch {
		case err == nil:
			return c.endLine(buf)
		case full:
			continue
		case errors.Is(err, io.EOF):
			if len(buf) > 0 {
				// A final frame without a newline: the limit still
				// applies to all of it.
				return c.endFinal(buf)
			}
			return nil, io.EOF
		default:
			return nil, err
		}
	}
}

// skipLine drops what is left of a line reported too large, up to and
// including its newline.
func (c *Conn) skipLine() error {
	for {
		chunk, err := c.r.ReadSlice('\n')
		if c.tail != nil {
			c.tail.Scan(chunk)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err == nil {
			c.skipping = false
			c.endTail()
		}
		return err
	}
}

// FollowLateIDs makes c, reading an upstream, follow each frame too large
// to its end, and report it a second time (FrameTooLargeError.Late) with
// the ids its head did not hold: JSON objects are unordered, and the
// request such a frame answers, or the upstream that sent such a request,
// would otherwise wait for ever. Call it
// before the first read. A Conn reading a client needs none: a request
// too large whose id comes late is answered under a null id at once.
func (c *Conn) FollowLateIDs() { c.lateIDs = true }

// ReportCutFrames makes c, reading an upstream, report a final line that
// has no newline and is not JSON as a CutFrameError, not as a frame: it
// is what an upstream that exited in the middle of a message had written
// of it, which passed on would reach the client as a line that is not
// JSON. Call it before the first read. One that is JSON is a whole
// message, and is returned. A Conn reading a client needs none: what it
// reads is answered, not passed on.
func (c *Conn) ReportCutFrames() { c.cutFrames = true }

// endFinal is endLine for line, ended by the end of the input.
func (c *Conn) endFinal(line []byte) ([]byte, error) {
	frame, err := c.endLine(line)
	if err != nil || !c.cutFrames || json.Valid(frame) || len(bytes.TrimSpace(frame)) == 0 {
		return frame, err
	}
	return nil, &CutFrameError{Size: len(frame)}
}

// followTail starts following a frame too large, whose first bytes so far
// are buf and chunk and whose reported head is head, for the ids its head
// did not answer for; the frame may end in chunk.
func (c *Conn) followTail(buf, chunk, head []byte) {
	if !c.lateIDs {
		return
	}
	c.tail, c.headLen = &jsonrpc.TailScan{}, len(head)
	_, c.headKind = jsonrpc.HeadMessage(head)
	c.tail.Scan(buf)
	c.tail.Scan(chunk)
	if !c.skipping {
		c.endTail()
	}
}

// endTail ends the following of a frame too large at its end: an id found
// after its head is reported by the next read.
func (c *Conn) endTail() {
	if c.tail == nil {
		return
	}
	if head := jsonrpc.LateHead(c.tail.LateIDs(c.headLen, c.headKind)); head != nil {
		c.late = &FrameTooLargeError{Limit: c.max, Head: head, Late: true}
	}
	c.tail = nil
}

// endLine strips line's ending and checks what is left against the limit.
func (c *Conn) endLine(line []byte) ([]byte, error) {
	line = bytes.TrimSuffix(line, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	if len(line) > c.max {
		head := bytes.Clone(line[:min(len(line), headSize)])
		c.followTail(nil, line, head)
		return nil, &FrameTooLargeError{Limit: c.max, Head: head}
	}
	return line, nil
}

// WriteFrame writes frame followed by a newline, in one write.
func (c *Conn) WriteFrame(frame []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	b := c.frameBuffer()
	return c.endFrame(append(b, frame...), len(b), heldFrame{})
}

// WriteResponse writes the frame jsonrpc.NewResponse(id, result) makes,
// built in the Conn's own buffer rather than in one of its own.
func (c *Conn) WriteResponse(id, result json.RawMessage) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	b := c.frameBuffer()
	return c.endFrame(jsonrpc.AppendResponse(b, id, result), len(b), heldFrame{})
}

// WriteRequest writes the frame jsonrpc.NewRequest(id, method, params)
// makes, id being the JSON text of the request's id ("" for a
// notification), built in the Conn's own buffer rather than in one of its
// own.
func (c *Conn) WriteRequest(id string, method string, params json.RawMessage) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	b := c.frameBuffer()
	return c.endFrame(appendRequest(b, id, method, params), len(b), heldFrame{})
}

// appendRequest appends the frame WriteRequest writes to b.
func appendRequest(b []byte, id string, method string, params []byte) []byte {
	b = append(b, `{"jsonrpc":"2.0"`...)
	if id != "" {
		b = append(append(b, `,"id":`...), id...)
	}
	return jsonrpc.AppendRequestTail(b, method, params)
}

// frameBuffer returns the buffer to build the next frame at the end of:
// the frames held, or the Conn's write buffer. c.wmu must be held.
func (c *Conn) frameBuffer() []byte {
	if c.holding {
		return c.pending
	}
	return c.wbuf[:0]
}

// endFrame ends the frame built in b from offset start (b being
// frameBuffer's) with a newline, and writes it in one write, keeping the
// buffer for the next frame; or, while the Conn holds its writes, keeps it
// with them, and h to be told when it is written. c.wmu must be held.
func (c *Conn) endFrame(b []byte, start int, h heldFrame) error {
	if jsonrpc.HasLineBreak(b[start:]) {
		// A newline inside a frame would split it in two for the reader,
		// and so would a carriage return for one that reads lines with
		// universal newlines, as the Python SDK's stdio server does (a
		// body posted with CRLF line breaks holds them). JSON never needs
		// either outside strings, where they are escaped.
		f := bytes.ReplaceAll(b[start:], []byte("\n"), nil)
		b = append(b[:start], bytes.ReplaceAll(f, []byte("\r"), nil)...)
	}
	if f := bytes.Trim(b[start:], " \t"); len(f) < len(b)-start {
		// White space around a message is no part of it, and a reader
		// may take anything but a newline after one for more data: the
		// go-sdk's stdio transport ends its connection on it. An HTTP
		// body may end in a space.
		b = append(b[:start], f...)
	}
	b = append(b, '\n')
	if c.holding {
		c.pending = b
		if h.written != nil || h.failed != nil {
			h.end = len(b)
			c.told = append(c.told, h)
		}
		return nil
	}
	// One write per frame, from a buffer kept between frames: a write of
	// the frame and another of the newline would cost the peer a second
	// wake-up, and a fresh buffer per frame costs an allocation.
	_, err := c.write(b)
	c.failed(err)
	if cap(b) > maxKeptBuffer {
		c.wbuf = nil // a rare large frame does not pin its buffer
	} else if cap(b) > cap(c.wbuf) {
		c.wbuf = b
	}
	return err
}

// write writes b to the peer, counting the write for WriteUnderWay.
// c.wmu must be held.
func (c *Conn) write(b []byte) (int, error) {
	c.begun.Add(1)
	n, err := c.w.Write(b)
	c.ended.Add(1)
	return n, err
}

// WriteUnderWay returns the number of the write to the peer under way,
// counting from 1, or 0 when none is. The same number some time apart
// means one write lasted all that time: the peer took nothing of it.
func (c *Conn) WriteUnderWay() uint64 {
	// ended first: a write begun since is one that began after it.
	ended := c.ended.Load()
	if begun := c.begun.Load(); begun != ended {
		return begun
	}
	return 0
}

// failed notes err, if it is a write's error, for WriteFailed.
func (c *Conn) failed(err error) {
	if err == nil {
		return
	}
	c.failOnce.Do(func() {
		c.keepWriteErr(err)
		close(c.writeFailed)
	})
}

// keepWriteErr keeps err for WriteErr. A function of its own, so that only
// a failed write moves an error to the heap, not every write.
func (c *Conn) keepWriteErr(err error) { c.writeErr.Store(&err) }

// WriteFailed returns a channel closed once a write has failed. Over a
// pipe or a socket no later write succeeds: the peer no longer reads, or
// closed its end.
func (c *Conn) WriteFailed() <-chan struct{} { return c.writeFailed }

// WriteErr returns the error of the first write that failed, or nil.
func (c *Conn) WriteErr() error {
	if p := c.writeErr.Load(); p != nil {
		return *p
	}
	return nil
}

// maxKeptBuffer bounds the write buffer a Conn keeps between frames.
const maxKeptBuffer = 64 << 10

// Close closes the write side, which tells a child process reading it that
// no more input will come. Close does not wait for a WriteFrame in
// progress: a write stuck on a peer that stopped reading would make it wait
// forever, and Child.Stop could then never send its signals. Closing an
// *os.File or an io.PipeWriter unblocks such a write with an error; other
// closers must be safe to call during a Write.
func (c *Conn) Close() error {
	if c.c == nil {
		return nil
	}
	return c.c.Close()
}
