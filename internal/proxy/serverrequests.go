package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// A serverRequest is a request an upstream sent the client (sampling,
// elicitation, roots/list...) that the client has not answered yet.
type serverRequest struct {
	l  *link           // the upstream that sent it
	id json.RawMessage // its id as the upstream spelled it
	// clientID is the id the client knows it by: id itself from the
	// first upstream, which the proxy passes on untouched; an id of the
	// proxy's (serverPrefix) from one started again, whose ids start
	// from 1 again while the client may still hold an exited one's.
	clientID json.RawMessage
}

// renamed reports whether the client knows r under an id of the proxy's.
func (r serverRequest) renamed() bool { return r.l.gen > 1 }

// maxServerRequests bounds the upstream's requests a session holds open
// for the client's answer. A client that answers none of them (one that
// ignores roots/list, say) would otherwise make the session keep every
// one for as long as it lasts, as many as the upstream sends.
const maxServerRequests = 1024

// maxRefusing bounds the refusals of the upstream's requests not passed
// on to the client (askRefusalLocked) being written to it at once. An
// upstream that sends requests faster than the client answers them, or
// after the client's input has ended, may not read its input while it
// writes: a refusal written by the goroutine reading it would wait for
// it, and it for that goroutine. One past the bound is dropped, and
// logged: the upstream gets no answer to it, as from such a client.
const maxRefusing = 64

// askRefusalLocked returns why a request of the upstream's under id is
// not to be passed on to the client, or "": the client's input has
// ended, or it stopped reading, so no answer can come; or the client has maxServerRequests of
// them open (one under the id of an open one replaces it). s.mu must be
// held.
func (s *Session) askRefusalLocked(id json.RawMessage) (why string) {
	if s.asksRefused != "" {
		return s.asksRefused
	}
	if _, open := s.serverIDs[string(jsonrpc.IDKey(id))]; len(s.serverReqs) >= maxServerRequests && !open {
		return fmt.Sprintf("the client has not answered %d requests of the server's; this one was not passed on to it", maxServerRequests)
	}
	return ""
}

// refuseUnasked answers u, a request the upstream link l sent that is not
// passed on to the client, from a goroutine of its own, up to
// maxRefusing of them.
func (s *Session) refuseUnasked(l *link, u unaskedRequest) {
	if s.refusing.Add(1) > maxRefusing {
		s.refusing.Add(-1)
		s.log.Warn("dropped a request of the upstream's for the client, with as many refusals not yet read by the upstream", "id", string(u.id), "why", u.why)
		return
	}
	go func() {
		defer s.refusing.Add(-1)
		s.refuseServerRequest(l, u.id, u.why)
	}()
}

// Why a request of the upstream's gets no answer from the client once
// its input has ended, or once it stopped reading the proxy's output.
const (
	inputEnded     = "the client closed its input; no answer to this request can come"
	stoppedReading = "the client stopped reading the proxy's output; no answer to this request can come"
)

// An unaskedRequest is a request of the upstream's not passed on to the
// client, and why.
type unaskedRequest struct {
	id  json.RawMessage
	why string
}

// maxVoided bounds Session.voided: it serves the log only, since an
// answer to no open request is dropped once the upstream has restarted.
// It bounds Session.serverAnswered too: a second answer older than that many
// passes on, as one to a request the proxy never saw.
const maxVoided = 1024

// noteAnsweredLocked notes that the client answered the request it knows
// under key. s.mu must be held.
func (s *Session) noteAnsweredLocked(key string) {
	if len(s.serverAnswered) >= maxVoided {
		clear(s.serverAnswered)
	}
	s.serverAnswered[key] = struct{}{}
}

// againLocked reports whether the client answered the request under key
// already. s.mu must be held.
func (s *Session) againLocked(key string) bool {
	_, again := s.serverAnswered[key]
	return again
}

// answeredAgain says why a second answer to one request is dropped.
const answeredAgain = "dropped a second answer from the client to a request of the upstream's: the first was passed on"

// openServerRequestLocked notes m, a request the upstream link l sends
// the client, and returns m's frame as the client is to get it: as it
// came from the first upstream; under an id of the proxy's from a later
// one. s.mu must be held.
func (s *Session) openServerRequestLocked(l *link, m *jsonrpc.Message) []byte {
	r := serverRequest{l: l, id: bytes.Clone(m.ID)}
	frame := m.Raw
	if r.renamed() {
		s.relayed++
		var buf [64]byte
		b := append(buf[:0], s.serverPrefix...)
		b = strconv.AppendInt(append(strconv.AppendInt(b, int64(l.gen), 10), ':'), s.relayed, 10)
		r.clientID = bytes.Clone(append(b, '"'))
		frame = jsonrpc.Replace(m.Raw, m.ID, r.clientID)
	} else {
		r.clientID = r.id
	}
	key := string(jsonrpc.IDKey(r.clientID))
	s.serverReqs[key] = r
	s.serverIDs[string(jsonrpc.IDKey(r.id))] = key
	return frame
}

