package streamhttp

import (
	"cmp"
	"slices"
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
	// gone is the sequence number after the last event evicted, 0 if
	// none: a writer or a resume from before it has lost events.
	gone int64
	// attended is set while the request that made the stream, or a
	// client that resumed it, may still write it: its answers are then
	// pinned until a writer takes them.
	attended bool
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
	// pinned is set for an answer held out of the session's bounds, for
	// the writer of its attended stream (appendAnswerLocked).
	pinned bool
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
	ss.appendEventLocked(st, data, nil, false)
}

// appendAnswerLocked is appendLocked for an answer to a client's request,
// carrying u, an answer whose writing is to be reported (nil for none).
// On a stream that is attended it is pinned: held out of the bounds, and
// never evicted, until a writer takes it.
func (ss *ServerSession) appendAnswerLocked(st *stream, data []byte, u *unreadAnswer) {
	ss.appendEventLocked(st, data, u, true)
}

func (ss *ServerSession) appendEventLocked(st *stream, data []byte, u *unreadAnswer, isAnswer bool) {
	ev := sseEvent{seq: st.next, data: data, pinned: isAnswer && st.attended}
	if u != nil {
		ev.written, ev.answer = u.wrote, u
		u.held++
	}
	st.next++
	st.events = append(st.events, ev)
	ss.wakeLocked(st)
	if ev.pinned {
		ss.pinned++
		ss.pinnedBytes += len(data)
		return
	}
	ss.held = append(ss.held, heldEvent{st: st, seq: ev.seq})
	ss.heldBytes += len(data)
	ss.evictLocked()
}

// unpinLocked puts event i of st, pinned, among those the bounds hold, as
// the newest; the caller evicts (evictLocked) once it may.
func (ss *ServerSession) unpinLocked(st *stream, i int) {
	ev := &st.events[i]
	ev.pinned = false
	ss.pinned--
	ss.pinnedBytes -= len(ev.data)
	ss.held = append(ss.held, heldEvent{st: st, seq: ev.seq})
	ss.heldBytes += len(ev.data)
}

// unattendLocked marks st as no longer attended, once no request writes
// it: the client went, and may resume it or not. Its answers are no longer
// pinned, and are held as any event is, within the bounds.
func (ss *ServerSession) unattendLocked(st *stream) {
	if !st.attended || st.writer != 0 {
		return
	}
	st.attended = false
	for i := range st.events {
		if st.events[i].pinned {
			ss.unpinLocked(st, i)
		}
	}
	ss.evictLocked()
}

// evictLocked evicts the oldest events the session holds beyond its
// bounds. A pinned answer is not among them: a later event of its stream
// may go before it. The bytes writers took and have not written count
// too (takeLocked).
func (ss *ServerSession) evictLocked() {
	opts := &ss.srv.opts
	for len(ss.held) > 1 && (len(ss.held) > opts.EventBuffer || ss.heldBytes+ss.taken > opts.EventBufferBytes) {
		old := ss.held[0]
		ss.held[0] = heldEvent{}
		ss.held = ss.held[1:]
		st := old.st
		if i, ok := slices.BinarySearchFunc(st.events, old.seq, func(ev sseEvent, seq int64) int {
			return cmp.Compare(ev.seq, seq)
		}); ok {
			ss.heldBytes -= len(st.events[i].data)
			if u := st.events[i].answer; u != nil {
				ss.evictedLocked(u)
			}
			st.removeEvent(i)
			st.gone = max(st.gone, old.seq+1)
		}
		if st.done && len(st.events) == 0 {
			delete(ss.streams, st.num)
		}
	}
}

// removeEvent removes event i of st, keeping the others in order.
func (st *stream) removeEvent(i int) {
	if i == 0 {
		st.events[0] = sseEvent{}
		st.events = st.events[1:]
		return
	}
	st.events = slices.Delete(st.events, i, i+1)
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
