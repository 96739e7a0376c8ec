package proxy

// While whole frames wait, already read, in the buffer of the side a pump
// reads, the pump holds the writes to the other side, and writes them in
// one once it has handled those frames: a burst of requests from the
// client goes upstream in one write, and a burst of answers to the client
// in one (stdio.Conn, whose hold.go says what a held frame's writer is
// told). A Conn that cannot hold, or cannot tell what waits, is written
// at once. While it handles a frame, a pump waits on nothing that a held
// frame would bring: the client's pump holds no upstream being started
// again, whose replayed handshake a frame it forwards waits for
// (upstreamConn).

// A frameWaiter tells whether a whole frame waits in its read buffer.
type frameWaiter interface {
	FrameWaiting() bool
}

// A holder holds the frames written to it until Flush.
type holder interface {
	Hold()
	Flush() error
}

// A requestThenWriter writes a request as frameBuilder does, and if it
// holds it, tells failed when the write that takes it later fails.
type requestThenWriter interface {
	WriteRequestThen(id string, method string, params []byte, failed func(id string, err error)) error
}

// A frameThenWriter writes a frame as Conn does, and if it holds it,
// tells failed when the write that takes it later fails.
type frameThenWriter interface {
	WriteFrameThen(frame []byte, id string, failed func(id string, err error)) error
}

// A responseThenWriter writes an answer as frameBuilder does, and tells
// written once it is written.
type responseThenWriter interface {
	WriteResponseThen(id, result []byte, written func(error)) error
}

// A burst is what one pump holds.
type burst struct {
	from frameWaiter // the side the pump reads; nil if it cannot tell
	to   func() Conn // the side it writes, as it is now
	held holder      // to's Conn while its writes are held; else nil
}

func newBurst(from Conn, to func() Conn) burst {
	w, _ := from.(frameWaiter)
	return burst{from: w, to: to}
}

// hold is called after each read: if another whole frame waits, the
// writes to the other side are held from now on, and hold reports true.
func (b *burst) hold() bool {
	if b.from == nil || !b.from.FrameWaiting() {
		return false
	}
	if b.held == nil {
		if h, ok := b.to().(holder); ok {
			h.Hold()
			b.held = h
		}
	}
	return true
}

// flush writes what is held unless more frames wait (more being hold's
// answer). The writers of held frames learn the write's outcome from the
// Conn; none else needs it.
func (b *burst) flush(more bool) {
	if more || b.held == nil {
		return
	}
	b.held.Flush()
	b.held = nil
}
