package streamhttp

import (
	"net/http"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// awaitOpened holds the headers of the SSE response to the initialize
// that opened ss until they can tell whether the session is open, and
// then sets its Mcp-Session-Id if it is. MCP gives the id "on the HTTP
// response containing the InitializeResult" (2025-03-26 and later,
// basic/transports, "Session Management"), and a session whose
// initialize fails ends at once (route): its id would only earn a 404.
//
// What the upstream sends before its answer, such as logging or
// progress, waits on the stream and goes first, in order, once the
// headers do. A request of the upstream's (a ping) does not wait: the
// client needs the id to answer it, and the upstream may await that
// answer before its own, so the headers go then, with the id. It
// reports false if the client went first.
func (s *Server) awaitOpened(w http.ResponseWriter, r *http.Request, ss *ServerSession, st *stream) bool {
	var seen int64 // st's events looked at
	for {
		ss.mu.Lock()
		open, known := ss.openedLocked(st, &seen)
		notify := st.notify
		ss.mu.Unlock()
		if known {
			if open {
				ss.nameTo(w)
			}
			return true
		}
		// The answer always comes: from the proxy, or from endPending
		// once it stops.
		select {
		case <-notify:
		case <-r.Context().Done():
			return false
		}
	}
}

// openedLocked reports, for awaitOpened, whether the session is open,
// and whether that is known yet: once st has its answer, or holds a
// request of the server's, which the client can only answer in the
// session. seen counts the events of st already looked at.
func (ss *ServerSession) openedLocked(st *stream, seen *int64) (open, known bool) {
	if st.done {
		return ss.opened, true
	}
	for _, ev := range st.events {
		if ev.seq < *seen {
			continue
		}
		*seen = ev.seq + 1
		if m, err := jsonrpc.Decode(ev.data); err == nil && m.IsRequest() {
			return true, true
		}
	}
	return false, false
}

// nameTo sets the session id on w, the response that opens the session,
// and notes that a client can now name the session.
func (ss *ServerSession) nameTo(w http.ResponseWriter) {
	w.Header().Set(headerSessionID, ss.id)
	ss.mu.Lock()
	ss.named = true
	ss.mu.Unlock()
}

// endUnnamed ends ss if st is the stream of the initialize that opened
// it and no response has carried its id: the client went first, and no
// client can name the session. Else it would hold its upstream, and a
// place among MaxSessions, until the idle timeout; a client whose
// initialize timed out and that tries again would find every place taken
// by the sessions of its own earlier tries.
func (s *Server) endUnnamed(ss *ServerSession, st *stream) {
	if st == nil || !st.opens {
		return
	}
	ss.mu.Lock()
	named := ss.named
	ss.mu.Unlock()
	if named || ss.closed() {
		return
	}
	s.log.Info("session ended: its client went before the answer to its initialize", "session", ss.id)
	ss.closeFor(EndInitLeft)
	s.mu.Lock()
	delete(s.sessions, ss.id)
	s.mu.Unlock()
}
