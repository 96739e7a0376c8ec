package streamhttp

import "errors"

// ErrNeverRead is why an answer that WriteAnswer took never reached the
// client: its session ended first, or the session's buffer dropped it
// before the client read or resumed it.
var ErrNeverRead = errors.New("the client never read it: its session ended first")

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
// of its events is held and no writer holds one of its streams (a writer
// that took the event reports it, or, failing, leaves it to release).
func (ss *ServerSession) dropLostLocked(u *unreadAnswer) {
	if _, ok := ss.unread[u]; !ok || u.held > 0 {
		return
	}
	for _, st := range u.streams {
		if st.writer != 0 {
			return
		}
	}
	delete(ss.unread, u)
	f := u.written
	u.written, u.streams = nil, nil
	// Not under ss.mu: what waits on the answer may write to the session.
	go f(ErrNeverRead)
}

// dropLostOfLocked is dropLostLocked for the unread answers st holds, once
// its writer lets go of it.
func (ss *ServerSession) dropLostOfLocked(st *stream) {
	for u := range ss.unread {
		if u.held == 0 && holds(u.streams, st) {
			ss.dropLostLocked(u)
		}
	}
}

func holds(streams []*stream, st *stream) bool {
	for _, s := range streams {
		if s == st {
			return true
		}
	}
	return false
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
