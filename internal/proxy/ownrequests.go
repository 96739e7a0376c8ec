package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

// ownIDs starts the JSON text of every id the proxy puts on its own
// requests upstream (the session's idPrefix), followed by the session's
// Instance and a colon if it has one. A client request whose id starts
// with the session's idPrefix is refused, so the proxy's ids and the
// client's can never collide.
const ownIDs = `"mcp-idempotent:`

// reservedID reports whether a client's request id is in the proxy's id
// space, however it is spelled: the upstream reads "mcp\u002didempotent:1"
// as the proxy's "mcp-idempotent:1", and would answer it as such.
func (s *Session) reservedID(id json.RawMessage) bool {
	return idHasPrefix(id, s.idPrefix)
}

// idHasPrefix reports whether the string id, read as JSON, starts with
// the value of prefix, the JSON text of the start of a string.
func idHasPrefix(id json.RawMessage, prefix string) bool {
	if bytes.HasPrefix(id, []byte(prefix)) {
		return true
	}
	if len(id) == 0 || id[0] != '"' || bytes.IndexByte(id, '\\') < 0 {
		return false
	}
	v, ok := jsonrpc.StringValue(id)
	return ok && strings.HasPrefix(v, prefix[1:])
}

// reservedMessage is the error a request under a reserved id gets.
func (s *Session) reservedMessage() string {
	return "mcp-idempotent: request ids starting with " + s.idPrefix[1:] + " are reserved for the proxy's own requests"
}

// sent is one of the proxy's own requests upstream, waiting for its
// answer.
type sent struct {
	key    string // its id's JSON text, its key in pending
	method string
	done   intercept.Answered
	token  bool // its progress token is the proxy's (ownToken)
	// stop stops the cancellation of the request when its sender's
	// context ends (see Send); nil if there is none.
	stop func() bool
}

// CopiesParams implements intercept.CopyingUpstream: Send writes the
// params into the request's frame, and keeps nothing of them.
func (s *Session) CopiesParams() bool { return true }

// Send implements intercept.Upstream: it sends one of the proxy's own
// requests upstream, under an id of the proxy's, and calls done with the
// outcome from the goroutine that reads the upstream (or, for a held
// request whose write failed, the one that wrote it: notWritten).
func (s *Session) Send(ctx context.Context, method string, params json.RawMessage, done intercept.Answered) {
	s.send(ctx, method, params, done, nil)
}

// send is Send for c, the caller the request is sent for, or nil: the
// request's progress token goes upstream as one of the proxy's
// (progresstoken.go).
func (s *Session) send(ctx context.Context, method string, params json.RawMessage, done intercept.Answered, c *clientCall) {
	// The id's JSON text; its number is the request's key in pending.
	n := s.nextID.Add(1)
	var buf [64]byte
	key := string(append(strconv.AppendInt(append(buf[:0], s.idPrefix...), n, 10), '"'))
	params, clientToken := ownToken(key, params, c)
	l, err := s.lockSendLink(ctx, method)
	if err != nil {
		// Given up on before it could go: never sent.
		done.Answered(nil, retry.NotSent(err))
		return
	}
	if closed(l.gone) || l != s.up {
		why := errors.New("the upstream has closed")
		if l.failed != nil {
			why = fmt.Errorf("the upstream exited, and %w", l.failed)
		}
		s.mu.Unlock()
		done.Answered(nil, retry.NotSent(why))
		return
	}
	s.sending++
	if clientToken != nil {
		s.keepTokenLocked(key, clientToken, c)
	}
	s.pending[n] = sent{key: key, method: method, done: done, token: clientToken != nil}
	s.mu.Unlock()

	switch {
	case l.requests != nil:
		err = l.requests.WriteRequestThen(key, method, params, s.notWrittenFunc)
	case l.frames != nil:
		err = l.frames.WriteRequest(key, method, params)
	default:
		err = l.conn.WriteFrame(jsonrpc.NewRequest(json.RawMessage(key), method, params))
	}
	if err != nil {
		s.notWritten(key, err)
		return
	}
	if ctx.Done() == nil {
		return // a context that never ends costs nothing here
	}
	stop := context.AfterFunc(ctx, func() { s.cancelSent(l, n, ctx.Err()) })
	s.mu.Lock()
	p, still := s.pending[n]
	if still {
		p.stop = stop
		s.pending[n] = p
	}
	s.mu.Unlock()
	if !still {
		stop() // answered already
	}
}

