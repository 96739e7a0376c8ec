package streamhttp

import "errors"

// ErrNeverRead is why an answer that WriteAnswer took never reached the
// client: its session ended first.
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
}

// holdUnreadLocked keeps track of an answer on p's streams, and returns
// the callback its events call once written to the client.
func (ss *ServerSession) holdUnreadLocked(p *pendingRequest, written func(error)) func() {
	u := &unreadAnswer{written: written, streams: p.streams}
	if ss.unread == nil {
		ss.unread = make(map[*unreadAnswer]struct{})
	}
	ss.unread[u] = struct{}{}
	return func() {
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
