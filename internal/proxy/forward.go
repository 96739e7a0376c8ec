package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"go.opentelemetry.io/otel/trace"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
)

// A forwardedRequest is a client's request passed upstream: its id as the
// client spelled it, to answer it under if the upstream never does, and
// its method.
type forwardedRequest struct {
	id     json.RawMessage
	method string
	// batch numbers the client's batch the request came in, 0 for none:
	// the requests of one batch left unanswered are answered in one
	// array, as the batch would have been.
	batch uint64
	// shadow, in shadow mode, is the tools/call the interceptor judges:
	// it gets the request's outcome.
	shadow *shadowCall
	// link is the upstream link it was written to, nil until then: a
	// write that fails is told why by it (writeCause).
	link *link
	// handshake is an initialize's params: the handshake a restarted
	// upstream is given once this request has a result (noteProtocolLocked).
	handshake json.RawMessage
	// span is the span of a tools/call passed upstream as it came, nil
	// if untraced: it lasts until the request is forgotten (forgetLocked),
	// and takes the status of the answer (traceError).
	span trace.Span
	// toolsGen is the tool table's generation when a tools/list was
	// sent: an answer to one sent before a change is not learned from.
	toolsGen uint64
}

// forward passes a client's request upstream, remembering it until it is
// answered. While the upstream is being restarted it waits for it; if the
// upstream is gone for good it is answered with an error at once. sc, if
// not nil, is told the outcome. span, if not nil, is the span of the
// tools/call msg is: it is ended with the request's answer.
func (s *Session) forward(msg *jsonrpc.Message, sc *shadowCall, span trace.Span) {
	if !jsonrpc.PortableID(msg.ID) {
		// It goes upstream under the client's own id, and would come back
		// under another: the client would wait for ever.
		e := jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "%s", unportableID)
		endSpanWith(span, e.Object())
		s.writeClient(jsonrpc.NewErrorResponse(msg.ID, e))
		sc.notSent(errors.New(unportableID))
		return
	}
	var elicitForm bool
	if msg.Method == "initialize" && msg.Params != nil {
		elicitForm = elicitsForm(msg.Params) // read once, not on every ask
		var asked string
		if msg, asked = knownHandshake(msg); asked != "" {
			s.log.Info("the client asked for a protocol version the proxy does not know; asking the MCP server for one it does",
				"asked", asked, "sent", mcp.HandshakeVersion)
		}
	}
	l := s.lockUsable()
	if closed(l.gone) {
		conn, cause := l.conn, l.unstarted // conn is nil if the upstream could not be started again
		s.mu.Unlock()
		if cause == "" {
			cause = exitCause(conn)
		}
		e := jsonrpc.Errorf(jsonrpc.CodeInternalError, "mcp-idempotent: the upstream is not running; %s was not sent%s", msg.Method, cause)
		endSpanWith(span, e.Object())
		s.writeClient(jsonrpc.NewErrorResponse(msg.ID, e))
		sc.notSent(errors.New("the upstream is not running"))
		return
	}
	key := string(jsonrpc.IDKey(msg.ID))
	if s.inUseLocked(key, msg.Method == "tools/call") {
		s.mu.Unlock()
		endSpanWith(span, inUseError(msg.ID).Object())
		s.refuseInUse(msg.ID)
		sc.notSent(errors.New("its request id was in use"))
		return
	}
	f := forwardedRequest{id: msg.ID, method: msg.Method, shadow: sc, link: l, span: span}
	if msg.Method == "tools/list" {
		f.toolsGen = s.tools.generation()
	}
	if msg.Method == "initialize" && msg.Params != nil {
		f.handshake = msg.Params
		s.elicitForm = elicitForm
	}
	s.rememberLocked(key, f)
	s.mu.Unlock()
	sendForwarded(l, msg.Raw, key, s.notForwardedFunc)
}

// sendForwarded writes frame, requests of the client's remembered under
// id, to l. A write that fails, at once or when the burst holding it is
// flushed, is told to failed with id: no answer can come to what was not
// sent, and the client must not wait for one.
func sendForwarded(l *link, frame []byte, id string, failed func(id string, err error)) {
	var err error
	if l.framesThen != nil {
		err = l.framesThen.WriteFrameThen(frame, id, failed)
	} else {
		err = l.conn.WriteFrame(frame)
	}
	if err != nil {
		failed(id, err)
	}
}

// notForwarded answers the client's request under key, whose write to the
// upstream failed, with an error saying it was not sent.
func (s *Session) notForwarded(key string, err error) {
	s.mu.Lock()
	f, ok := s.forwarded[key]
	f.traceError(internalError)
	s.forgetLocked(key)
	s.mu.Unlock()
	if !ok {
		return // answered as the upstream went, or cancelled
	}
	s.log.Warn("a request could not be written to the upstream", "method", f.method, "err", err)
	f.shadow.notSent(fmt.Errorf("writing to the upstream: %w", err))
	s.writeClient(jsonrpc.NewErrorResponse(f.id, notSentError(f.method, err, s.writeCause(f.link))))
}

// batchNotSent answers the requests of the client's batch numbered batch
// (its decimal text), whose write to the upstream failed, in one array.
func (s *Session) batchNotSent(batch string, err error) {
	n, _ := strconv.ParseUint(batch, 10, 64)
	var taken []forwardedRequest
	s.mu.Lock()
	for key, f := range s.forwarded {
		if f.batch == n {
			f.traceError(internalError)
			s.forgetLocked(key)
			taken = append(taken, f)
		}
	}
	s.mu.Unlock()
	if len(taken) == 0 {
		return
	}
	cause := s.writeCause(taken[0].link)
	answers := make([][]byte, 0, len(taken))
	for _, f := range taken {
		answers = append(answers, jsonrpc.NewErrorResponse(f.id, notSentError(f.method, err, cause)))
	}
	s.log.Warn("a batch could not be written to the upstream", "requests", len(answers), "err", err)
	s.writeClient(append(append([]byte("["), bytes.Join(answers, []byte(","))...), ']'))
}

