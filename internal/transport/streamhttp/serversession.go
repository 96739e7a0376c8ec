package streamhttp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
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
	stateless bool // a 2026-07-28 lane: no session, the client's ids rewritten
	srv       *Server

	in        chan []byte   // client frames for ReadFrame
	done      chan struct{} // closed by close
	closeOnce sync.Once

	mu sync.Mutex // protects the fields below
	// streams holds each SSE stream's events, by stream number.
	streams    map[int64]*stream
	nextStream int64
	writers    int64 // generations given to stream writers
	// get is the standing stream that GET opens, for messages the server
	// starts; created on first use.
	get *stream
	// pending maps a request id the client is owed an answer for (its
	// jsonrpc.IDKey, as the proxy sees it) to the stream that carries the
	// answer.
	pending map[string]*pendingRequest
	// ended is set once endPending has run: the session takes no more
	// requests, since nothing would answer them.
	ended bool
	// progress maps a progress token (raw JSON) to the stream of the
	// request that asked for progress.
	progress map[string]*stream
	// held lists every event held, oldest first, for eviction.
	held      []heldEvent
	heldBytes int
	// active counts HTTP requests under way; lastActive is when the last
	// one ended. The idle reaper reads both.
	active     int
	lastActive time.Time
	// For a stateless lane: the next id to give a client request, and the
	// client's own id (and progress token) for each one given.
	nextID     int64
	origIDs    map[string]json.RawMessage
	origTokens map[string]json.RawMessage
}

// A pendingRequest is a client request not yet answered.
type pendingRequest struct {
	// streams carry the answer: the request's own, and one more each time
	// the client sends the request again while it is pending.
	streams []*stream
	frame   []byte // the request as the client sent it, to tell a re-send
	token   string // its progress token, if any
}

// answerLocked appends the answer to every stream of p. written, if not
// nil, is called once the answer has been written to the client on one of
// them.
func (ss *ServerSession) answerLocked(p *pendingRequest, frame []byte, written func()) {
	if written != nil {
		written = onceFunc(written)
	}
	for _, st := range p.streams {
		ss.appendWrittenLocked(st, frame, written)
		if st.want--; st.want == 0 {
			ss.endLocked(st)
		}
	}
}

// onceFunc returns a function that calls f the first time it is called,
// and lets go of f then (the event that holds it may be held long after).
func onceFunc(f func()) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			f()
			f = nil
		})
	}
}

// A stream is one SSE stream's events: the answer to one POST, or the
// standing GET stream.
type stream struct {
	num    int64
	events []sseEvent // held events, oldest first
	next   int64      // sequence number of the next event
	// want counts the answers still owed on the stream; it is done when
	// they have all been appended (never, for the GET stream).
	want int
	done bool
	// notify is closed, and replaced, whenever events are appended or the
	// stream ends, to wake its writer.
	notify chan struct{}
	// writer is the generation of the HTTP response writing the stream,
	// or 0 for none: a reconnect takes the stream over from a writer that
	// may not have noticed its connection is gone.
	writer int64
	// isJSON is set for a POST answered with one JSON body, not SSE.
	isJSON bool
}

type sseEvent struct {
	seq  int64
	data []byte // one JSON-RPC message; empty for the priming event
	// written, if not nil, is called once the event has been written to
	// the client: the answer reached the caller's transport.
	written func()
}

type heldEvent struct {
	st  *stream
	seq int64
}

// eventID names event seq of stream st; Last-Event-ID brings it back.
func eventID(st, seq int64) string {
	return strconv.FormatInt(st, 10) + "-" + strconv.FormatInt(seq, 10)
}

// parseEventID reads an id made by eventID.
func parseEventID(s string) (st, seq int64, ok bool) {
	a, b, found := strings.Cut(s, "-")
	if !found {
		return 0, 0, false
	}
	st, err1 := strconv.ParseInt(a, 10, 64)
	seq, err2 := strconv.ParseInt(b, 10, 64)
	return st, seq, err1 == nil && err2 == nil && st > 0 && seq >= 0
}

