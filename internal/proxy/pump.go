package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

// startPump reads l until it closes; the channel then receives the error.
func (s *Session) startPump(ctx context.Context, l *link) <-chan error {
	done := make(chan error, 1)
	go func() { done <- s.pumpUpstream(ctx, l) }()
	return done
}

// pumpClient reads the client's frames until it closes.
func (s *Session) pumpClient(ctx context.Context) error {
	b := newBurst(s.client, s.upstreamConn)
	defer b.flush(false)
	for {
		frame, err := s.client.ReadFrame()
		more := b.hold()
		if err != nil && !isFrameTooLarge(err) {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		s.handling.Lock()
		if err == nil {
			s.fromClient(ctx, frame)
		} else {
			s.tooLargeFromClient(err)
		}
		b.flush(more)
		s.handling.Unlock()
	}
}

// upstreamConn returns the Conn of the upstream link in use, to hold
// through a burst; nil while the upstream is being started again: a frame
// of the burst may wait for the handshake replayed on it (usable), which
// must not be held.
func (s *Session) upstreamConn() Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !closed(s.up.ready) {
		return nil
	}
	return s.up.conn
}

// tooLargeFromClient answers a message from the client over the size
// limit, which was dropped: under its id, when its first bytes hold it,
// else under a null id, as JSON-RPC answers a request whose id cannot be
// read. An answer of the client's to a request of the upstream's is only
// logged: no answer goes to an answer.
func (s *Session) tooLargeFromClient(err error) {
	id, method := jsonrpc.HeadRequest(frameHead(err))
	if method == "" && id != nil {
		s.log.Error("dropped an answer from the client", "err", err, "id", string(id))
		return
	}
	s.log.Warn("refused a message from the client", "err", err, "method", method, "id", string(id))
	s.writeClient(jsonrpc.NewErrorResponse(s.answerID(id), jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "mcp-idempotent: %v", err)))
}

// brokenRequestID returns the id of a request from the client that cannot
// be read whole (JSON nested past the decoder's depth limit, say), read
// from its first kilobyte as for a message over the size limit; nil for
// none, for an answer, or for an id a request still being answered holds.
// Under a null id, as JSON-RPC has it, the client would wait for ever.
func (s *Session) brokenRequestID(frame []byte) json.RawMessage {
	id, method := jsonrpc.HeadRequest(frame[:min(len(frame), brokenHead)])
	if method == "" {
		return nil
	}
	return s.answerID(id)
}

// brokenHead bounds what brokenRequestID reads, as the transports bound
// the head of a frame over the size limit.
const brokenHead = 1024

// frameHead returns the first bytes of a message over the size limit,
// which a transport's size-limit error keeps; nil if err has none.
func frameHead(err error) []byte {
	var h interface{ FrameHead() []byte }
	if errors.As(err, &h) {
		return h.FrameHead()
	}
	return nil
}

// isFrameTooLarge reports whether err is a transport's size-limit error,
// after which the stream is still usable.
func isFrameTooLarge(err error) bool {
	var limited interface{ FrameTooLarge() bool }
	return errors.As(err, &limited) && limited.FrameTooLarge()
}

