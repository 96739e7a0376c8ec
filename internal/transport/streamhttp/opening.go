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
				w.Header().Set(headerSessionID, ss.id)
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
