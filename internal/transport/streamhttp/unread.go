package streamhttp

import (
	"errors"
	"sync"
)

// ErrNeverRead is why an answer that WriteAnswer took never reached the
// client: its session ended first, or the session's buffer dropped it
// before the client read or resumed it.
var ErrNeverRead = errors.New("the client never read it: its session ended, or dropped it from its buffer, first")

// errNotAwaited is why WriteAnswer could not take an answer: no request
// of the session awaits it.
var errNotAwaited = errors.New("no request of the session awaits it")

// An unreadAnswer is an answer whose writing WriteAnswer is to report:
// written(nil) once it reaches the client, or written(ErrNeverRead) once
// it never can.
type unreadAnswer struct {
	written func(error)
	streams []*stream // the streams that hold it
	// wrote is what its events call once written to the client.
	wrote func()
	// held counts its events not yet evicted from the session's buffer:
	// at none, no stream can bring it to the client any more.
	held int
	// sending counts the writers that took one of its events and have
	// not yet finished writing it.
	sending int
}

// holdUnreadLocked keeps track of an answer on p's streams until its
// events call wrote, or it can never be read.
func (ss *ServerSession) holdUnreadLocked(p *pendingRequest, written func(error)) *unreadAnswer {
	u := &unreadAnswer{written: written, streams: p.streams}
	u.wrote = func() {
		ss.mu.Lock()
		_, ok := ss.unread[u]
		delete(ss.unread, u)
		f := u.written
		u.written, u.streams = nil, nil // the event may be held long after
		ss.mu.Unlock()
		if ok {
			f(nil)
		}
	}
	if ss.unread == nil {
		ss.unread = make(map[*unreadAnswer]struct{})
	}
	ss.unread[u] = struct{}{}
	return u
}

// evictedLocked notes that one event of u left the session's buffer. Once
// the last has, and no writer may still hold one in a batch, the answer
// can never be read: it is reported so at once, rather than at the end of
// a session that may last for days, so that what waits on it is freed.
func (ss *ServerSession) evictedLocked(u *unreadAnswer) {
	if u.held--; u.held == 0 {
		ss.dropLostLocked(u)
	}
}

// dropLostLocked reports u as never written if it is still unread, none
// of its events is held and no writer is writing one it took (a writer
// that took one reports it, or, failing, leaves it to sent). A writer's
// generation will not do: one taken over may still be writing.
func (ss *ServerSession) dropLostLocked(u *unreadAnswer) {
	if _, ok := ss.unread[u]; !ok || u.held > 0 || u.sending > 0 {
		return
	}
	delete(ss.unread, u)
	f := u.written
	u.written, u.streams = nil, nil
	// Not under ss.mu: what waits on the answer may write to the session.
	ss.srv.losses.run(func() { f(ErrNeverRead) })
}

// sent notes that a writer finished writing the answers it took in b, ok
// if it wrote them (their wrote was called), else they may now be lost.
// Either way the session no longer counts them as being written.
func (ss *ServerSession) sent(b *batch, ok bool) {
	if len(b.taken) == 0 && b.writing == 0 && b.copied == 0 {
		return
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.taken -= b.copied
	b.copied = 0
	ss.writing -= b.writing
	ss.writingBytes -= b.writingBytes
	b.writing, b.writingBytes = 0, 0
	for _, u := range b.taken {
		u.sending--
		if !ok {
			ss.dropLostLocked(u)
		}
	}
}

// dropUnread reports as never written the answers the client has not read
// once the session is gone, and no request can resume a stream of it:
// evicted, on a stream the client gave up, or held for a resume that did
// not come. An answer on a stream that a writer may be writing still is
// not reported either way: it may yet reach the client.
func (ss *ServerSession) dropUnread() {
	var lost []func(error)
	ss.mu.Lock()
	for u := range ss.unread {
		if !ss.beingWrittenLocked(u) {
			lost = append(lost, u.written)
			delete(ss.unread, u)
		}
	}
	ss.mu.Unlock()
	for _, f := range lost {
		f(ErrNeverRead)
	}
}

// beingWrittenLocked reports whether a writer holds a stream that still
// holds u.
func (ss *ServerSession) beingWrittenLocked(u *unreadAnswer) bool {
	for _, st := range u.streams {
		if st.writer != 0 && len(st.events) > 0 {
			return true
		}
	}
	return false
}

// reports runs reports on goroutines of their own and waits for them. A
// WaitGroup will not do: a report may start while Close waits, which a
// WaitGroup forbids once its count may be zero.
type reports struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n falls to zero; made by wait
}

// run runs f on a goroutine that wait waits for.
func (r *reports) run(f func()) {
	r.mu.Lock()
	r.n++
	r.mu.Unlock()
	go func() {
		defer r.finish()
		f()
	}()
}

func (r *reports) finish() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n--; r.n == 0 && r.idle != nil {
		close(r.idle)
		r.idle = nil
	}
}

// wait returns once no report runs.
func (r *reports) wait() {
	r.mu.Lock()
	if r.n == 0 {
		r.mu.Unlock()
		return
	}
	if r.idle == nil {
		r.idle = make(chan struct{})
	}
	idle := r.idle
	r.mu.Unlock()
	<-idle
}