func (s *Session) fromClient(ctx context.Context, frame []byte) {
	var m jsonrpc.Message // on the stack: what outlives the frame is copied
	msg := &m
	// The params' members are read as the frame is validated: those of
	// a tools/call need no second walk (startToolCall).
	var params mcp.ParamsReader
	if err := jsonrpc.DecodeParamsInto(msg, frame, params.Member); err != nil {
		s.refuseUnparseable(frame, err)
		return
	}
	if msg.Method == "" && msg.ID == nil && !msg.Batch {
		// Neither a request, a notification nor a response ({}): no
		// server would answer it, and the client would wait.
		s.log.Warn("refused a message from the client that has neither a method nor an id", "size", len(frame))
		s.writeClient(jsonrpc.NewErrorResponse(nil, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest,
			"mcp-idempotent: not a JSON-RPC message: it has neither a method nor an id")))
		return
	}
	if msg.Method != "" && !msg.Batch {
		if why := jsonrpc.CheckRequest(msg); why != "" {
			// Not passed on: a server may end the session on it.
			s.log.Warn("refused a message from the client", "method", msg.Method, "why", why)
			s.countRefused(msg, jsonrpc.CodeInvalidRequest)
			s.writeClient(jsonrpc.NewErrorResponse(s.answerID(msg.ID), jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "mcp-idempotent: %s", why)))
			return
		}
	}
	if msg.IsRequest() && s.refuseVersion(msg, &params) {
		return
	}
	if msg.IsRequest() && !msg.Batch && s.reservedToken(params.Meta()) {
		s.countRefused(msg, jsonrpc.CodeInvalidParams)
		s.writeClient(jsonrpc.NewErrorResponse(s.answerID(msg.ID), jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "%s", s.reservedTokenMessage())))
		return
	}
	if msg.IsRequest() {
		s.tookRequest(msg)
	}
	// While a queue runs (order.go), what goes upstream waits in it;
	// cancellations, answers to the upstream's requests and pings do not.
	switch {
	case msg.Batch:
		if s.fromClientBatchless(ctx, frame) {
			return
		}
		if s.queueing.Load() && s.enqueueBatch(frame) {
			return
		}
		s.fromClientBatch(frame)
	case msg.IsRequest() && s.reservedID(msg.ID):
		s.countRefused(msg, jsonrpc.CodeInvalidRequest)
		s.writeClient(jsonrpc.NewErrorResponse(msg.ID, jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "%s", s.reservedMessage())))
	case msg.IsRequest() && msg.Method == "tools/call":
		s.startToolCall(ctx, msg, &params)
	case msg.IsRequest():
		if msg.Method != "ping" && s.queueing.Load() && s.enqueueMessage(msg) {
			return
		}
		s.forward(msg, nil, nil)
	case msg.Method == "notifications/cancelled":
		s.cancelled(msg)
	case msg.IsResponse() && idHasPrefix(msg.ID, s.askPrefix):
		s.askAnswered(msg)
	case msg.Method == "":
		// The client's answer to a server's request.
		if why := jsonrpc.CheckResponse(msg); why != "" {
			s.refuseAnswer(msg, why)
			return
		}
		s.answerServer(msg)
	default:
		if s.queueing.Load() && s.enqueueMessage(msg) {
			return
		}
		s.notifyUpstream(msg)
	}
}

// refuseUnparseable answers the client's frame that could not be read as
// a message, err saying why.
func (s *Session) refuseUnparseable(frame []byte, err error) {
	s.log.Warn("unparseable message from the client", "err", err, "size", len(frame))
	code := jsonrpc.CodeParseError
	var id json.RawMessage // JSON-RPC's for a message not parsed
	switch {
	case errors.Is(err, jsonrpc.ErrAmbiguous):
		code = jsonrpc.CodeInvalidRequest // JSON, but not one message
	case jsonrpc.TooDeep(err):
		// JSON all the same, which the upstream may read: the id
		// its head holds is the one the client waits on.
		id = s.brokenRequestID(frame)
	}
	s.writeClient(jsonrpc.NewErrorResponse(id, jsonrpc.Errorf(code, "mcp-idempotent: %v", err)))
}

// tookRequest notes msg, a request of the client's about to be acted on,
// in the session log.
func (s *Session) tookRequest(msg *jsonrpc.Message) {
	if s.sessionLog != nil {
		s.sessionLog.request(msg.Method, msg.Params)
	}
}

