package streamhttp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
)

// A ServerSession is one client session of a Server, seen from the proxy's
// side as a frame connection: ReadFrame returns what the client POSTs, and
// WriteFrame sends a frame to the client on the stream it belongs to.
//
// A frame written is never lost to a broken connection: it is held, with an
// event id, in the session's bounded event store, and a client that
// reconnects with Last-Event-ID receives what it missed (spec 2025-11-25,
// "Resumability and Redelivery").
type ServerSession struct {
	id        string // the Mcp-Session-Id; a lane name for a stateless lane
	actor     string
	remote    string // the address of the client that opened it
	stateless bool   // a 2026-07-28 lane: no session, the client's ids rewritten
	srv       *Server

	in        chan inFrame  // client frames for ReadFrame
	done      chan struct{} // closed by close
	closeOnce sync.Once
	why       string // why it was closed (EndDeleted...); set before done is closed

	// mu guards streams, nextStream, writers, get, pending, ended,
	// progress, held, heldBytes, pinned, pinnedBytes, writing,
	// writingBytes, taken, active, lastActive,
	// nextID, origIDs, origTokens, opening, opened, named and version, and
	// every field of the streams and pendingRequests they hold but a
	// stream's num, isJSON, isBatch and opens, set when the stream is made.
	mu sync.Mutex
	// opening is set until the initialize that opens the session is
	// registered; opened once the proxy has passed on its answer and that
	// is a result, and version is the protocolVersion the result gave.
	opening bool
	opened  bool
	version string
	// named is set once a response has carried the session id to the
	// client: before, no client can name the session.
	named bool
	// streams holds each SSE stream's events, by stream number.
	streams    map[int64]*stream
	nextStream int64
	writers    int64 // generations given to stream writers
	// get is the standing stream that GET opens, for messages the server
	// starts; created on first use.
	get *stream
	// pending maps a request id the client is owed an answer for (its
	// jsonrpc.IDKey, as the proxy sees it) to the request, which names
	// the streams that carry the answer.
	pending map[string]*pendingRequest
	// ended is set once endPending has run: the session takes no more
	// requests, since nothing would answer them.
	ended bool
	// progress maps the key of a progress token (jsonrpc.IDKey) to the
	// stream of the request that asked for progress, and origTokens that
	// key to the token as the client wrote it. An upstream may write the
	// token another way (1.0 as 1, "a" as "\u0061"), as it may an id; on
	// a stateless lane it goes upstream renamed (renameLocked).
	progress   map[string]*stream
	origTokens map[string]json.RawMessage
	// held lists every event held, oldest first, for eviction; but the
	// pinned answers, which pinned and pinnedBytes count.
	held        []heldEvent
	heldBytes   int
	pinned      int
	pinnedBytes int
	// writing and writingBytes count the answers that writers took while
	// pinned and have not finished writing: a client that does not read
	// holds them in memory as surely as pinned ones (admitLocked).
	writing      int
	writingBytes int
	// taken counts the bytes writers copied from held events and have
	// not finished writing. It counts against EventBufferBytes with
	// heldBytes: a client that does not read its stream leaves the copy
	// in memory however long the events stay held.
	taken int
	// active counts HTTP requests under way; lastActive is when the last
	// one ended. The idle reaper reads both.
	active     int
	lastActive time.Time
	// For a stateless lane: the next id to give a client request, and the
	// client's own id for each one given.
	nextID  int64
	origIDs map[string]json.RawMessage
	// leaving holds the lane's requests whose clients gave up on them,
	// by key, until the proxy reads their cancellation (inFrame.forget).
	// The proxy may not have read a request yet, and names it then by
	// its client's id and trace headers (ClientID, TraceHeaders).
	leaving map[string]*pendingRequest
	// unread holds the answers whose writing WriteAnswer is to report,
	// until it is.
	unread map[*unreadAnswer]struct{}
}

// An inFrame is a frame for ReadFrame, and the keys of the lane requests
// (ServerSession.leaving) it cancels, to let go of once it is read.
type inFrame struct {
	frame  []byte
	forget []string
}

// A pendingRequest is a client request not yet answered. Its session's
// mu guards it.
type pendingRequest struct {
	// streams carry the answer: the request's own, and one more each time
	// the client sends the request again while it is pending.
	streams []*stream
	frame   []byte          // the request as the client sent it, to tell a re-send
	id      json.RawMessage // its id as the client spelled it, for an answer of the session's own
	token   string          // the key of its progress token, if any
	opens   bool            // it is the initialize that opened the session
	// traceparent and tracestate are the W3C trace context headers of
	// the POST that carried it, if any (TraceHeaders).
	traceparent, tracestate string
}