// lockSendLink returns, with s.mu held, the upstream link a request for
// method goes on, or ctx's error, without the lock, when ctx has ended.
// While the upstream is being started again, only the replayed handshake
// goes first; everything else waits for it (nextUsable). The returned
// link may be gone or replaced: the caller looks, under the lock.
func (s *Session) lockSendLink(ctx context.Context, method string) (*link, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	l := s.up
	if method == "initialize" || closed(l.ready) {
		return l, nil // the common case: one lock, and no wait
	}
	s.mu.Unlock()
	l = s.nextUsable()
	if err := ctx.Err(); err != nil {
		return nil, err // ended while it waited
	}
	s.mu.Lock()
	return l, nil
}

// notWritten answers the proxy's own request under key, which the
// upstream could not take whole, and so never received: not sent, err
// being the write's error.
func (s *Session) notWritten(key string, err error) {
	s.mu.Lock()
	p, still := s.takePendingLocked([]byte(key))
	s.mu.Unlock()
	if !still {
		return // given up on, or answered with the upstream gone
	}
	if p.token {
		s.tokenAnswered(p.key, false) // as answered does: the call is over
	}
	if p.stop != nil {
		p.stop()
	}
	p.done.Answered(nil, retry.NotSent(fmt.Errorf("writing to the upstream: %w", err)))
	s.acted()
}

// cancelSent gives up on the proxy's own request numbered n, sent on l,
// when its sender's context ends with err: the upstream is told with
// notifications/cancelled, so it can stop the work (but for initialize,
// which the MCP specification says is never cancelled), and then the
// sender gets err, rather than waiting for an answer the upstream need
// not send. An answer that comes anyway is dropped, as one to no request.
func (s *Session) cancelSent(l *link, n int64, err error) {
	s.mu.Lock()
	p, ok := s.pending[n]
	delete(s.pending, n)
	if ok {
		s.giveUpLocked(p.key)
	}
	s.mu.Unlock()
	if !ok {
		return // answered meanwhile
	}
	if p.method != "initialize" && !closed(l.gone) {
		if werr := l.conn.WriteFrame(cancellation(p.key, err)); werr != nil {
			s.log.Debug("writing to the upstream", "err", werr)
		}
	}
	s.answered(p, nil, err)
}