// closeServerRequestLocked forgets the open request under the client's
// key, answered or cancelled. s.mu must be held.
func (s *Session) closeServerRequestLocked(key string) (serverRequest, bool) {
	r, ok := s.serverReqs[key]
	if !ok {
		return r, false
	}
	delete(s.serverReqs, key)
	if uk := string(jsonrpc.IDKey(r.id)); s.serverIDs[uk] == key {
		delete(s.serverIDs, uk)
	}
	return r, true
}

// answerServer passes the client's answer m on to the upstream whose
// request it answers, under that upstream's id. An answer to a request
// of an upstream that has exited never reaches the one started in its
// place, which may have asked something else under the same id. An
// answer to no open request passes on as it came while the first
// upstream runs, as it would without the proxy; after a restart it is
// dropped, since no request of the running upstream's has its id. A
// second answer to one request is dropped: answers to HTTP go on POSTs
// of their own, and it could reach the server first.
func (s *Session) answerServer(m *jsonrpc.Message) {
	key := string(jsonrpc.IDKey(m.ID))
	s.mu.Lock()
	r, open := s.closeServerRequestLocked(key)
	_, void := s.voided[key]
	delete(s.voided, key)
	again := !open && s.againLocked(key)
	if open {
		s.noteAnsweredLocked(key)
	}
	l := s.up
	s.mu.Unlock()
	switch {
	case again:
		s.log.Warn(answeredAgain, "id", string(m.ID))
	case open && r.renamed():
		s.writeLink(r.l, jsonrpc.Replace(m.Raw, m.ID, r.id))
	case open:
		s.writeLink(r.l, m.Raw)
	case void:
		s.log.Info("dropped the client's answer to a request of an upstream that has exited", "id", string(m.ID))
	case l.gen > 1 || idHasPrefix(m.ID, s.serverPrefix):
		s.log.Warn("dropped an answer from the client to no open request of the upstream's", "id", string(m.ID))
	default:
		s.writeLink(l, m.Raw)
	}
}

// writeLink writes frame to the upstream link l, the one it is meant for,
// unless l has gone: never to another upstream.
func (s *Session) writeLink(l *link, frame []byte) {
	if closed(l.gone) {
		s.log.Debug("the upstream is not running; a message was dropped", "size", len(frame))
		return
	}
	s.mu.Lock()
	conn := l.conn // set by now: l sent the request, or is the first link
	s.mu.Unlock()
	if err := conn.WriteFrame(frame); err != nil {
		s.log.Debug("writing to the upstream", "err", err)
	}
}

// serverAnswersLocked readies the answers among msgs, a batch from the
// client going to the upstream link l, as answerServer does one: an
// answer to an open request of l's stays, under l's id; any other is
// taken out, but, while the first upstream runs, one to no open request.
// It returns the rest and its frame. s.mu must be held.
func (s *Session) serverAnswersLocked(l *link, msgs []*jsonrpc.Message, frame []byte) ([]*jsonrpc.Message, []byte) {
	var rest []*jsonrpc.Message
	var raws [][]byte
	changed := false
	for _, m := range msgs {
		raw := m.Raw
		if m.IsResponse() {
			key := string(jsonrpc.IDKey(m.ID))
			r, open := s.serverReqs[key]
			switch {
			case open && r.l == l:
				s.closeServerRequestLocked(key)
				s.noteAnsweredLocked(key)
				if r.renamed() {
					raw, changed = jsonrpc.Replace(m.Raw, m.ID, r.id), true
				}
			case !open && s.againLocked(key):
				s.log.Warn(answeredAgain, "id", string(m.ID))
				changed = true
				continue
			case open || l.gen > 1 || idHasPrefix(m.ID, s.serverPrefix):
				// open: sent by an upstream that has exited, and not yet
				// voided (voidServerRequests).
				if _, void := s.voided[key]; void || open {
					delete(s.voided, key)
					s.log.Info("dropped the client's answer to a request of an upstream that has exited", "id", string(m.ID))
				} else {
					s.log.Warn("dropped an answer from the client to no open request of the upstream's", "id", string(m.ID))
				}
				changed = true
				continue
			}
		}
		rest, raws = append(rest, m), append(raws, raw)
	}
	if !changed {
		return msgs, frame
	}
	return rest, append(append([]byte("["), bytes.Join(raws, []byte(","))...), ']')
}