// refuseVersion refuses msg, a request, if its _meta declares a protocol
// version the proxy does not know, or gives one, or a progress token,
// that an upstream could read otherwise, and reports whether it did. A notification's version is not
// read: the proxy decides nothing on it, and passes it on as it came.
func (s *Session) refuseVersion(msg *jsonrpc.Message, params *mcp.ParamsReader) bool {
	v, err := params.DeclaredVersion()
	if err == nil && (v == "" || mcp.Negotiable(v)) {
		return false
	}
	if err != nil {
		// Counted before the answer: a client that has it may read the count.
		s.countRefused(msg, jsonrpc.CodeInvalidParams)
		s.log.Warn("refused a request whose _meta could be read two ways", "method", msg.Method, "err", err)
		s.writeClient(jsonrpc.NewErrorResponse(s.answerID(msg.ID), jsonrpc.Errorf(jsonrpc.CodeInvalidParams, "mcp-idempotent: %s: %v", msg.Method, err)))
		return true
	}
	s.countRefused(msg, codeUnsupportedVersion)
	s.log.Warn("refused a request of a protocol version the proxy does not know", "method", msg.Method, "version", v)
	s.writeClient(unsupportedVersion(s.answerID(msg.ID), v))
	return true
}

// notifyUpstream passes on msg, a notification of the client's.
func (s *Session) notifyUpstream(msg *jsonrpc.Message) {
	if msg.Method == "notifications/initialized" {
		s.mu.Lock()
		s.initialized = true
		s.mu.Unlock()
	}
	s.writeUpstream(msg.Raw)
}

// refuseAnswer drops m, a message from the client with an id and no
// method, which a server could not read for why: not passed on, as a
// server may end the session on it. One with a result or an error is an
// answer, and no answer goes to an answer; one with neither may be a
// request that lost its method, and is answered as an invalid request.
func (s *Session) refuseAnswer(m *jsonrpc.Message, why string) {
	if m.Result != nil || m.Error != nil {
		s.log.Error("dropped an answer from the client", "why", why, "id", string(m.ID))
		return
	}
	s.log.Warn("refused a message from the client", "why", why, "id", string(m.ID))
	s.writeClient(jsonrpc.NewErrorResponse(s.answerID(m.ID), jsonrpc.Errorf(jsonrpc.CodeInvalidRequest, "mcp-idempotent: not a JSON-RPC message: %s", why)))
}

// badAnswer refuses m if it is an answer from the client that no server
// could read (refuseAnswer), and reports whether it did.
func (s *Session) badAnswer(m *jsonrpc.Message) bool {
	if m.Method != "" {
		return false
	}
	why := jsonrpc.CheckResponse(m)
	if why == "" {
		return false
	}
	s.refuseAnswer(m, why)
	return true
}

// cancelled handles notifications/cancelled from the client. For a
// tools/call the interceptor handles, it detaches the caller and goes no
// further: the execution belongs to the record now, and other callers may
// be attached to it. Any other cancellation passes through.
func (s *Session) cancelled(msg *jsonrpc.Message) {
	id, err := jsonrpc.CancelledID(msg.Params)
	switch {
	case err != nil:
		// Which request it names depends on who reads it.
		s.log.Warn("dropped a cancellation from the client", "err", err)
		return
	case id != nil && s.reservedID(id):
		// Only the proxy cancels its own requests: a caller's
		// cancellation detaches it, and never cancels an execution
		// (DESIGN section 5).
		s.log.Warn("dropped a cancellation from the client of a request of the proxy's own", "id", string(id))
		return
	case id != nil && s.cancelInTurn(msg, id):
		return
	case id != nil && s.unqueue(string(jsonrpc.IDKey(id))):
		s.log.Info("client cancelled a request before it was sent; dropping it", "request", string(id))
		return
	case id != nil:
		s.mu.Lock()
		c, ok := s.calls[string(jsonrpc.IDKey(id))]
		s.mu.Unlock()
		if ok {
			c.mu.Lock()
			defer c.mu.Unlock()
			if !c.passThrough {
				s.log.Info("client cancelled a tools/call; detaching it", "request", string(id))
				c.markDetached()
				c.finish()
				return
			}
		}
		// A request passed upstream and cancelled is owed nothing more:
		// its id is free (an answer the upstream still sends passes on,
		// for the client to ignore).
		s.mu.Lock()
		f := s.forwarded[string(jsonrpc.IDKey(id))]
		s.forgetLocked(string(jsonrpc.IDKey(id)))
		s.keepCancelledLocked(string(jsonrpc.IDKey(id)), f.shadow)
		s.mu.Unlock()
	}
	s.writeUpstream(msg.Raw)
}

