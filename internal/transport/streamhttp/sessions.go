package streamhttp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"time"
)

// startSession opens a session for an initialize request.
func (s *Server) startSession(actor, remote string) (*ServerSession, *httpError) {
	var b [16]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, refuse(http.StatusServiceUnavailable, "the proxy is shutting down")
	}
	if s.running >= s.opts.MaxSessions {
		// Clients that never send DELETE leave their sessions, and
		// their upstreams, until the idle timeout: the one idle longest
		// makes room for the retry this answer asks for.
		if ss := s.idlestLocked(); ss != nil {
			delete(s.sessions, ss.id)
			s.log.Info("session ended to make room for a new one", "session", ss.id, "max_sessions", s.opts.MaxSessions)
			ss.closeFor(EndEvicted)
		}
		e := refuse(http.StatusServiceUnavailable, "too many sessions: %d are open or still stopping their upstream (--max-sessions); end one with DELETE or wait for one to sit idle", s.running)
		e.header = http.Header{"Retry-After": {"5"}}
		return nil, e
	}
	ss := newServerSession(s, id, actor, remote, false)
	ss.opening = true
	s.sessions[id] = ss
	s.running++
	s.run(ss, func() { delete(s.sessions, id); s.running-- })
	s.log.Info("session started", "session", id, "actor", actor)
	return ss, nil
}

// lane returns the stateless lane of actor, opening it on first use.
func (s *Server) lane(actor, remote string) (*ServerSession, *httpError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, refuse(http.StatusServiceUnavailable, "the proxy is shutting down")
	}
	if ss := s.lanes[actor]; ss != nil && !ss.closed() {
		return ss, nil
	}
	ss := newServerSession(s, "stateless:"+actor, actor, remote, true)
	s.lanes[actor] = ss
	s.run(ss, func() {
		if s.lanes[actor] == ss {
			delete(s.lanes, actor)
		}
	})
	return ss, nil
}

// run starts Open for ss; once it returns, the session is closed and
// forget (called under s.mu) removes it. Called under s.mu.
func (s *Server) run(ss *ServerSession, forget func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		err := s.opts.Open(s.ctx, ss)
		if err != nil {
			s.log.Warn("session ended", "session", ss.id, "err", err)
		} else {
			s.log.Debug("session ended", "session", ss.id)
		}
		ss.endPending()
		ss.close()
		s.mu.Lock()
		forget()
		s.mu.Unlock()
		// No request can reach its streams now.
		ss.dropUnread()
	}()
}

// lookup returns the session the request names, checking that it belongs
// to actor; another actor's session is as unknown as one that never was.
// A session that has ended is unknown too, but to a client resuming a
// stream while the session winds down (serve stopping): its calls under
// way are still answered, and the answers go to the streams that ask.
func (s *Server) lookup(r *http.Request, actor string) (*ServerSession, *httpError) {
	id := r.Header.Get(headerSessionID)
	s.mu.Lock()
	ss := s.sessions[id]
	s.mu.Unlock()
	resuming := r.Method == http.MethodGet && r.Header.Get(headerLastEventID) != ""
	if ss == nil || ss.actor != actor || ss.closed() && !resuming {
		return nil, refuse(http.StatusNotFound, "session %q is unknown or has ended: initialize a new one", id)
	}
	return ss, nil
}

// begin and end bracket each HTTP request for the session: the reaper
// ends no session with a request under way, and counts its idle time
// from the end of the last one.
func (ss *ServerSession) begin() {
	ss.mu.Lock()
	ss.active++
	ss.mu.Unlock()
}

func (ss *ServerSession) end() {
	ss.mu.Lock()
	ss.active--
	ss.lastActive = ss.srv.now()
	ss.mu.Unlock()
}

// Reap ends the sessions that have sat idle for longer than IdleTimeout:
// no request under way, so no stream open either (goneLocked).
func (s *Server) Reap() {
	now := s.now()
	s.mu.Lock()
	var idle []*ServerSession
	for _, ss := range s.sessions {
		if ss.idleLocked(now) {
			idle = append(idle, ss)
			delete(s.sessions, ss.id)
		}
	}
	// A stateless lane too: it holds an upstream for its actor, and an
	// actor that has gone would keep it for as long as serve runs. The
	// actor's next request opens a new one.
	for actor, ss := range s.lanes {
		if ss.idleLocked(now) {
			idle = append(idle, ss)
			delete(s.lanes, actor)
		}
	}
	s.mu.Unlock()
	for _, ss := range idle {
		s.log.Info("session ended after sitting idle", "session", ss.id, "idle_timeout", s.opts.IdleTimeout)
		ss.closeFor(EndIdle)
	}
}

// idleLocked reports whether ss has sat idle past the idle timeout. s.mu
// must be held.
func (ss *ServerSession) idleLocked(now time.Time) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.goneLocked() && now.Sub(ss.lastActive) > ss.srv.opts.IdleTimeout
}

// goneLocked reports whether the client of ss is gone: no HTTP request of
// its is under way, so no stream is open, the GET one or a POST's. For the
// idle timeout, answers it is still owed do not keep the session: an
// upstream that never answers would keep it, and its upstream, for as
// long as serve runs. A client that dropped a stream and resumes it
// (Last-Event-ID) within the idle timeout has a request under way again.
// A session already ending does not count: ending it again frees
// nothing. ss.mu must be held.
func (ss *ServerSession) goneLocked() bool {
	return ss.active == 0 && !ss.closed()
}

// idlestLocked returns the session that has sat idle longest, if it has
// for evictAfter at least: one that a client seems to have left. s.mu
// must be held.
func (s *Server) idlestLocked() *ServerSession {
	now := s.now()
	var idlest *ServerSession
	var since time.Time
	for _, ss := range s.sessions {
		ss.mu.Lock()
		// Not one owed an answer: a minute is too short for a client
		// whose stream broke during a long call to resume it, and the
		// session's end would stop the upstream running that call.
		if ss.goneLocked() && len(ss.pending) == 0 && now.Sub(ss.lastActive) >= evictAfter &&
			(idlest == nil || ss.lastActive.Before(since)) {
			idlest, since = ss, ss.lastActive
		}
		ss.mu.Unlock()
	}
	return idlest
}

// evictAfter is how long a session sits idle before a new session may
// take its place when MaxSessions are open.
const evictAfter = time.Minute

// RunReaper ends idle sessions until ctx is done, looking every tick.
func (s *Server) RunReaper(ctx context.Context, tick time.Duration) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.Reap()
		}
	}
}

// Sessions returns how many sessions are open, stateless lanes included.
func (s *Server) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions) + len(s.lanes)
}