// TraceHeaders returns the W3C trace context headers (traceparent and
// tracestate) of the HTTP request that carried the client's request
// under key (its jsonrpc.IDKey as the proxy sees it), while it is owed
// an answer; empty when it carried none. They are the transport's facts,
// which a message cannot forge: the request's own _meta may carry
// another parent, which then wins.
func (ss *ServerSession) TraceHeaders(key string) (traceparent, tracestate string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	p := ss.pending[key]
	if p == nil {
		p = ss.leaving[key]
	}
	if p == nil {
		return "", ""
	}
	return p.traceparent, p.tracestate
}

// answerLocked appends the answer to every stream of p. written, if not
// nil, is called once, with nil once the answer has been written to the
// client on one of them, or ErrNeverRead once it never can be (its
// events evicted, or the session gone: dropUnread).
func (ss *ServerSession) answerLocked(p *pendingRequest, frame []byte, written func(error)) {
	var u *unreadAnswer
	if written != nil {
		u = ss.holdUnreadLocked(p, written)
	}
	for _, st := range p.streams {
		ss.appendAnswerLocked(st, frame, u)
		if st.want--; st.want == 0 {
			ss.endLocked(st)
		}
	}
}

func newServerSession(srv *Server, id, actor, remote string, stateless bool) *ServerSession {
	return &ServerSession{
		id:         id,
		actor:      actor,
		remote:     remote,
		stateless:  stateless,
		srv:        srv,
		in:         make(chan inFrame, 64),
		done:       make(chan struct{}),
		streams:    make(map[int64]*stream),
		pending:    make(map[string]*pendingRequest),
		progress:   make(map[string]*stream),
		origIDs:    make(map[string]json.RawMessage),
		leaving:    make(map[string]*pendingRequest),
		origTokens: make(map[string]json.RawMessage),
		lastActive: srv.now(),
	}
}

// ID returns the session's Mcp-Session-Id, or for a stateless lane its
// name, "stateless:" and the actor.
func (ss *ServerSession) ID() string { return ss.id }

// Actor returns who the session's bearer token belongs to (or the
// server's actor when it checks none).
func (ss *ServerSession) Actor() string { return ss.actor }

// Stateless reports whether the session carries 2026-07-28 requests,
// which belong to no session: one such lane serves every stateless
// request of one actor.
func (ss *ServerSession) Stateless() bool { return ss.stateless }

// ReadFrame returns the next frame the client sent. It returns io.EOF once
// the session is closed: the client deleted it, it sat idle too long, or
// the server is shutting down.
func (ss *ServerSession) ReadFrame() ([]byte, error) {
	select {
	case f := <-ss.in:
		if f.forget != nil {
			ss.mu.Lock()
			for _, key := range f.forget {
				delete(ss.leaving, key)
				delete(ss.origIDs, key)
			}
			ss.mu.Unlock()
		}
		return f.frame, nil
	case <-ss.done:
		return nil, io.EOF
	}
}

// Close ends the session: ReadFrame returns io.EOF, and the client's next
// request for it is answered 404.
func (ss *ServerSession) Close() error {
	ss.close()
	return nil
}

func (ss *ServerSession) close() { ss.closeFor("") }

// Why a Server ends a session (ServerSession.EndReason).
const (
	EndDeleted    = "deleted"           // the client sent DELETE
	EndIdle       = "idle"              // it sat idle longer than IdleTimeout
	EndEvicted    = "evicted"           // it sat idle, and a new session needed its room
	EndStopped    = "proxy stopped"     // the Server was closed
	EndInitFailed = "initialize failed" // its initialize was answered with an error
	EndInitLeft   = "initialize left"   // its client went before the answer to its initialize
)

// closeFor closes the session, saying why.
func (ss *ServerSession) closeFor(why string) {
	ss.closeOnce.Do(func() {
		ss.why = why
		close(ss.done)
	})
}

// EndReason says why the Server ended the session (EndDeleted, EndIdle,
// EndEvicted, EndStopped, EndInitFailed, EndInitLeft), once ReadFrame has returned io.EOF; "" while
// it is open, or when its Close ended it.
func (ss *ServerSession) EndReason() string {
	if !ss.closed() {
		return ""
	}
	return ss.why
}

// RemoteAddr returns the network address of the client that opened the
// session, as net/http gives it (Request.RemoteAddr).
func (ss *ServerSession) RemoteAddr() string { return ss.remote }

func (ss *ServerSession) closed() bool {
	select {
	case <-ss.done:
		return true
	default:
		return false
	}
}

// WriteFrame sends frame to the client: an answer on the stream of the
// request it answers, a progress notification on the stream of the
// request that asked for it (on a stateless lane, nowhere once that is
// answered), and any other message the server starts on
// the GET stream if the client has one open, else on the newest POST
// stream still owed an answer, else held on the GET stream for when it
// opens; on a stateless lane, only on the stream of the request it names
// (laneStreamLocked).
func (ss *ServerSession) WriteFrame(frame []byte) error {
	return ss.WriteAnswer(frame, nil)
}