// pumpUpstream reads the upstream's frames until it closes.
func (s *Session) pumpUpstream(ctx context.Context, l *link) error {
	// The answers of a burst are held only when the store answers at
	// once: their writers are told on this goroutine when they are
	// written, and record them delivered there, which a store that waits
	// on I/O must not hold up. Its executions answer from goroutines of
	// their own anyway.
	var from Conn
	if in := s.opts.Interceptor; in == nil || !in.StoreWaits() {
		from = l.conn
	}
	b := newBurst(from, func() Conn { return s.client })
	defer b.flush(false)
	for {
		frame, err := l.conn.ReadFrame()
		more := b.hold()
		switch na, noAnswer := errors.AsType[*jsonrpc.NoAnswer](err); {
		case err == nil:
			s.fromUpstream(l, frame)
		case isFrameTooLarge(err):
			s.tooLargeFromUpstream(l, err)
		case noAnswer:
			s.noAnswer(na)
		case errors.Is(err, io.EOF):
			return nil
		case errors.Is(err, io.ErrUnexpectedEOF):
			// Exited while writing: what it wrote of its last message
			// is no message. Those it would have answered are told it
			// exited, as by an exit between messages.
			s.log.Warn("the upstream's output ended in the middle of a message; its start was dropped", "err", err)
			return nil
		default:
			return err
		}
		b.flush(more)
	}
}

// fromUpstream handles a message the upstream link l sent.
func (s *Session) fromUpstream(l *link, frame []byte) {
	var m jsonrpc.Message // on the stack, as in fromClient
	msg := &m
	if err := jsonrpc.DecodeInto(msg, frame); err != nil {
		if s.unreadableAnswer(frame, err) {
			return
		}
		// Not ours to judge: the client sees what the server sent.
		s.log.Warn("unparseable message from the upstream, passed on", "err", err, "size", len(frame))
		s.writeClient(frame)
		return
	}
	if msg.Batch {
		s.fromUpstreamBatch(l, frame)
		return
	}
	if msg.IsRequest() && s.clientSpaceID(msg.ID) {
		s.refuseAskID(l, msg.ID)
		return
	}
	switch {
	case msg.IsResponse():
		if frame = s.upstreamAnswer(l, msg, frame); frame == nil {
			return
		}
	case msg.IsRequest():
		s.mu.Lock()
		if why := s.askRefusalLocked(msg.ID); why != "" {
			s.mu.Unlock()
			s.refuseUnasked(l, unaskedRequest{msg.ID, why})
			return
		}
		frame = s.openServerRequestLocked(l, msg)
		s.mu.Unlock()
	case msg.Method == "notifications/cancelled":
		s.mu.Lock()
		frame = s.serverCancelledLocked(l, msg)
		s.mu.Unlock()
		if frame == nil {
			s.log.Debug("dropped the upstream's cancellation of no open request of its own", "size", len(msg.Raw))
			return
		}
	case msg.Method == "notifications/tools/list_changed":
		s.tools.invalidate()
	case msg.Method == "notifications/progress":
		if frame = s.upstreamProgress(frame, msg); frame == nil {
			return
		}
	}
	s.writeClient(frame)
}