func newServerSession(srv *Server, id, actor string, stateless bool) *ServerSession {
	return &ServerSession{
		id:         id,
		actor:      actor,
		stateless:  stateless,
		srv:        srv,
		in:         make(chan []byte, 64),
		done:       make(chan struct{}),
		streams:    make(map[int64]*stream),
		pending:    make(map[string]*pendingRequest),
		progress:   make(map[string]*stream),
		origIDs:    make(map[string]json.RawMessage),
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
		return f, nil
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

func (ss *ServerSession) close() {
	ss.closeOnce.Do(func() { close(ss.done) })
}

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
// request that asked for it, and any other message the server starts on
// the GET stream if the client has one open, else on the newest POST
// stream still owed an answer, else held on the GET stream for when it opens.
func (ss *ServerSession) WriteFrame(frame []byte) error {
	return ss.WriteAnswer(frame, nil)
}

// WriteAnswer is WriteFrame for the answer to a request, calling written
// once that answer has been written to the client, if it ever is: on the
// request's own stream, on a stream the client resumes, or as the JSON
// body. An answer the client never reads (it dropped the request and did
// not resume it, or the session ended first) never calls it. "Written"
// means the write and its flush succeeded while the client's request was
// still open: bytes handed to a connection the client closes at that
// instant may still count. A batch frame never calls written.
func (ss *ServerSession) WriteAnswer(frame []byte, written func()) error {
	// Our own copy: the event store keeps it, and the caller may reuse
	// frame.
	frame = bytes.Clone(frame)
	m, err := jsonrpc.Decode(frame)
	if err != nil {
		return fmt.Errorf("writing to the client: %w", err)
	}
	if !m.Batch {
		ss.route(m, written)
		return nil
	}
	msgs, err := jsonrpc.DecodeBatch(frame)
	if err != nil {
		return fmt.Errorf("writing to the client: %w", err)
	}
	for _, m := range msgs {
		ss.route(m, nil)
	}
	return nil
}

// route appends one message to its stream; the stream keeps m.Raw. See
// WriteFrame for which stream, and WriteAnswer for written.
func (ss *ServerSession) route(m *jsonrpc.Message, written func()) {
	frame := m.Raw
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if m.IsResponse() {
		key := string(jsonrpc.IDKey(m.ID)) // an upstream may answer 5 for 5.0
		p := ss.pending[key]
		if p == nil {
			ss.srv.log.Debug("an answer for no request of the session's was dropped", "session", ss.id, "id", key)
			return
		}
		delete(ss.pending, key)
		// The idle timeout counts from here: a client whose stream broke
		// while it waited has all of it to come back for the answer.
		ss.lastActive = ss.srv.now()
		if p.token != "" {
			delete(ss.progress, p.token)
			delete(ss.origTokens, p.token)
		}
		if ss.stateless {
			// Give the client its own id back.
			frame = withID(frame, m.ID, ss.origIDs[key])
			delete(ss.origIDs, key)
		}
		ss.answerLocked(p, frame, written)
		return
	}
	if m.Method == "notifications/progress" {
		token := progressTokenValue(m.Params)
		if st := ss.progress[string(token)]; st != nil {
			if orig, ok := ss.origTokens[string(token)]; ok {
				frame = withID(frame, token, orig)
			}
			ss.appendLocked(st, frame)
			return
		}
	}
	ss.appendLocked(ss.serverStreamLocked(), frame)
}

// serverStreamLocked picks the stream for a message the server starts:
// the GET stream while the client has it open, else the newest POST
// stream still owed an answer (the client reads it, or resumes it), else
// the GET stream, to hold the message until the client opens it.
func (ss *ServerSession) serverStreamLocked() *stream {
	if ss.get != nil && ss.get.writer != 0 {
		return ss.get
	}
	var newest *stream
	for _, st := range ss.streams {
		if st != ss.get && !st.done && !st.isJSON && (newest == nil || st.num > newest.num) {
			newest = st
		}
	}
	if newest != nil {
		return newest
	}
	return ss.getStreamLocked()
}

func (ss *ServerSession) getStreamLocked() *stream {
	if ss.get == nil {
		ss.get = ss.newStreamLocked()
	}
	return ss.get
}

func (ss *ServerSession) newStreamLocked() *stream {
	ss.nextStream++
	st := &stream{num: ss.nextStream, notify: make(chan struct{})}
	ss.streams[st.num] = st
	return st
}

// appendLocked holds one event on st and wakes its writer, evicting the
// oldest events of the session beyond its bounds.
func (ss *ServerSession) appendLocked(st *stream, data []byte) {
	ss.appendWrittenLocked(st, data, nil)
}

// appendWrittenLocked is appendLocked for an event whose writing is to be
// told to written.
func (ss *ServerSession) appendWrittenLocked(st *stream, data []byte, written func()) {
	ev := sseEvent{seq: st.next, data: data, written: written}
	st.next++
	st.events = append(st.events, ev)
	ss.held = append(ss.held, heldEvent{st: st, seq: ev.seq})
	ss.heldBytes += len(data)
	ss.wakeLocked(st)
	opts := &ss.srv.opts
	for len(ss.held) > 1 && (len(ss.held) > opts.EventBuffer || ss.heldBytes > opts.EventBufferBytes) {
		old := ss.held[0]
		ss.held[0] = heldEvent{}
		ss.held = ss.held[1:]
		// Events leave a stream oldest first, as they entered it.
		if len(old.st.events) > 0 && old.st.events[0].seq == old.seq {
			ss.heldBytes -= len(old.st.events[0].data)
			old.st.events[0] = sseEvent{}
			old.st.events = old.st.events[1:]
		}
		if old.st.done && len(old.st.events) == 0 {
			delete(ss.streams, old.st.num)
		}
	}
}

func (ss *ServerSession) wakeLocked(st *stream) {
	close(st.notify)
	st.notify = make(chan struct{})
}

func (ss *ServerSession) endLocked(st *stream) {
	st.done = true
	ss.wakeLocked(st)
}

// endPending answers every request still owed an answer once the proxy
// for the session has stopped, so that no client waits on a stream that
// will never end.
func (ss *ServerSession) endPending() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.ended = true
	for key, p := range ss.pending {
		id := json.RawMessage(key)
		if ss.stateless {
			id = ss.origIDs[key]
		}
		ss.answerLocked(p, jsonrpc.NewErrorResponse(id, &jsonrpc.Error{
			Code:    jsonrpc.CodeInternalError,
			Message: "the proxy session ended before the request was answered",
		}), nil)
	}
	clear(ss.pending)
	clear(ss.progress)
	clear(ss.origIDs)
	clear(ss.origTokens)
}

// progressToken returns params._meta.progressToken as raw JSON, or "".
func progressToken(params json.RawMessage) string {
	return string(progressTokenValue(params))
}

// progressTokenValue returns params._meta.progressToken (or, in a
// notifications/progress, params.progressToken) as the subslice of params
// that holds it, or nil.
func progressTokenValue(params json.RawMessage) []byte {
	var token []byte
	jsonrpc.EachMember(params, func(name, value []byte) bool {
		switch string(name) {
		case "_meta":
			jsonrpc.EachMember(value, func(name, value []byte) bool {
				if string(name) == "progressToken" {
					token = value
					return false
				}
				return true
			})
			return false
		case "progressToken": // in a notifications/progress
			token = value
			return false
		}
		return true
	})
	return token
}

// withID returns frame with its id replaced by newID. id must be the
// subslice of frame that jsonrpc.Decode returned as the message's ID: the
// message is not encoded again, so every other byte is kept.
func withID(frame []byte, id, newID json.RawMessage) []byte {
	// Both slices end in the same backing array, so the difference of
	// their capacities is id's offset in frame.
	off := cap(frame) - cap(id)
	if off < 0 || off+len(id) > len(frame) || !bytes.Equal(frame[off:off+len(id)], id) {
		panic("streamhttp: withID: id is not a subslice of frame")
	}
	out := make([]byte, 0, len(frame)-len(id)+len(newID))
	out = append(out, frame[:off]...)
	out = append(out, newID...)
	return append(out, frame[off+len(id):]...)
}