// WriteAnswer is WriteFrame for the answer to a request, calling written
// once: with nil once that answer has been written to the client, on the
// request's own stream, on a stream the client resumes, or as the JSON
// body; with ErrNeverRead once it never can be, because the client had
// not read it when the session's buffer dropped it, or when the session
// went (it dropped the request and did not resume it, or the answer came
// after the session ended); with
// another error at once if no request of the session awaits it. "Written" means the
// write and its flush succeeded, begun while the client's request was
// still open: a client that closes its connection as soon as it has
// read the answer has it, and bytes handed to a connection the client
// closes at that instant may still count. An answer a writer was writing as the session went
// is not reported at all. A batch frame never calls written.
func (ss *ServerSession) WriteAnswer(frame []byte, written func(error)) error {
	return ss.write(frame, written, "")
}

// WriteRelated is WriteFrame for a message the server starts that
// relates to the client's request under key (its jsonrpc.IDKey, as the
// proxy sees it): it goes on that request's SSE stream while the stream
// is open, where the client reads it beside the answer (spec 2025-11-25,
// basic/transports, "Sending Messages to the Server": messages sent on
// the stream of a POST "SHOULD relate to the originating client
// request"), and else where WriteFrame puts it.
func (ss *ServerSession) WriteRelated(frame []byte, key string) error {
	return ss.write(frame, nil, key)
}

// write is WriteAnswer and WriteRelated.
func (ss *ServerSession) write(frame []byte, written func(error), related string) error {
	// Our own copy: the event store keeps it, and the caller may reuse
	// frame.
	frame = bytes.Clone(frame)
	m, err := jsonrpc.Decode(frame)
	if err != nil {
		return fmt.Errorf("writing to the client: %w", err)
	}
	if !m.Batch {
		if !ss.route(m, written, related) && written != nil {
			written(errNotAwaited)
		}
		return nil
	}
	msgs, err := jsonrpc.DecodeBatch(frame)
	if err != nil {
		return fmt.Errorf("writing to the client: %w", err)
	}
	for _, m := range msgs {
		ss.route(m, nil, related)
	}
	return nil
}

// route appends one message to its stream; the stream keeps m.Raw. See
// WriteFrame for which stream, WriteAnswer for written, and WriteRelated
// for related. It reports false for an answer that no request of the
// session's is owed.
func (ss *ServerSession) route(m *jsonrpc.Message, written func(error), related string) bool {
	frame := m.Raw
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if m.IsResponse() {
		key := string(jsonrpc.IDKey(m.ID)) // an upstream may answer 5 for 5.0
		p := ss.pending[key]
		if p == nil {
			ss.srv.log.Debug("an answer for no request of the session's was dropped", "session", ss.id, "id", key)
			return false
		}
		delete(ss.pending, key)
		if p.opens && m.Result != nil {
			ss.opened = true
			ss.version, _ = jsonrpc.StringValue(member(m.Result, "protocolVersion"))
		}
		// The idle timeout counts from here: a client whose stream broke
		// while it waited has all of it to come back for the answer.
		ss.lastActive = ss.srv.now()
		ss.dropTokenLocked(p)
		if ss.stateless {
			frame = ss.laneAnswerLocked(m, key)
			delete(ss.origIDs, key)
		}
		ss.answerLocked(p, frame, written)
		if p.opens && m.Result == nil {
			// MCP gives a session id with an InitializeResult: a session
			// whose initialize failed ends, its upstream stopped and its
			// room freed. Its stream still carries the error.
			ss.closeFor(EndInitFailed)
		}
		return true
	}
	if ss.stateless && m.IsRequest() {
		// No client of the lane can post an answer, having no session.
		// In the 2026-07-28 protocol a server asks within a call's
		// answer; the go-sdk's pings anyway.
		ss.answerServerRequest(m, "mcp-idempotent: a client of the 2026-07-28 protocol takes no requests of the server's, such as %q: ask within the call's answer (inputRequests)")
		return true
	}
	if m.Method == "notifications/progress" {
		token, err := jsonrpc.MemberOnce(m.Params, mcp.MetaProgressToken)
		if err != nil {
			// Routed by one token, it would be read by the other: most
			// JSON parsers keep the last of a repeated member, Go's
			// takes "ProgressToken" too. Refused, not guessed at.
			ss.srv.log.Warn("dropped the server's progress: its params are ambiguous", "session", ss.id, "err", err)
			return true
		}
		key := string(jsonrpc.IDKey(token))
		if st := ss.progress[key]; st != nil {
			if orig := ss.origTokens[key]; orig != nil && !bytes.Equal(orig, token) {
				frame = jsonrpc.Replace(frame, token, orig)
			}
			ss.appendLocked(st, frame)
			return true
		}
		if ss.stateless {
			// Its request is answered, and its token is the lane's: on
			// another client's stream, that client could take it for
			// its own. No client of the lane has a stream for it.
			ss.srv.log.Debug("progress on a request answered was dropped: a stateless lane has no stream for it", "lane", ss.id)
			return true
		}
	}
	if ss.stateless && m.Method == "notifications/cancelled" && ss.laneCancelledLocked(m) {
		return true
	}
	if ss.stateless {
		if st, frame := ss.laneStreamLocked(m, related); st != nil {
			ss.appendLocked(st, frame)
		}
		return true
	}
	st := ss.relatedStreamLocked(related)
	if st == nil {
		st = ss.serverStreamLocked()
	}
	if st == ss.get && m.IsRequest() && ss.srv.opts.JSONResponse && !ss.opened {
		// Only the GET stream could carry it, and no client can open
		// that before the answer to initialize names the session; that
		// answer, one JSON body, carries nothing else. An upstream that
		// waits for it before it answers initialize (a ping) would wait
		// for ever.
		ss.answerServerRequest(m, "mcp-idempotent: the client cannot take a request of the server's, such as %q, before the answer to initialize: its answers are JSON bodies (serve --json-response), and it has no session to open a GET stream in")
		return true
	}
	ss.appendLocked(st, frame)
	return true
}