// upstreamAnswer handles msg, an answer from the upstream in frame: to a
// request of the proxy's own, to a call it forwarded, or to one it never
// sent. It returns the frame to pass to the client, or nil when the
// answer is dealt with.
func (s *Session) upstreamAnswer(l *link, msg *jsonrpc.Message, frame []byte) []byte {
	kb := jsonrpc.IDKey(msg.ID)
	s.mu.Lock()
	// Found by the number in the id: an answer to the proxy's own
	// request costs no copy of its id, and a client's no map look-up.
	if n, ok := s.ownSeq(kb); ok {
		if p, ok := s.pending[n]; ok {
			delete(s.pending, n)
			s.mu.Unlock()
			s.answered(p, msg, nil)
			return nil
		}
	}
	key := string(kb)
	if closed(l.gone) {
		// Everyone who waited on l was answered when it was given up
		// on (abandon): this answer came too late, and passed on it
		// would be the client's second.
		s.mu.Unlock()
		s.log.Warn("dropped an answer that came after the session gave up on the upstream", "id", string(msg.ID))
		return nil
	}
	if s.notSentLocked(key) {
		// A cancelled call kept under key is the one request sent
		// under it: the answer is its own, though not the client's.
		kept := s.takeCancelledLocked(key)
		s.mu.Unlock()
		s.log.Warn("dropped an answer from the upstream under the id of a call it was not sent", "id", string(msg.ID))
		if kept != nil {
			kept.answeredFrame(frame)
		}
		return nil
	}
	f := s.forwarded[key]
	f.traceError(msg.Error)
	s.forgetLocked(key)
	if f.shadow == nil {
		f.shadow = s.takeCancelledLocked(key)
	}
	if refused := s.noteProtocolLocked(f, msg); refused != nil {
		frame = refused
	}
	s.mu.Unlock()
	if s.reservedID(msg.ID) {
		s.droppedOwn(key)
		return nil
	}
	if f.shadow != nil {
		// Delivered only once the client's transport took it, as a
		// recorded call's answer is in normal mode.
		f.shadow.answeredFrameFirst(frame)
		s.writeShadowAnswer(frame, f.shadow)
		return nil
	}
	if f.method == "tools/list" && msg.Result != nil {
		if page, err := mcp.ParseListResult(msg.Result); err == nil {
			s.tools.learnAt(page, f.toolsGen)
		}
	}
	return frame
}

// fromUpstreamBatch handles a batch from the upstream: the answers to a
// batch the client sent, which no request waits on any more, and which
// pass on. An answer in it to one of the proxy's own requests (which the
// proxy never sends in a batch) is taken out and acted on, and one to no
// request of the proxy's is dropped: the client never sees the proxy's ids.
func (s *Session) fromUpstreamBatch(l *link, frame []byte) {
	msgs, err := jsonrpc.DecodeBatch(frame)
	if err != nil {
		s.writeClient(frame)
		return
	}
	var b upstreamBatch
	s.mu.Lock()
	late := closed(l.gone) // as in fromUpstream
	for _, m := range msgs {
		s.sortUpstreamLocked(&b, l, m, late)
	}
	s.mu.Unlock()
	for i, sc := range b.shadows {
		sc.answeredFrame(b.shadowAnswers[i])
	}
	if b.toolsChanged {
		s.tools.invalidate()
	}
	for i, p := range b.own {
		s.answered(p, b.ownMsgs[i], nil)
	}
	for _, id := range b.refused {
		s.refuseAskID(l, id)
	}
	for _, u := range b.unasked {
		s.refuseUnasked(l, u)
	}
	switch {
	case len(b.rest) == len(msgs) && !b.edited:
		s.writeClient(frame)
	case len(b.rest) > 0:
		s.writeClient(append(append([]byte("["), bytes.Join(b.rest, []byte(","))...), ']'))
	}
}

// upstreamBatch is a batch from the upstream sorted under s.mu into what
// is done with it once s.mu is let go.
type upstreamBatch struct {
	own           []sent             // the proxy's own requests answered,
	ownMsgs       []*jsonrpc.Message // and their answers
	rest          [][]byte           // what passes on to the client
	edited        bool               // a message of rest is not as it came
	toolsChanged  bool
	refused       []json.RawMessage // requests under ids of the proxy's
	unasked       []unaskedRequest  // requests not passed to the client
	shadows       []*shadowCall     // calls in shadow mode answered, and
	shadowAnswers [][]byte          // their answers
}

