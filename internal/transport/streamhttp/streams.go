package streamhttp

import (
	"strconv"
	"strings"
)

// A stream is one SSE stream's events: the answer to one POST, or the
// standing GET stream. Its session's mu guards every field but num,
// isJSON, isBatch and opens, which are set when it is made and never
// change.
type stream struct {
	num    int64
	events []sseEvent // held events, oldest first
	next   int64      // sequence number of the next event
	// sent, for the GET stream, is the sequence number after the last
	// event written to a client: a GET without Last-Event-ID writes from
	// there, what the client has not been sent, and not again what it
	// has (a request of the server's twice would be answered twice).
	sent int64
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
	// isBatch is set for a POST whose body is a batch: its JSON answer
	// is an array, even of one answer (JSON-RPC 2.0, section 6).
	isBatch bool
	// opens is set for the POST of the initialize that opened the
	// session: its response gives the client the session id.
	opens bool
}

// An sseEvent is one event held on a stream, for its writer and for a
// client that resumes the stream.
type sseEvent struct {
	seq  int64
	data []byte // one JSON-RPC message; empty for the priming event
	// written, if not nil, is called once the event has been written to
	// the client: the answer reached the caller's transport. answer is
	// the answer it carries, for the eviction to count.
	written func()
	answer  *unreadAnswer
}

// A heldEvent names an event in the session's order of eviction.
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

// newStreamLocked makes a stream under the session's next number.
func (ss *ServerSession) newStreamLocked() *stream {
	ss.nextStream++
	st := &stream{num: ss.nextStream, notify: make(chan struct{})}
	ss.streams[st.num] = st
	return st
}

// getStreamLocked returns the standing GET stream, making it on first use.
func (ss *ServerSession) getStreamLocked() *stream {
	if ss.get == nil {
		ss.get = ss.newStreamLocked()
	}
	return ss.get
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

// relatedStreamLocked returns the open SSE stream of the client's request
// under key, the newest if the client sent the request again, or nil: the
// request is answered, or it is answered with one JSON body, which cannot
// carry a message of the server's.
func (ss *ServerSession) relatedStreamLocked(key string) *stream {
	if key == "" {
		return nil
	}
	p := ss.pending[key]
	if p == nil {
		return nil
	}
	for i := len(p.streams) - 1; i >= 0; i-- {
		if st := p.streams[i]; !st.done && !st.isJSON {
			return st
		}
	}
	return nil
}

// appendLocked holds one event on st and wakes its writer, evicting the
// oldest events of the session beyond its bounds.
func (ss *ServerSession) appendLocked(st *stream, data []byte) {
	ss.appendAnswerLocked(st, data, nil)
}

// appendAnswerLocked is appendLocked for an event carrying u, an answer
// whose writing is to be reported (nil for none).
func (ss *ServerSession) appendAnswerLocked(st *stream, data []byte, u *unreadAnswer) {
	ev := sseEvent{seq: st.next, data: data}
	if u != nil {
		ev.written, ev.answer = u.wrote, u
		u.held++
	}
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
			if u := old.st.events[0].answer; u != nil {
				ss.evictedLocked(u)
			}
			old.st.events[0] = sseEvent{}
			old.st.events = old.st.events[1:]
		}
		if old.st.done && len(old.st.events) == 0 {
			delete(ss.streams, old.st.num)
		}
	}
}

// wakeLocked wakes the writer of st, if any.
func (ss *ServerSession) wakeLocked(st *stream) {
	close(st.notify)
	st.notify = make(chan struct{})
}

// endLocked marks st done: its writer writes the events it holds, then
// ends the response.
func (ss *ServerSession) endLocked(st *stream) {
	st.done = true
	ss.wakeLocked(st)
}
