package streamhttp

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// answer writes st to the client until it is done, the client goes, or
// the session ends. It reports whether the stream was written to its end.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, ss *ServerSession, st *stream) bool {
	if st.isJSON {
		return s.answerJSON(w, r, ss, st)
	}
	if st.opens && !s.awaitOpened(w, r, ss, st) {
		return false
	}
	openStream(w)
	return s.pump(w, r, ss, st, 0)
}

// openStream sends the headers of an SSE response at once: the client
// learns that its request is in before the first event, which may be a
// long call away.
func openStream(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// answerJSON waits for st's answers and writes them as one JSON body.
func (s *Server) answerJSON(w http.ResponseWriter, r *http.Request, ss *ServerSession, st *stream) bool {
	ended := ss.done
	for {
		ss.mu.Lock()
		done, notify := st.done, st.notify
		var out [][]byte
		var b batch
		if done {
			out = ss.answersLocked(st, &b)
		}
		appended, opened := st.next, ss.opened
		ss.mu.Unlock()
		if done {
			if st.opens && opened {
				// Only with an InitializeResult (awaitOpened).
				ss.nameTo(w)
			}
			ok := s.writeJSON(w, r, out, b.written, appended, st.isBatch)
			ss.sent(&b, ok)
			return true
		}
		select {
		case <-notify:
		case <-r.Context().Done():
			return false
		case <-ended:
			// The answers still owed come all the same: from the
			// session's drain, or from endPending once it has stopped.
			ended = nil
		}
	}
}

// answersLocked returns the answers st holds, and fills b with the
// written callbacks of those that have one and what they are taken as.
// They are no longer pinned: the caller writes them, or its client has
// gone, and then tells sent.
func (ss *ServerSession) answersLocked(st *stream, b *batch) (out [][]byte) {
	for i := range st.events {
		ev := &st.events[i]
		if ev.pinned {
			ss.unpinLocked(st, i)
			b.writingLocked(ss, ev)
		}
		out = append(out, ev.data)
		if ev.written != nil {
			b.written = append(b.written, ev.written)
		}
		if ev.answer != nil {
			ev.answer.sending++
			b.taken = append(b.taken, ev.answer)
		}
	}
	ss.evictLocked() // after the loop: eviction changes st.events
	return out
}

// writeJSON writes the answers out of a stream that is done as one JSON
// body, an array if the POST was a batch, and then calls written. A
// stream that holds fewer answers than were appended to it (appended)
// is a 503, a stream that never had one a 202.
func (s *Server) writeJSON(w http.ResponseWriter, r *http.Request, out [][]byte, written []func(), appended int64, batch bool) bool {
	switch {
	case int64(len(out)) < appended:
		// Answers were evicted from the session's buffer before they
		// could be written, which pinning them should prevent. A
		// shorter array would lose them without a word: the client
		// must ask again (a tools/call attaches to its execution, or
		// gets its replay).
		writeRefusal(w, refuse(http.StatusServiceUnavailable,
			"the session's buffer dropped %d of the %d answers before they could be written: send the request again", appended-int64(len(out)), appended), jsonrpc.CodeInternalError)
		return false
	case len(out) == 0:
		// Its one request was cancelled: nothing to answer.
		w.WriteHeader(http.StatusAccepted)
		return false
	}
	w.Header().Set("Content-Type", "application/json")
	var body []byte
	if len(out) == 1 && !batch {
		body = out[0]
	} else {
		body = append(append([]byte("["), joinFrames(out)...), ']')
	}
	// The whole body goes out now, before the answers are counted
	// as written: a body left in net/http's buffer goes only when
	// the handler returns.
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	// Whether the client is still there is asked before the write, not
	// after: its Content-Length tells the client the body is whole, and
	// a client that closes its connection as soon as it has read it
	// (Connection: close) cancels the request while the handler still
	// runs. Asked after, an answer the client read would be told lost.
	open := r.Context().Err() == nil
	_, err := w.Write(body)
	if err == nil {
		err = flush(w)
	}
	if err == nil && open {
		for _, f := range written {
			f()
		}
		return true
	}
	return false
}

// flush sends what w holds to the client, and reports a failure to.
func flush(w http.ResponseWriter) error {
	err := http.NewResponseController(w).Flush()
	if errors.Is(err, http.ErrNotSupported) {
		return nil
	}
	return err
}

func joinFrames(frames [][]byte) []byte {
	var b []byte
	for i, f := range frames {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, f...)
	}
	return b
}

// pump writes st's events from sequence number from on, as they come,
// until the stream is done, the client goes, the session ends, or another
// request takes the stream over. It reports whether it wrote the end.
func (s *Server) pump(w http.ResponseWriter, r *http.Request, ss *ServerSession, st *stream, from int64) bool {
	return s.pumpAs(w, r, ss, st, from, ss.claim(st))
}