// sortUpstreamLocked sorts m, a message of a batch from the upstream,
// into b; late says the session gave up on l. s.mu must be held.
func (s *Session) sortUpstreamLocked(b *upstreamBatch, l *link, m *jsonrpc.Message, late bool) {
	if m.IsRequest() && s.clientSpaceID(m.ID) {
		b.refused = append(b.refused, m.ID)
		return
	}
	if m.IsRequest() {
		if why := s.askRefusalLocked(m.ID); why != "" { // as in fromUpstream
			b.unasked = append(b.unasked, unaskedRequest{m.ID, why})
			return
		}
	}
	if !m.IsResponse() {
		b.toolsChanged = b.toolsChanged || m.Method == "notifications/tools/list_changed"
		raw := m.Raw
		switch {
		case m.IsRequest():
			raw = s.openServerRequestLocked(l, m)
		case m.Method == "notifications/cancelled":
			raw = s.serverCancelledLocked(l, m)
		case m.Method == "notifications/progress":
			raw = s.upstreamProgressLocked(raw, m)
		}
		if b.edited = b.edited || !bytes.Equal(raw, m.Raw); raw != nil {
			b.rest = append(b.rest, raw)
		}
		return
	}
	kb := jsonrpc.IDKey(m.ID)
	if p, ok := s.takePendingLocked(kb); ok {
		b.own, b.ownMsgs = append(b.own, p), append(b.ownMsgs, m)
		return
	}
	key := string(kb)
	if late {
		s.log.Warn("dropped an answer that came after the session gave up on the upstream", "id", string(m.ID))
		return
	}
	if s.notSentLocked(key) {
		s.log.Warn("dropped an answer from the upstream under the id of a call it was not sent", "id", string(m.ID))
		if sc := s.takeCancelledLocked(key); sc != nil { // as in fromUpstream
			b.shadows, b.shadowAnswers = append(b.shadows, sc), append(b.shadowAnswers, m.Raw)
		}
		return
	}
	raw, f := m.Raw, s.forwarded[key]
	if refused := s.noteProtocolLocked(f, m); refused != nil {
		raw, b.edited = refused, true
	}
	f.traceError(m.Error)
	s.forgetLocked(key)
	if s.reservedID(m.ID) {
		s.droppedOwnLocked(key)
		return
	}
	if f.shadow == nil {
		f.shadow = s.takeCancelledLocked(key)
	}
	if f.shadow != nil { // as in fromUpstream
		b.shadows, b.shadowAnswers = append(b.shadows, f.shadow), append(b.shadowAnswers, raw)
	}
	b.rest = append(b.rest, raw)
}

// tooLargeFromUpstream handles a message from the upstream link l over
// the size limit, which was dropped, so that no one waits for ever on it.
// An answer answers the request still waiting on it now; a request (a
// sampling/createMessage, say) is not passed on to the client, and the
// upstream is answered with the error under its id. A notification is
// only logged. What the message is, and its ids, are read from its first
// bytes, where most encoders put them; a transport that finds them only
// after those reports the frame again, once it has ended, with what its
// first report left out (jsonrpc.HeadMessage reads both). A head giving
// "id" twice stands for a message under each, as in unreadableAnswer.
func (s *Session) tooLargeFromUpstream(l *link, err error) {
	head := frameHead(err)
	ids, kind := jsonrpc.HeadMessage(head)
	switch {
	case len(ids) == 0 || kind == jsonrpc.HeadUndecided:
		// A notification, or a message whose ids or kind come later.
		s.log.Error("dropped a message from the upstream", "err", err)
	case kind == jsonrpc.HeadOfAnswer:
		for _, id := range ids {
			s.droppedAnswer(string(jsonrpc.IDKey(id)), err)
		}
	default:
		_, method := jsonrpc.HeadRequest(head)
		for _, id := range ids {
			s.log.Error("dropped a request from the upstream", "err", err, "id", string(id), "method", method)
			s.refuseUnasked(l, unaskedRequest{bytes.Clone(id), "the request was not passed on to the client: " + err.Error()})
		}
	}
}

