package streamhttp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
)

// renameLocked gives a request of a stateless lane, whose id is id in
// body, the lane's next id, and its progress token (if any) a name of
// the lane's: the requests of many clients share the lane, and their own
// ids may clash. The client's id and token are kept, to be given back in
// what answers the request. It returns the renamed body, id and token.
func (s *Server) renameLocked(ss *ServerSession, body []byte, id json.RawMessage, token string) ([]byte, string, string) {
	ss.nextID++
	n := strconv.FormatInt(ss.nextID, 10)
	newID := json.RawMessage(strconv.Quote("h" + n))
	ss.origIDs[string(newID)] = bytes.Clone(id) // the client's body need not live as long
	body = jsonrpc.Replace(body, id, newID)
	// Renamed with --json-response too, where no progress reaches the
	// client: the upstream must still see one token per request under
	// way, and clients' tokens clash as their ids do.
	if token != "" {
		if rm, err := jsonrpc.Decode(body); err == nil {
			newToken := strconv.Quote("p" + n)
			if !s.opts.JSONResponse { // else nothing routes progress (registerLocked)
				ss.origTokens[newToken] = json.RawMessage(token)
			}
			body = jsonrpc.Replace(body, requestTokenValue(rm.Params), json.RawMessage(newToken))
			token = newToken
		}
	}
	return body, string(newID), token
}

// ClientID returns the id the client sent for the request the proxy
// reads under key (its jsonrpc.IDKey), if the lane renamed it and it is
// still owed an answer; else nil. The lane's id is unique on the lane
// but means nothing to the client, so evidence (the journal, logs,
// traces) names the request by this one.
func (ss *ServerSession) ClientID(key string) json.RawMessage {
	if !ss.stateless {
		return nil
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.origIDs[key]
}

// cancel tells the proxy the client of a stateless lane gave up on ids.
// Their answers are owed no more, but the proxy may not have read the
// requests yet: it still names them by their clients' ids (leaving)
// until it reads their cancellations.
func (ss *ServerSession) cancel(ids []string) {
	ss.mu.Lock()
	var gone []string
	for _, id := range ids {
		if p := ss.pending[id]; p != nil {
			gone = append(gone, id)
			delete(ss.pending, id)
			ss.dropTokenLocked(p)
			for _, st := range p.streams {
				ss.oweOneLessLocked(st)
			}
			ss.leaving[id] = p
		}
	}
	ss.mu.Unlock()
	for _, id := range gone {
		n := jsonrpc.NewRequest(nil, "notifications/cancelled", json.RawMessage(`{"requestId":`+id+`,"reason":"the client closed the request"}`))
		select {
		case ss.in <- inFrame{frame: n, forget: []string{id}}:
		case <-ss.done:
			return // endPending lets go of them
		}
	}
}

// answerServerRequest answers m, a request of the server's that no
// client can answer, in the client's place: else the server would wait
// on it for ever. A ping is answered, as the proxy is the peer it pings;
// anything else gets an error at once, whose message says why no client
// could take it (refusal, with %q for the method).
func (ss *ServerSession) answerServerRequest(m *jsonrpc.Message, refusal string) {
	var reply []byte
	if m.Method == "ping" {
		reply = jsonrpc.NewResponse(m.ID, json.RawMessage(`{}`))
	} else {
		ss.srv.log.Debug("a request of the server's no client can answer was refused", "session", ss.id, "method", m.Method)
		reply = jsonrpc.NewErrorResponse(m.ID, &jsonrpc.Error{
			Code:    jsonrpc.CodeMethodNotFound,
			Message: fmt.Sprintf(refusal, m.Method),
		})
	}
	go func() {
		select {
		case ss.in <- inFrame{frame: reply}:
		case <-ss.done:
		}
	}()
}

// laneStreamLocked returns the stream for m, a notification the server
// starts on a stateless lane, and its frame for that stream; or nil. It
// goes on the stream of the request it relates to: the one the proxy
// names (related), or the subscriptions/listen whose id its
// _meta.subscriptionId holds, given back as the client wrote it. Else it
// goes nowhere. The lane's requests are those of many clients, each of
// which may read only what relates to its own (spec 2026-07-28): the
// newest stream open may be another client's, and a lane has no GET
// stream.
func (ss *ServerSession) laneStreamLocked(m *jsonrpc.Message, related string) (*stream, []byte) {
	if st := ss.relatedStreamLocked(related); st != nil {
		return st, m.Raw
	}
	id, err := subscriptionID(m.Params)
	key := string(jsonrpc.IDKey(id))
	st := ss.relatedStreamLocked(key)
	if err != nil || id == nil || st == nil || ss.origIDs[key] == nil {
		ss.srv.log.Debug("a notification of the server's that names no request under way was dropped: a stateless lane has no stream for it", "lane", ss.id, "method", m.Method)
		return nil, nil
	}
	return st, jsonrpc.Replace(m.Raw, id, ss.origIDs[key])
}

// laneCancelledLocked carries m, a notifications/cancelled of the
// server's on a stateless lane, to the lane's request it names, and
// reports whether one was named. A stdio server so ends a 2026-07-28
// subscriptions/listen: the client reads it on that request's stream,
// under its own id, and the stream ends, as no answer is coming. The
// lane answers the server's own requests itself, so the id can name no
// request of the server's.
func (ss *ServerSession) laneCancelledLocked(m *jsonrpc.Message) bool {
	id, err := jsonrpc.CancelledID(m.Params)
	if err != nil || id == nil {
		return false
	}
	key := string(jsonrpc.IDKey(id))
	p := ss.pending[key]
	if p == nil || ss.origIDs[key] == nil {
		return false
	}
	frame := jsonrpc.Replace(m.Raw, id, ss.origIDs[key])
	delete(ss.pending, key)
	delete(ss.origIDs, key)
	ss.dropTokenLocked(p)
	for _, st := range p.streams {
		ss.appendLocked(st, frame)
		if st.want--; st.want == 0 {
			ss.endLocked(st)
		}
	}
	return true
}

// laneAnswerLocked returns m, the answer to the lane's request under key,
// under the client's own id. A subscriptions/listen's result names its
// request in _meta too (subscriptionId): that is given back as well.
func (ss *ServerSession) laneAnswerLocked(m *jsonrpc.Message, key string) []byte {
	orig := ss.origIDs[key]
	frame := jsonrpc.Replace(m.Raw, m.ID, orig)
	if m.Result == nil || !bytes.Contains(m.Result, []byte(mcp.MetaSubscriptionID)) {
		return frame // the common case, with no decoding again
	}
	a, err := jsonrpc.Decode(frame)
	if err != nil {
		return frame
	}
	id, err := subscriptionID(a.Result)
	if err != nil || id == nil || string(jsonrpc.IDKey(id)) != key {
		return frame
	}
	return jsonrpc.Replace(frame, id, orig)
}

// subscriptionID returns obj._meta.subscriptionId, or nil. Either given
// twice, or in another case, is an error: a client may read the other.
func subscriptionID(obj json.RawMessage) (json.RawMessage, error) {
	meta, err := jsonrpc.MemberOnce(obj, "_meta")
	if err != nil {
		return nil, err
	}
	return jsonrpc.MemberOnce(meta, mcp.MetaSubscriptionID)
}