// endPending answers every request still owed an answer once the proxy
// for the session has stopped, so that no client waits on a stream that
// will never end.
func (ss *ServerSession) endPending() {
	unread := ss.unreadRequests()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.ended = true
	for key, p := range ss.pending {
		msg := "the proxy session ended before the request was answered"
		if unread[key] {
			// A call the client must know did not run, or it cannot
			// tell whether sending it again would run it twice.
			msg = "the session ended before the proxy read this request: it was not sent upstream, and did not run; initialize a new session and send it again"
		}
		// Under the id as the client spelled it: the key is its IDKey,
		// which for a string with an escape is another id, or not JSON.
		ss.answerLocked(p, jsonrpc.NewErrorResponse(p.id, &jsonrpc.Error{
			Code:    jsonrpc.CodeInternalError,
			Message: msg,
		}), nil)
	}
	clear(ss.pending)
	clear(ss.progress)
	clear(ss.origIDs)
	clear(ss.leaving)
	clear(ss.origTokens)
}

// unreadRequests drains the frames the proxy never read (they wait in
// ss.in when the session ends under a burst) and returns the keys of the
// requests they hold. Once the proxy has stopped, nothing reads ss.in.
func (ss *ServerSession) unreadRequests() map[string]bool {
	keys := make(map[string]bool)
	for {
		select {
		case f := <-ss.in:
			frame := f.frame
			var msgs []*jsonrpc.Message
			if isBatch(frame) {
				msgs, _ = jsonrpc.DecodeBatch(frame)
			} else if m, err := jsonrpc.Decode(frame); err == nil {
				msgs = []*jsonrpc.Message{m}
			}
			for _, m := range msgs {
				if m.IsRequest() {
					keys[string(jsonrpc.IDKey(m.ID))] = true
				}
			}
		default:
			return keys
		}
	}
}

// dropTokenLocked forgets the progress token of p, which is answered,
// cancelled or given up on.
func (ss *ServerSession) dropTokenLocked(p *pendingRequest) {
	if p.token != "" {
		delete(ss.progress, p.token)
		delete(ss.origTokens, p.token)
	}
}

// progressToken returns the progress token of a request whose params are
// params, as raw JSON, or "".
func progressToken(params json.RawMessage) string {
	return string(requestTokenValue(params))
}

// requestTokenValue returns the progress token of a request whose params
// are params, params._meta.progressToken, as the subslice of params that
// holds it, or nil. A member progressToken of params is the request's own.
func requestTokenValue(params json.RawMessage) []byte {
	return progressTokenValue(firstMember(params, "_meta"))
}

// progressTokenValue returns the token of a notifications/progress whose
// params are params, params.progressToken, as the subslice of params that
// holds it, or nil. Its params may give _meta too, first.
func progressTokenValue(params json.RawMessage) []byte {
	return firstMember(params, mcp.MetaProgressToken)
}

// firstMember returns the value of the first member of obj named name, as
// the subslice of obj that holds it, or nil.
func firstMember(obj []byte, name string) []byte {
	var v []byte
	jsonrpc.EachMember(obj, func(n, value []byte) bool {
		if string(n) == name {
			v = value
			return false
		}
		return true
	})
	return v
}
