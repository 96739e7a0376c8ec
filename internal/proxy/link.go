package proxy

import (
	"bytes"
	"errors"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// A link is one connection to the upstream. Its conn and frames are set
// before it is shared or, when the upstream is started again, under
// Session.mu before ready is closed: read them under Session.mu, or once
// ready is closed.
type link struct {
	conn   Conn
	frames frameBuilder  // conn as a frameBuilder, or nil
	ready  chan struct{} // closed once the client's traffic may use it
	gone   chan struct{} // closed when the upstream has closed it
}

func newLink(conn Conn) *link {
	l := &link{ready: make(chan struct{}), gone: make(chan struct{})}
	l.setConn(conn)
	return l
}

// setConn makes conn the link's connection.
func (l *link) setConn(conn Conn) {
	l.conn = conn
	l.frames, _ = conn.(frameBuilder)
}

func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// current returns the upstream link in use.
func (s *Session) current() *link {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.up
}

// usable returns the upstream link once the client's traffic may use it:
// while the upstream is being started again, it waits until the handshake
// is replayed (or that start fails).
func (s *Session) usable() *link {
	l := s.current()
	if closed(l.ready) {
		return l // the common case, without the locks of a select
	}
	select {
	case <-l.ready:
	case <-l.gone:
	}
	return l
}

func (s *Session) writeUpstream(frame []byte) {
	l := s.usable()
	if closed(l.gone) {
		s.log.Debug("the upstream is not running; a message was dropped", "size", len(frame))
		return
	}
	if err := l.conn.WriteFrame(frame); err != nil {
		s.log.Debug("writing to the upstream", "err", err)
	}
}

// upstreamGone answers everyone still waiting on the upstream link l,
// which closed.
func (s *Session) upstreamGone(l *link) {
	s.abandon(l, errUpstreamExited, "the upstream closed before answering %s")
}

// abandon answers everyone still waiting on the upstream link l, whose
// answers will not come: the proxy's own requests with err, the client's
// with an error saying why (why holds a %s for the method).
func (s *Session) abandon(l *link, err error, why string) {
	s.mu.Lock()
	if closed(l.gone) {
		s.mu.Unlock()
		return
	}
	close(l.gone)
	forwarded := s.forwarded
	s.forwarded = make(map[string]forwardedRequest)
	s.awaited = 0
	if s.forwardIdle != nil {
		close(s.forwardIdle)
		s.forwardIdle = nil
	}
	pending := s.pending
	s.pending = make(map[string]sent)
	s.mu.Unlock()
	for _, p := range pending {
		s.answered(p, nil, err)
	}
	// A batch's requests are answered in one array, as the batch would
	// have been: 10,000 of them are one message, not 10,000.
	batches := make(map[uint64][][]byte)
	for _, f := range forwarded {
		if f.shadow != nil {
			f.shadow.answered(nil, err)
		}
		answer := jsonrpc.NewErrorResponse(f.id, jsonrpc.Errorf(jsonrpc.CodeInternalError, "mcp-idempotent: "+why, f.method))
		if f.batch == 0 {
			s.writeClient(answer)
			continue
		}
		batches[f.batch] = append(batches[f.batch], answer)
	}
	for _, answers := range batches {
		s.writeClient(append(append([]byte("["), bytes.Join(answers, []byte(","))...), ']'))
	}
}

// errUpstreamExited is the outcome of a request that was sent but never
// answered because the upstream went away: not NotSent, since the upstream
// may have acted on it.
var errUpstreamExited = errors.New("the upstream exited before answering")

// errSessionEnded is the outcome of a request still unanswered when the
// session ended: the client had gone, the grace had passed, and the
// upstream had not closed; the upstream is stopped without answering it.
var errSessionEnded = errors.New("the session ended before the upstream answered")
