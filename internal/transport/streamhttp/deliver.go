package streamhttp

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// primingVersion is the first protocol version whose clients expect an
// SSE stream to open with an event that has an id and no data, so they
// can resume a stream that breaks before its first message (SEP-1699).
const primingVersion = "2025-11-25"

// deliver passes a POST's messages to the session and answers: 202 when
// they hold no request, else the answers, as an SSE stream or JSON.
func (s *Server) deliver(w http.ResponseWriter, r *http.Request, ss *ServerSession, body []byte, msgs []*jsonrpc.Message) {
	var st *stream
	var ids []string // the requests' ids as the proxy sees them
	ss.mu.Lock()
	if ss.ended {
		// The session stopped after the request found it: nothing would
		// answer it.
		ss.mu.Unlock()
		writeRefusal(w, refuse(http.StatusNotFound, "session %q has ended: initialize a new one", ss.id), jsonrpc.CodeInvalidRequest)
		return
	}
	if !ss.stateless {
		for _, m := range msgs {
			p := ss.pending[string(jsonrpc.IDKey(m.ID))]
			if !m.IsRequest() || p == nil {
				continue
			}
			if len(msgs) != 1 || string(p.frame) != string(body) {
				ss.mu.Unlock()
				// Under a null id: an error under this id would be taken
				// for the answer to the request that holds it.
				writeRefusal(w, refuse(http.StatusBadRequest, "request id %s is already in use in this session by another request", m.ID), jsonrpc.CodeInvalidRequest)
				return
			}
			// The client sent again a request still being answered (it
			// lost the stream and did not resume): it gets the one answer
			// on this new stream, and the request is not passed on twice.
			// The old stream gets the answer too, for a client that also
			// resumes it.
			st = s.newPostStreamLocked(r, ss)
			st.want = 1
			p.streams = append(p.streams, st)
			if p.token != "" {
				ss.progress[p.token] = st
			}
			ss.mu.Unlock()
			s.log.Debug("a request sent again attaches to its answer", "session", ss.id, "id", string(m.ID))
			s.answer(w, r, ss, st)
			return
		}
		for _, m := range msgs {
			var c struct {
				RequestID json.RawMessage `json:"requestId"`
			}
			if m.Method != "notifications/cancelled" || json.Unmarshal(m.Params, &c) != nil {
				continue
			}
			key := string(jsonrpc.IDKey(c.RequestID))
			if p := ss.pending[key]; p != nil {
				delete(ss.pending, key)
				if p.token != "" {
					delete(ss.progress, p.token)
				}
				// No answer comes to a cancelled request: its streams
				// owe one less, and end if that was the last.
				for _, st := range p.streams {
					if st.want--; st.want == 0 {
						ss.endLocked(st)
					}
				}
			}
		}
	}
	for _, m := range msgs {
		if !m.IsRequest() {
			continue
		}
		key := string(jsonrpc.IDKey(m.ID)) // as the proxy and the upstream match it
		token := progressToken(m.Params)
		if ss.stateless {
			ss.nextID++
			n := strconv.FormatInt(ss.nextID, 10)
			newID := json.RawMessage(strconv.Quote("h" + n))
			ss.origIDs[string(newID)] = m.ID
			body = withID(body, m.ID, newID)
			key = string(newID)
			if token != "" && !s.opts.JSONResponse {
				if rm, err := jsonrpc.Decode(body); err == nil {
					newToken := strconv.Quote("p" + n)
					ss.origTokens[newToken] = json.RawMessage(token)
					body = withID(body, progressTokenValue(rm.Params), json.RawMessage(newToken))
					token = newToken
				}
			}
		}
		if st == nil {
			st = s.newPostStreamLocked(r, ss)
		}
		st.want++
		p := &pendingRequest{streams: []*stream{st}, frame: body}
		if token != "" && !st.isJSON {
			p.token = token
			ss.progress[token] = st
		}
		ss.pending[key] = p
		ids = append(ids, key)
	}
	frame := body
	ss.mu.Unlock()

	select {
	case ss.in <- frame:
	case <-ss.done:
		ss.forget(ids)
		writeRefusal(w, refuse(http.StatusNotFound, "session %q has ended: initialize a new one", ss.id), jsonrpc.CodeInvalidRequest)
		return
	case <-r.Context().Done():
		ss.forget(ids)
		return
	}
	if st == nil {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	answered := s.answer(w, r, ss, st)
	if !answered && ss.stateless {
		// A stateless request's client cannot come back for its answer:
		// closing the request cancels it (SEP-2575). The proxy detaches
		// the caller; an execution under way runs to its end, and the
		// same call sent again attaches to it.
		ss.cancel(ids)
	}
}

// newPostStreamLocked makes the stream that answers a POST. An SSE stream
// for a client of 2025-11-25 or later opens with a priming event, an id
// and no data, so the client can resume the stream even if it breaks
// before the first message; it is held before the request goes to the
// proxy, so it comes first.
func (s *Server) newPostStreamLocked(r *http.Request, ss *ServerSession) *stream {
	st := ss.newStreamLocked()
	st.isJSON = s.opts.JSONResponse
	if v := r.Header.Get(headerProtocolVersion); !st.isJSON && !ss.stateless && v >= primingVersion {
		ss.appendLocked(st, nil)
	}
	return st
}

// forget drops requests that never reached the proxy, or whose client
// gave up on them; a stream left owed nothing ends, and goes at once if it
// holds no event (a stateless lane lives as long as the proxy: its streams
// must not).
func (ss *ServerSession) forget(ids []string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, id := range ids {
		if p := ss.pending[id]; p != nil {
			if p.token != "" {
				delete(ss.progress, p.token)
				delete(ss.origTokens, p.token)
			}
			for _, st := range p.streams {
				if st.want--; st.want == 0 {
					ss.endLocked(st)
					if len(st.events) == 0 && st != ss.get {
						delete(ss.streams, st.num)
					}
				}
			}
		}
		delete(ss.pending, id)
		delete(ss.origIDs, id)
	}
}

// cancel tells the proxy the client of a stateless lane gave up on ids.
func (ss *ServerSession) cancel(ids []string) {
	ss.mu.Lock()
	var gone []string
	for _, id := range ids {
		if ss.pending[id] != nil {
			gone = append(gone, id)
		}
	}
	ss.mu.Unlock()
	ss.forget(gone)
	for _, id := range gone {
		n := jsonrpc.NewRequest(nil, "notifications/cancelled", json.RawMessage(`{"requestId":`+id+`,"reason":"the client closed the request"}`))
		select {
		case ss.in <- n:
		case <-ss.done:
			return
		}
	}
}