// notSentError is the answer to a request of the client's, method, that
// was not sent because writing it to the upstream failed with err; cause
// is exitCause's, "" if the upstream did not exit.
func notSentError(method string, err error, cause string) *jsonrpc.Error {
	return jsonrpc.Errorf(jsonrpc.CodeInternalError, "mcp-idempotent: %s was not sent: writing it to the upstream failed (%v)%s", method, err, cause)
}

// writeCause is why the upstream link l could not be written, where it
// can tell: a write fails most often because the upstream exited, and
// what it wrote on its way out says why (exitCause). "" for a nil l.
func (s *Session) writeCause(l *link) string {
	if l == nil {
		return ""
	}
	s.mu.Lock()
	conn := l.conn
	s.mu.Unlock()
	return exitCause(conn)
}

// unportableID says why a request passed upstream under its own id is
// refused when the id would not come back as it went (jsonrpc.PortableID).
const unportableID = "mcp-idempotent: this request goes to the upstream under its own id, which a server may read otherwise and answer under another id (an integer past 2^53-1, or a lone surrogate escape in a string); use a smaller integer or another string"

// inUseLocked reports whether a request of the client's under key is
// still being answered: a tools/call the session handles, or a request
// passed upstream. passing is set when the tools/call under key is the
// request being passed upstream now (its own entry in calls).
func (s *Session) inUseLocked(key string, passing bool) bool {
	_, forwarded := s.forwarded[key]
	_, called := s.calls[key]
	return forwarded || called && !passing
}

// notSentLocked reports whether an answer from the upstream under key
// answers nothing the upstream was sent under it while a call of the
// client's holds it: that call went upstream under an id of the proxy's,
// or the request passed on under key before it was cancelled and its id
// reused. Passed on, the answer would be taken for the call's. An answer
// under a key no one holds passes on, for the client to ignore. s.mu
// must be held.
func (s *Session) notSentLocked(key string) bool {
	if _, ok := s.forwarded[key]; ok {
		return false
	}
	_, held := s.calls[key]
	return held
}

// answerID returns the id to refuse a request under: its own, or null
// where that is no valid id, or another request of the client's still
// being answered holds it (an answer under it would be taken for that
// request's).
func (s *Session) answerID(id json.RawMessage) json.RawMessage {
	if !jsonrpc.ValidID(id) {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inUseLocked(string(jsonrpc.IDKey(id)), false) {
		return nil
	}
	return id
}

// refuseInUse answers a request whose id another request of the client's,
// still being answered, holds: under a null id, since an answer under
// this one would be taken for the other request's.
func (s *Session) refuseInUse(id json.RawMessage) {
	s.log.Warn("refused a request whose id is in use", "id", string(id))
	s.writeClient(jsonrpc.NewErrorResponse(nil, inUseError(id)))
}

// inUseError is the refusal of a request under id, which is in use.
func inUseError(id json.RawMessage) *jsonrpc.Error {
	return jsonrpc.Errorf(jsonrpc.CodeInvalidRequest,
		"mcp-idempotent: request id %s is already in use by a request still being answered; send it under another id", id)
}

// rememberLocked remembers f, the client's request key passed upstream,
// until it is answered. s.mu must be held.
func (s *Session) rememberLocked(key string, f forwardedRequest) {
	s.forwarded[key] = f
	s.dropCancelledLocked(key)
	if !standing(f.method) {
		s.awaited++
	}
}

// forgetLocked forgets the client's request key, forwarded and now
// answered, and ends its span. s.mu must be held.
func (s *Session) forgetLocked(key string) {
	f, ok := s.forwarded[key]
	if !ok {
		return
	}
	delete(s.forwarded, key)
	s.releasePassedLocked(key, f)
	f.endSpan()
	if !standing(f.method) {
		s.awaited--
	}
	if s.awaited == 0 && s.forwardIdle != nil {
		close(s.forwardIdle)
		s.forwardIdle = nil
	}
}

// releasePassedLocked frees key, the id of f, a request forwarded and
// now answered, cancelled or given up on, in calls too: a tools/call
// passed upstream keeps its entry there until the goroutine that sent it
// finishes it, which may come later than the answer the client acts on,
// or than its own cancellation. While f held key, no other call could
// take it, so the entry is f's: marked, it leaves the key to the next
// call when it is released. s.mu must be held.
func (s *Session) releasePassedLocked(key string, f forwardedRequest) {
	if f.method != "tools/call" || f.batch != 0 {
		return
	}
	if c := s.calls[key]; c != nil {
		c.unlisted = true
		delete(s.calls, key)
	}
}

// standing reports whether method is a request that stands until the
// client ends it, such as the 2026-07-28 subscriptions/listen: the end of
// the session's input ends it, and shutdown does not wait for its answer.
func standing(method string) bool { return method == "subscriptions/listen" }

// forwardsSettled returns a channel closed once no request of the
// client's passed upstream waits for its answer, but standing ones.
func (s *Session) forwardsSettled() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.awaited == 0 {
		return closedChannel
	}
	if s.forwardIdle == nil {
		s.forwardIdle = make(chan struct{})
	}
	return s.forwardIdle
}