// pumpAs is pump for the writer of generation gen, which has claimed st.
func (s *Server) pumpAs(w http.ResponseWriter, r *http.Request, ss *ServerSession, st *stream, from, gen int64) bool {
	defer ss.release(st, gen)
	flusher, _ := w.(http.Flusher)
	var b batch
	ended := ss.done
	ending := false // the session has ended: write what is held, then stop
	keep := newKeepAlive(s.opts.KeepAlive)
	defer keep.stop()
	for {
		ss.mu.Lock()
		if st.writer != gen {
			ss.mu.Unlock()
			return false
		}
		from = s.takeLocked(ss, st, from, &b)
		more := b.more
		done := st.done && from >= st.next
		owed := st.want > 0
		notify := st.notify
		isGet := st == ss.get
		ss.mu.Unlock()
		wrote := len(b.buf) > 0
		ok := b.send(w, r)
		ss.sent(&b, ok)
		if !ok {
			return false
		}
		if wrote {
			keep.wrote()
			if isGet {
				ss.mu.Lock()
				st.sent = max(st.sent, from)
				ss.mu.Unlock()
			}
		}
		if done {
			return true
		}
		if more {
			continue // the take stopped at maxTake: the rest is held already
		}
		if ending {
			return false
		}
		select {
		case <-notify:
		case <-keep.due():
			if !keep.send(w, r, flusher) {
				return false
			}
		case <-r.Context().Done():
			return false
		case <-ended:
			// A stream still owed answers gets them all the same: from
			// the session's drain, or from endPending once it has
			// stopped. Any other (the GET stream) ends.
			ended = nil
			ending = !owed
		}
	}
}

// claim makes the caller the writer of st, taking the stream over from
// any writer before it, and returns the caller's generation.
func (ss *ServerSession) claim(st *stream) int64 {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.claimLocked(st)
}

func (ss *ServerSession) claimLocked(st *stream) int64 {
	ss.writers++
	st.writer = ss.writers
	// A client that resumes a request's stream has its later answers
	// pinned while it writes; the GET stream carries none.
	st.attended = st != ss.get
	return st.writer
}

// release lets go of st, unless another writer has taken it over since.
func (ss *ServerSession) release(st *stream, gen int64) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if st.writer == gen {
		st.writer = 0
		ss.unattendLocked(st)
	}
}

// A batch is what a writer takes from its stream at once.
type batch struct {
	buf     []byte   // the events, as SSE
	written []func() // the written callbacks of the answers among them
	taken   []*unreadAnswer
	// writing and writingBytes count the answers taken while pinned,
	// which the session counts as its writing until sent.
	writing, writingBytes int
	// copied counts the bytes of buf copied from events within the
	// session's bounds, which the session counts as its taken until
	// sent; more is set when the take stopped at maxTake.
	copied int
	more   bool
}

// maxTake bounds what one take copies, as does half EventBufferBytes
// if smaller, but for a single event that is larger. The copy counts
// against the session's bounds (a writer whose client does not read
// keeps it as long as the connection stays open): half leaves the
// newest event room, which eviction always keeps.
const maxTake = 64 << 10

// writingLocked counts ev, an answer taken while pinned, as being
// written, in b and in ss, until sent.
func (b *batch) writingLocked(ss *ServerSession, ev *sseEvent) {
	b.writing++
	b.writingBytes += len(ev.data)
	ss.writing++
	ss.writingBytes += len(ev.data)
}

// takeLocked fills b with the events of st from sequence number from on,
// and returns the sequence number that follows the last one taken. The
// answers it takes are no longer pinned: this writer writes them, or its
// client has gone.
func (s *Server) takeLocked(ss *ServerSession, st *stream, from int64, b *batch) int64 {
	if cap(b.buf) > 2*maxTake {
		b.buf = nil // let go of what one large event grew it to
	}
	b.buf, b.written, b.taken, b.more = b.buf[:0], b.written[:0], b.taken[:0], false
	limit := min(maxTake, s.opts.EventBufferBytes/2)
	lost := false
	for i := range st.events {
		ev := &st.events[i]
		if ev.seq < from {
			continue
		}
		n := len(b.buf)
		b.buf = appendEvent(b.buf, eventID(st.num, ev.seq), ev.data)
		if n > 0 && len(b.buf) > limit {
			b.buf, b.more = b.buf[:n], true
			break
		}
		// The session's bound evicted events before this writer took
		// them: lost to this stream, which goes on (and ends) without
		// them rather than wait for them for ever.
		lost = lost || ev.seq > from
		if !ev.pinned {
			b.copied += len(b.buf) - n
		}
		if ev.written != nil {
			b.written = append(b.written, ev.written)
		}
		if ev.answer != nil {
			ev.answer.sending++
			b.taken = append(b.taken, ev.answer)
		}
		if ev.pinned {
			ss.unpinLocked(st, i)
			b.writingLocked(ss, ev)
		}
		from = ev.seq + 1
	}
	if from < st.gone && !b.more {
		lost, from = true, st.gone
	}
	if lost {
		s.log.Warn("events were dropped from a session's buffer before its client read them; a request whose answer was among them must be sent again",
			"session", ss.id, "held_at_most", s.opts.EventBuffer)
	}
	ss.taken += b.copied
	// After the loop: eviction changes st.events.
	ss.evictLocked()
	return from
}

// send writes b to the client, if it holds anything, and then calls its
// written callbacks. It reports false when the client has gone.
func (b *batch) send(w http.ResponseWriter, r *http.Request) bool {
	if len(b.buf) == 0 {
		return true
	}
	// Whether the client is still there is asked before the write, as
	// writeJSON does: a client may close its connection as soon as it
	// has read its answer's event, before the flush returns here.
	if r.Context().Err() != nil {
		return false
	}
	if _, err := w.Write(b.buf); err != nil {
		return false
	}
	if flush(w) != nil {
		return false
	}
	for _, f := range b.written {
		f() // the answers in b reached the client's transport
	}
	return true
}

// appendEvent appends one SSE event. A JSON-RPC frame holds no newline
// (JSON strings escape them), so data fits on one line.
func appendEvent(b []byte, id string, data []byte) []byte {
	b = append(b, "id: "...)
	b = append(b, id...)
	if len(data) == 0 {
		return append(b, "\ndata:\n\n"...)
	}
	b = append(b, "\nevent: message\ndata: "...)
	b = append(b, data...)
	return append(b, "\n\n"...)
}
