package streamhttp

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// primingVersion is the first protocol version whose clients expect an
// SSE stream to open with an event that has an id and no data, so they
// can resume a stream that breaks before its first message (SEP-1699).
const primingVersion = "2025-11-25"

// deliver passes a POST's messages to the session and answers: 202 when
// they hold no request, else the answers, as an SSE stream or JSON.
func (s *Server) deliver(w http.ResponseWriter, r *http.Request, ss *ServerSession, body []byte, msgs []*jsonrpc.Message) {
	ss.mu.Lock()
	if ss.ended {
		// The session stopped after the request found it: nothing would
		// answer it.
		ss.mu.Unlock()
		writeRefusal(w, refuse(http.StatusNotFound, "session %q has ended: initialize a new one", ss.id), jsonrpc.CodeInvalidRequest)
		return
	}
	if !ss.stateless {
		if m, p := ss.pendingAmongLocked(msgs); p != nil {
			st := s.attachLocked(r, ss, body, msgs, p)
			ss.mu.Unlock()
			defer ss.leave(st)
			s.answerResent(w, r, ss, m, st)
			return
		}
	} else if isCancelNotice(msgs) {
		// A stateless client cancels by closing its request. Its own
		// ids were renamed, so a notice names no request of its; one
		// naming a lane id would cancel another client's call.
		ss.mu.Unlock()
		s.log.Debug("a cancel notice posted on a stateless lane is not passed on", "lane", ss.id)
		w.WriteHeader(http.StatusAccepted)
		return
	}
	if herr := s.admitLocked(ss, msgs); herr != nil {
		ss.mu.Unlock()
		writeRefusal(w, herr, jsonrpc.CodeInternalError)
		return
	}
	frame, st, ids := s.registerLocked(r, ss, body, msgs)
	if !ss.stateless {
		// Once msgs' own requests are owed: a batch may cancel one.
		ss.dropCancelledLocked(msgs)
	}
	ss.mu.Unlock()
	defer ss.leave(st)
	if !s.pass(w, r, ss, frame, ids) {
		s.endUnnamed(ss, st)
		return
	}
	if st == nil {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	answered := s.answer(w, r, ss, st)
	if !answered {
		s.endUnnamed(ss, st)
	}
	if !answered && ss.stateless {
		// A stateless request's client cannot come back for its answer:
		// closing the request cancels it (SEP-2575). The proxy detaches
		// the caller; an execution under way runs to its end, and the
		// same call sent again attaches to it.
		ss.cancel(ids)
	}
}

// admitLocked refuses msgs, before anything in them is sent, when the
// session could not hold all the answers it would then owe: those of its
// requests under way, those pinned until their streams are written
// (appendAnswerLocked) or being written to a client that may not read
// them, and one for each request of msgs. Unbounded,
// pinned answers would fill memory; evicted, they would be lost. Pinned
// answers past EventBufferBytes refuse every request until they are
// written. A stateless lane is not bounded so: each of its requests has
// a POST of its own, which pins at most its one answer.
func (s *Server) admitLocked(ss *ServerSession, msgs []*jsonrpc.Message) *httpError {
	n := countRequests(msgs)
	if ss.stateless || n == 0 {
		return nil
	}
	owed := len(ss.pending) + ss.pinned + ss.writing
	unread := ss.pinnedBytes + ss.writingBytes
	var e *httpError
	switch {
	case owed+n > s.opts.EventBuffer:
		e = refuse(http.StatusServiceUnavailable, "the session owes %d answers not yet read, and a session owes at most %d at once: these %d requests were not sent; read the answers under way, then send them again", owed, s.opts.EventBuffer, n)
	case unread > s.opts.EventBufferBytes:
		e = refuse(http.StatusServiceUnavailable, "the answers the session holds not yet read come to %d bytes, more than %d: these requests were not sent; read the answers under way, then send them again", unread, s.opts.EventBufferBytes)
	default:
		return nil
	}
	e.header = http.Header{"Retry-After": {"1"}}
	return e
}

// leave marks st, the stream of a POST whose handler returns, as no
// longer attended unless a client resumed it (unattendLocked).
func (ss *ServerSession) leave(st *stream) {
	if st == nil {
		return
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.unattendLocked(st)
}

// isCancelNotice reports whether msgs are one notifications/cancelled.
func isCancelNotice(msgs []*jsonrpc.Message) bool {
	return len(msgs) == 1 && msgs[0].IsNotification() && msgs[0].Method == "notifications/cancelled"
}

// pendingAmongLocked returns the first request of msgs whose id the
// session still owes an answer for, and what it owes, or nil.
func (ss *ServerSession) pendingAmongLocked(msgs []*jsonrpc.Message) (*jsonrpc.Message, *pendingRequest) {
	for _, m := range msgs {
		if p := ss.pending[string(jsonrpc.IDKey(m.ID))]; m.IsRequest() && p != nil {
			return m, p
		}
	}
	return nil, nil
}

// attachLocked gives the request pending as p one more stream, made for
// this POST, if the POST is that request sent again, alone: the client
// lost the stream and did not resume it. Else it returns nil.
func (s *Server) attachLocked(r *http.Request, ss *ServerSession, body []byte, msgs []*jsonrpc.Message, p *pendingRequest) *stream {
	if len(msgs) != 1 || string(p.frame) != string(body) {
		return nil
	}
	st := s.newPostStreamLocked(r, ss, body)
	st.want = 1
	p.streams = append(p.streams, st)
	if p.token != "" {
		ss.progress[p.token] = st
	}
	return st
}

// answerResent answers a POST that holds request m, whose id the session
// still owes an answer for. Sent again as it was (st, from attachLocked),
// it gets the one answer on its new stream, and the request is not passed
// on twice; the old stream gets the answer too, for a client that also
// resumes it. Another request under an id in use is refused.
func (s *Server) answerResent(w http.ResponseWriter, r *http.Request, ss *ServerSession, m *jsonrpc.Message, st *stream) {
	if st == nil {
		// Under a null id: an error under this id would be taken
		// for the answer to the request that holds it.
		writeRefusal(w, refuse(http.StatusBadRequest, "request id %s is already in use in this session by another request", m.ID), jsonrpc.CodeInvalidRequest)
		return
	}
	s.log.Debug("a request sent again attaches to its answer", "session", ss.id, "id", string(m.ID))
	s.answer(w, r, ss, st)
}

// dropCancelledLocked forgets the requests that the
// notifications/cancelled among msgs name: those of earlier POSTs, and
// those msgs hold before the cancellation. No answer comes to a
// cancelled request: its streams owe one less, and end if that was the
// last. One that msgs hold after the cancellation is not cancelled: the
// upstream reads the cancellation first, when no such request is under
// way, and answers the request.
func (ss *ServerSession) dropCancelledLocked(msgs []*jsonrpc.Message) {
	var ahead map[string]bool // ids of msgs' requests not yet reached
	for _, m := range msgs {
		if m.IsRequest() && len(msgs) > 1 {
			if ahead == nil {
				ahead = make(map[string]bool)
			}
			ahead[string(jsonrpc.IDKey(m.ID))] = true
		}
	}
	for _, m := range msgs {
		if m.IsRequest() {
			delete(ahead, string(jsonrpc.IDKey(m.ID)))
			continue
		}
		if m.Method != "notifications/cancelled" {
			continue
		}
		// Read as the proxy reads it: one it refuses as naming two
		// requests ("RequestId") cancels nothing here either, and the
		// request's answer still comes.
		id, err := jsonrpc.CancelledID(m.Params)
		if err != nil || id == nil {
			continue
		}
		key := string(jsonrpc.IDKey(id))
		p := ss.pending[key]
		if p == nil || ahead[key] {
			continue
		}
		delete(ss.pending, key)
		ss.dropTokenLocked(p)
		for _, st := range p.streams {
			ss.oweOneLessLocked(st)
		}
	}
}

// registerLocked records each request of msgs as owed an answer on one
// stream made for the POST, and routes its progress there. It returns
// the frame to pass to the proxy (on a stateless lane, under the ids the
// lane gave), the stream (nil when msgs hold no request), and the
// requests' ids as the proxy sees them.
func (s *Server) registerLocked(r *http.Request, ss *ServerSession, body []byte, msgs []*jsonrpc.Message) ([]byte, *stream, []string) {
	var st *stream
	var ids []string
	for _, m := range msgs {
		if !m.IsRequest() {
			continue
		}
		key := string(jsonrpc.IDKey(m.ID)) // as the proxy and the upstream match it
		token := progressToken(m.Params)
		if ss.stateless {
			body, key, token = s.renameLocked(ss, body, m.ID, token)
		}
		if st == nil {
			st = s.newPostStreamLocked(r, ss, body)
		}
		st.want++
		p := &pendingRequest{streams: []*stream{st}, frame: body, id: bytes.Clone(m.ID)}
		p.opens, ss.opening = ss.opening && m.Method == "initialize", false
		st.opens = st.opens || p.opens
		p.traceparent, p.tracestate = traceHeaders(r.Header)
		if token != "" && !st.isJSON {
			p.token = string(jsonrpc.IDKey([]byte(token)))
			ss.progress[p.token] = st
			if !ss.stateless { // renameLocked kept the client's
				ss.origTokens[p.token] = json.RawMessage(token)
			}
		}
		ss.pending[key] = p
		ids = append(ids, key)
	}
	return body, st, ids
}

// pass hands frame to the proxy. If the session ends first the client
// gets a 404, if the client goes first nothing; either way the requests'
// ids are forgotten. It reports whether the proxy has the frame.
func (s *Server) pass(w http.ResponseWriter, r *http.Request, ss *ServerSession, frame []byte, ids []string) bool {
	select {
	case ss.in <- inFrame{frame: frame}:
		return true
	case <-ss.done:
		ss.forget(ids)
		writeRefusal(w, refuse(http.StatusNotFound, "session %q has ended: initialize a new one", ss.id), jsonrpc.CodeInvalidRequest)
		return false
	case <-r.Context().Done():
		if ss.forgetUnlessResent(ids) {
			return false
		}
	}
	// A client sent a request of frame again meanwhile, and waits on the
	// one answer (attachLocked): the frame still goes to the proxy, for
	// it.
	select {
	case ss.in <- inFrame{frame: frame}:
		return true
	case <-ss.done:
		ss.forget(ids)
		return false
	}
}

// forgetUnlessResent forgets ids, as forget does, unless a request of
// them has a stream besides that of the POST that holds it: the same
// request sent again. It reports whether it forgot them.
func (ss *ServerSession) forgetUnlessResent(ids []string) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, id := range ids {
		if p := ss.pending[id]; p != nil && len(p.streams) > 1 {
			return false
		}
	}
	ss.forgetLocked(ids)
	return true
}

// newPostStreamLocked makes the stream that answers a POST of body. An
// SSE stream for a client of 2025-11-25 or later opens with a priming
// event, an id and no data, so the client can resume the stream even if
// it breaks before the first message; it is held before the request goes
// to the proxy, so it comes first.
func (s *Server) newPostStreamLocked(r *http.Request, ss *ServerSession, body []byte) *stream {
	st := ss.newStreamLocked()
	st.attended = true // until its handler returns (leave)
	st.isJSON = s.opts.JSONResponse
	st.isBatch = isBatch(body)
	if v := r.Header.Get(headerProtocolVersion); !st.isJSON && !ss.stateless && v >= primingVersion {
		ss.appendLocked(st, nil)
	}
	return st
}

// forget drops requests that never reached the proxy, or whose client
// gave up on them (oweOneLessLocked).
func (ss *ServerSession) forget(ids []string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.forgetLocked(ids)
}

func (ss *ServerSession) forgetLocked(ids []string) {
	for _, id := range ids {
		if p := ss.pending[id]; p != nil {
			ss.dropTokenLocked(p)
			for _, st := range p.streams {
				ss.oweOneLessLocked(st)
			}
		}
		delete(ss.pending, id)
		delete(ss.origIDs, id)
	}
}

// oweOneLessLocked takes one request off those st owes an answer to. A
// stream owed nothing more ends, and goes at once if it holds no event:
// no client has an id of it to resume from, and eviction, which lets go
// of the others, never comes to it. Else a session would keep one for
// each request cancelled, or given up, for as long as it lasts (a
// stateless lane as long as the proxy).
func (ss *ServerSession) oweOneLessLocked(st *stream) {
	if st.want--; st.want != 0 {
		return
	}
	ss.endLocked(st)
	if len(st.events) == 0 && st != ss.get {
		delete(ss.streams, st.num)
	}
}
