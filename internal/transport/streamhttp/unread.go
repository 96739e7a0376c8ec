package streamhttp

// An unreadAnswer is an answer whose writing WriteAnswer is to report:
// written(true) once it reaches the client, or written(false) once it
// never can.
type unreadAnswer struct {
	written func(bool)
	streams []*stream // the streams that hold it
}

// holdUnreadLocked keeps track of an answer on p's streams, and returns
// the callback its events call once written to the client.
func (ss *ServerSession) holdUnreadLocked(p *pendingRequest, written func(bool)) func() {
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
			f(true)
		}
	}
}

// dropUnread reports as never written the answers the client has not read
// once the session is gone, and no request can resume a stream of it:
// evicted, on a stream the client gave up, or held for a resume that did
// not come. An answer on a stream that a writer may be writing still is
// not reported either way: it may yet reach the client.
func (ss *ServerSession) dropUnread() {
	var lost []func(bool)
	ss.mu.Lock()
	for u := range ss.unread {
		if !ss.beingWrittenLocked(u) {
			lost = append(lost, u.written)
			delete(ss.unread, u)
		}
	}
	ss.mu.Unlock()
	for _, f := range lost {
		f(false)
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