// serverCancelledLocked returns the notifications/cancelled m, by which
// the upstream link l gives up on a request of its own to the client, as
// the client is to get it: naming the request by the id the client knows,
// and the request forgotten; nil to drop it, when it names no open
// request of a restarted upstream's (the client may hold an exited one's
// under that id). It may instead end a standing request of the client's
// that l was sent (listenEndedLocked). s.mu must be held.
func (s *Session) serverCancelledLocked(l *link, m *jsonrpc.Message) []byte {
	id, err := jsonrpc.CancelledID(m.Params)
	if err != nil || id == nil {
		if l.gen > 1 {
			return nil
		}
		return m.Raw
	}
	key, ok := s.serverIDs[string(jsonrpc.IDKey(id))]
	r := s.serverReqs[key]
	if (!ok || r.l != l) && s.listenEndedLocked(l, id) {
		return m.Raw
	}
	if !ok || r.l != l {
		if l.gen > 1 {
			return nil
		}
		return m.Raw
	}
	s.closeServerRequestLocked(key)
	if !r.renamed() {
		return m.Raw
	}
	return jsonrpc.Replace(m.Raw, id, r.clientID)
}

// voidServerRequests tells the client that each request the upstream
// link gone sent it and it has not answered will get no answer
// (notifications/cancelled, with reason), so it can take the question
// away from its user; its answer, if it comes, is dropped (answerServer).
func (s *Session) voidServerRequests(gone *link, reason string) {
	s.mu.Lock()
	var ids [][]byte
	for key, r := range s.serverReqs {
		if r.l != gone {
			continue
		}
		s.closeServerRequestLocked(key)
		if len(s.voided) >= maxVoided {
			clear(s.voided)
		}
		s.voided[key] = struct{}{}
		ids = append(ids, r.clientID)
	}
	s.mu.Unlock()
	slices.SortFunc(ids, bytes.Compare) // in a steady order, for the client's log
	for _, id := range ids {
		s.log.Info("told the client a request of the exited upstream's will get no answer", "id", string(id))
		params := append(append([]byte(`{"requestId":`), id...), `,"reason":`...)
		params = append(jsonrpc.AppendString(params, reason), '}')
		s.writeClient(jsonrpc.NewRequest(nil, "notifications/cancelled", params))
	}
}

// endServerRequests answers, with an error saying why, each request the
// upstream link l sent the client and it has not answered, now that the
// client's input has ended or it stopped reading, and makes the session
// answer so those that come later. No answer can come from the client: a tools/call whose server
// waits on one (sampling, elicitation) would hold on to the end of the
// shutdown grace and be taken for an outcome unknown, where the error
// lets the server answer the call, and its outcome be recorded.
//
// The errors are written from a goroutine of its own: an upstream that
// reads none of them (busy in a call, or writing more requests) could
// hold more than its input's pipe takes, and the session's end would wait
// for it for ever, before the shutdown that closes that input and so ends
// such a write.
func (s *Session) endServerRequests(l *link, why string) {
	s.mu.Lock()
	s.asksRefused = why
	var ids []json.RawMessage
	for key, r := range s.serverReqs {
		if r.l == l {
			s.closeServerRequestLocked(key)
			ids = append(ids, r.id)
		}
	}
	s.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	go func() {
		for _, id := range ids {
			s.refuseServerRequest(l, id, why)
		}
	}()
}

// refuseServerRequest answers the request under id, which the upstream
// link l sent the client, with an error saying why it was not passed on
// (askRefusalLocked).
func (s *Session) refuseServerRequest(l *link, id json.RawMessage, why string) {
	s.log.Info("answered a request of the upstream's for the client", "id", string(id), "why", why)
	s.writeLink(l, jsonrpc.NewErrorResponse(id, jsonrpc.Errorf(jsonrpc.CodeInternalError, "mcp-idempotent: %s", why)))
}

// listenEndedLocked reports whether id names a standing request of the
// client's (subscriptions/listen) that l was sent, and if so forgets it:
// on stdio a 2026-07-28 server ends a subscription by cancelling its
// listen request, and answers it no more. The request went upstream
// under the client's own id, so the cancellation passes on as it came.
// s.mu must be held.
func (s *Session) listenEndedLocked(l *link, id []byte) bool {
	key := string(jsonrpc.IDKey(id))
	f, ok := s.forwarded[key]
	if !ok || !standing(f.method) || f.link != l {
		return false
	}
	s.forgetLocked(key)
	return true
}