// ownSeq returns the number of the proxy's own request whose id has the
// key k (jsonrpc.IDKey): the one send wrote after s.idPrefix. ok is false
// for any other id. Only the decimal text send writes, without a leading
// zero, is read as a number, so that one id names one request, as when
// pending was keyed by the id's text; 18 digits are more than the
// requests a session sends.
func (s *Session) ownSeq(k []byte) (n int64, ok bool) {
	p := s.idPrefix
	if len(k) < len(p)+2 || string(k[:len(p)]) != p || k[len(k)-1] != '"' {
		return 0, false
	}
	digits := k[len(p) : len(k)-1]
	if len(digits) > 18 || digits[0] == '0' {
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// takePendingLocked takes out of pending the proxy's own request whose
// id has the key k, if one waits. s.mu must be held.
func (s *Session) takePendingLocked(k []byte) (sent, bool) {
	n, ok := s.ownSeq(k)
	if !ok {
		return sent{}, false
	}
	p, ok := s.pending[n]
	delete(s.pending, n)
	return p, ok
}

// cancellation is the notifications/cancelled of the proxy's own request
// under key (its id's JSON text), given up on with err.
func cancellation(key string, err error) []byte {
	reason := "the caller cancelled the request"
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		reason = "no answer came in time"
	case errors.Is(err, intercept.ErrSessionEnded):
		reason = "the session ended"
	}
	params := `{"requestId":` + key + `,"reason":"` + reason + `"}`
	return jsonrpc.NewRequest(nil, "notifications/cancelled", json.RawMessage(params))
}

// maxGivenUp bounds Session.givenUp.
const maxGivenUp = 256

// giveUpLocked notes key, the id of a request of the proxy's own that it
// cancelled, so that an answer that comes anyway is dropped quietly.
// s.mu must be held.
func (s *Session) giveUpLocked(key string) {
	if s.givenUp == nil || len(s.givenUp) >= maxGivenUp {
		s.givenUp = make(map[string]struct{})
	}
	s.givenUp[key] = struct{}{}
}

// droppedOwn logs the drop of an answer under key, an id of the proxy's
// own that no request waits on: quietly for a request it cancelled, whose
// answer the upstream was free to send, or once the session is ending;
// else loudly, as a second answer or one to a request never made.
func (s *Session) droppedOwn(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.droppedOwnLocked(key)
}

// droppedOwnLocked is droppedOwn with s.mu held.
func (s *Session) droppedOwnLocked(key string) {
	if _, ok := s.givenUp[key]; ok {
		delete(s.givenUp, key)
		s.log.Debug("dropped the upstream's answer to a request the proxy cancelled", "id", key)
		return
	}
	if s.callsEnded {
		// The session answered what still waited as it ended; an answer
		// may still come after that, such as an HTTP upstream's account
		// of a request cut short by the stop.
		s.log.Debug("dropped an answer from the upstream that came as the session ended", "id", key)
		return
	}
	s.log.Warn("dropped an answer from the upstream to no request of the proxy's", "id", key)
}

// answered hands the outcome of one of the proxy's own requests to its
// sender: the answer msg, or err when none came.
func (s *Session) answered(p sent, msg *jsonrpc.Message, err error) {
	defer s.acted()
	var result json.RawMessage
	if err == nil {
		result, err = outcomeOf(p.method, msg)
	}
	if p.token {
		s.tokenAnswered(p.key, err == nil && taskHandle(result))
	}
	if p.stop != nil {
		p.stop()
	}
	p.done.Answered(result, err)
}

// outcomeOf is what the answer msg to a request for method says, as
// Upstream.Send's contract reads: its result, or an error.
func outcomeOf(method string, msg *jsonrpc.Message) (json.RawMessage, error) {
	// "error": null, as JSON-RPC 1.0 servers write beside a result, is no
	// error.
	hasError := msg.Error != nil && string(msg.Error) != "null"
	switch {
	case hasError && msg.Result != nil:
		return nil, retry.Malformed("a response to "+method+" with both a result and an error", msg.Raw)
	case hasError:
		// The upstream's own answer, whatever its data says: only the
		// transport, outside the frames, says what it saw (noAnswer).
		// An error member that is no error object says no more of how
		// the call went than a missing result does.
		e, ok := jsonrpc.ErrorObject(msg.Error)
		if !ok {
			return nil, retry.Malformed("a response to "+method+" with an error that is not an error object", msg.Raw)
		}
		return nil, e
	case msg.Result == nil:
		return nil, retry.Malformed("a response to "+method+" with neither result nor error", msg.Raw)
	}
	return msg.Result, nil
}

// call is Send for a caller that waits.
func (s *Session) call(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	type outcome struct {
		result json.RawMessage
		err    error
	}
	ch := make(chan outcome, 1)
	s.Send(ctx, method, params, intercept.AnsweredFunc(func(result json.RawMessage, err error) { ch <- outcome{result, err} }))
	o := <-ch // at once when ctx ends (Send)
	return o.result, o.err
}

// listTools asks the upstream for one page of its tools, in the protocol
// the client speaks (meta is the client request's _meta).
func (s *Session) listTools(ctx context.Context, cursor string, meta json.RawMessage) (mcp.ListPage, error) {
	params := map[string]any{}
	if cursor != "" {
		params["cursor"] = cursor
	}
	if pm := protocolMeta(meta); pm != nil {
		params["_meta"] = pm
	}
	var raw json.RawMessage
	if len(params) > 0 {
		raw, _ = json.Marshal(params)
	}
	result, err := s.call(ctx, "tools/list", raw)
	if err != nil {
		s.log.Warn("listing the upstream's tools; treating unlisted tools as side effects", "err", err)
		return mcp.ListPage{}, err
	}
	return mcp.ParseListResult(result)
}

// acted notes that one of the proxy's own requests has been answered and
// its answer acted on.
func (s *Session) acted() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sending--; s.sending == 0 && s.idle != nil {
		close(s.idle)
		s.idle = nil
	}
}

// sendsSettled returns a channel closed once every request of the
// proxy's own has been answered and its answer acted on (an execution
// recorded as completed, say, or, with a store that waits on I/O, handed
// to the goroutine that records it, which Interceptor.Wait waits for).
func (s *Session) sendsSettled() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sending == 0 {
		// Not kept: a later send (a retry after its wait) and its answer
		// would close it again.
		return closedChannel
	}
	if s.idle == nil {
		s.idle = make(chan struct{})
	}
	return s.idle
}