// droppedAnswer answers the request under key, if one waits, for an answer
// to it from the upstream that was dropped for err.
func (s *Session) droppedAnswer(key string, err error) {
	s.mu.Lock()
	p, own := s.takePendingLocked([]byte(key))
	f, forwarded := s.forwarded[key]
	f.traceError(internalError)
	s.forgetLocked(key)
	kept := s.takeCancelledLocked(key)
	s.mu.Unlock()
	s.log.Error("dropped an answer from the upstream", "err", err, "id", key)
	switch {
	case own:
		// Not a NotSent error: the upstream ran the request and answered.
		s.answered(p, nil, fmt.Errorf("the upstream's answer was dropped: %w", err))
	case kept != nil:
		// The client cancelled it and is owed nothing; its record is.
		kept.answered(nil, fmt.Errorf("the upstream's answer was dropped: %w", err))
	case forwarded:
		if f.shadow != nil {
			f.shadow.answered(nil, fmt.Errorf("the upstream's answer was dropped: %w", err))
		}
		s.writeClient(jsonrpc.NewErrorResponse(f.id, jsonrpc.Errorf(jsonrpc.CodeInternalError,
			"mcp-idempotent: the upstream's answer to %s was dropped: %v", f.method, err)))
	}
}

// noAnswer handles the transport's own account na of a request it carried
// that got no answer: one of the proxy's own requests is answered with
// the failure as the transport saw it; a client's is answered with the
// JSON-RPC error that stands for it.
func (s *Session) noAnswer(na *jsonrpc.NoAnswer) {
	kb := jsonrpc.IDKey(na.ID)
	key := string(kb)
	s.mu.Lock()
	p, own := s.takePendingLocked(kb)
	f, forwarded := s.forwarded[key]
	f.traceError(na.Object().Object())
	s.forgetLocked(key)
	kept := s.takeCancelledLocked(key)
	s.mu.Unlock()
	switch {
	case own:
		s.answered(p, nil, sendFailure(na))
	case kept != nil:
		// As an answer to it would: the client is owed nothing.
		kept.answered(nil, sendFailure(na))
	case forwarded:
		if f.shadow != nil {
			f.shadow.answered(nil, sendFailure(na))
		}
		s.writeClient(jsonrpc.NewErrorResponse(f.id, na.Object()))
	case s.reservedID(na.ID):
		s.droppedOwn(key)
	}
}

// sendFailure is the error a sender of the proxy's own is told for na, as
// Upstream.Send's contract reads: a retry.NotSentError when nothing left;
// na itself for an HTTP status that came instead of the answer, for the
// retry classifier to read; otherwise an error that says the request may
// have been received.
func sendFailure(na *jsonrpc.NoAnswer) error {
	switch {
	case na.NotSent:
		return retry.NotSent(na)
	case na.Refused():
		return na
	}
	return fmt.Errorf("no answer from the upstream: %w", na)
}

// unreadableAnswer handles a frame from the upstream that is not JSON but
// whose valid members, before the first that is not, name one of the
// proxy's own requests: that request is answered with the error, as an
// answer that came and could not be read (for a tools/call, an outcome
// not observed), rather than left waiting for ever while the client got a
// frame under an id it never sent. It reports whether the frame was such
// an answer. Any other frame passes on as it came; a client's request it
// may answer stays remembered, since the frame may as well be a request
// of the upstream's whose "method" comes after the broken member.
//
// A frame giving "id" twice answers each of the proxy's requests it names:
// readers disagree on which id it has, and the request one of them names
// would otherwise wait while the client got a frame under its id.
func (s *Session) unreadableAnswer(frame []byte, err error) bool {
	ids, isResponse := jsonrpc.HeadIDs(frame)
	if !isResponse {
		return false
	}
	answered := false
	for _, id := range ids {
		kb := jsonrpc.IDKey(id)
		key := string(kb)
		s.mu.Lock()
		p, own := s.takePendingLocked(kb)
		s.mu.Unlock()
		if !own {
			s.endUnreadSpan(key)
			s.unreadableShadow(key, err)
			continue
		}
		s.log.Error("an answer from the upstream is not JSON", "err", err, "id", key, "size", len(frame))
		s.answered(p, nil, fmt.Errorf("the upstream's answer could not be read: %w", err))
		answered = true
	}
	return answered
}
