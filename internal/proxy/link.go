package proxy

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// A link is one connection to the upstream. Its conn and frames are set
// before it is shared or, when the upstream is started again, under
// Session.mu before ready is closed: read them under Session.mu, or once
// ready is closed.
type link struct {
	conn       Conn
	frames     frameBuilder      // conn as a frameBuilder, or nil
	requests   requestThenWriter // conn as a requestThenWriter, or nil
	framesThen frameThenWriter   // conn as a frameThenWriter, or nil
	ready      chan struct{}     // closed once the client's traffic may use it
	gone       chan struct{}     // closed when the upstream has closed it
	// gen counts the upstream's starts: 1 for the first, one more for
	// each restart.
	gen int
	// failed, set under Session.mu before gone is closed when the
	// upstream could not be started again on the link, is why (a
	// *RestartError); unstarted is how the one before it ended, and
	// failed: what the client's requests that waited for it are told
	// (forward, abandon). The proxy's own are told failed alone, which
	// records keep (send): unstarted may hold the upstream's stderr.
	failed    error
	unstarted string
}

func newLink(conn Conn) *link {
	l := &link{ready: make(chan struct{}), gone: make(chan struct{}), gen: 1}
	l.setConn(conn)
	return l
}

// setConn makes conn the link's connection.
func (l *link) setConn(conn Conn) {
	l.conn = conn
	l.frames, _ = conn.(frameBuilder)
	l.requests, _ = conn.(requestThenWriter)
	l.framesThen, _ = conn.(frameThenWriter)
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

// nextUsable is usable, but a link that a restart replaced while it was
// waited for is not returned: the wait goes on for the new one, as
// lockUsable's does. The link it returns is gone only when no restart
// follows; it takes no lock when the link is usable.
func (s *Session) nextUsable() *link {
	for {
		l := s.usable()
		// A restart puts the new link in use before the one it replaces
		// is gone: once that is, s.up is the one to wait for.
		if !closed(l.gone) || s.current() == l {
			return l
		}
	}
}

// lockUsable returns the upstream link in use once it is usable, as
// usable does, with s.mu held. A link waited for that a restart replaced
// before it could be used is not returned: it waits for the new one, as
// what comes during a restart does.
func (s *Session) lockUsable() *link {
	for {
		l := s.usable()
		s.mu.Lock()
		if l == s.up {
			return l
		}
		s.mu.Unlock()
	}
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
	s.abandon(l, errUpstreamExited, "the upstream closed before answering %s", true)
}

// An exitExplainer is a Conn that can say why it closed (stdio.Child:
// how the process exited, the end of its stderr), waiting for that until
// ctx is done; "" if it cannot tell.
type exitExplainer interface {
	ExitCause(ctx context.Context) string
}

// causeWait bounds how long the answers to a link that closed wait for
// its cause: a process exits just after its stdout closes.
const causeWait = 500 * time.Millisecond

// exitCause is ": it " and why conn closed, where it can tell within
// causeWait; else "".
func exitCause(conn Conn) string {
	ex, ok := conn.(exitExplainer)
	if !ok {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), causeWait)
	defer cancel()
	if c := ex.ExitCause(ctx); c != "" {
		return ": it " + c
	}
	return ""
}

// abandon answers everyone still waiting on the upstream link l, whose
// answers will not come: the proxy's own requests with err, the client's
// with an error saying why (why holds a %s for the method) and, with
// explain, the cause of l's end, where its Conn can tell.
func (s *Session) abandon(l *link, err error, why string, explain bool) {
	s.mu.Lock()
	if closed(l.gone) {
		s.mu.Unlock()
		return
	}
	close(l.gone)
	conn := l.conn // nil while a restart has not started the upstream yet
	unstarted := l.unstarted
	if h, ok := conn.(holder); ok {
		// What a burst still holds for l never left: it is not written
		// now (no answer to it could be read), and its writers learn so
		// (a request of the proxy's is not sent) before those waiting
		// are taken for sent below.
		s.mu.Unlock()
		conn.Close()
		h.Flush()
		s.mu.Lock()
	}
	forwarded := s.forwarded
	s.forwarded = make(map[string]forwardedRequest)
	for key, f := range forwarded {
		s.releasePassedLocked(key, f)
		f.traceError(internalError)
		f.endSpan()
	}
	s.awaited = 0
	if s.forwardIdle != nil {
		close(s.forwardIdle)
		s.forwardIdle = nil
	}
	pending := s.pending
	s.pending = make(map[int64]sent)
	cancelled := s.cancelledShadows
	s.cancelledShadows = nil
	s.mu.Unlock()
	for _, p := range pending {
		s.answered(p, nil, err)
	}
	for _, sc := range cancelled {
		sc.answered(nil, err)
	}
	var cause string
	if unstarted != "" {
		// None of them was sent: they waited for the upstream.
		why, cause = "the upstream is not running; %s was not sent", unstarted
	} else if explain && len(forwarded) > 0 {
		// Only the client's own requests are told: the cause holds
		// the upstream's stderr, which records and journals, where
		// err goes, must not keep.
		cause = exitCause(conn)
	}
	// A batch's requests are answered in one array, as the batch would
	// have been: 10,000 of them are one message, not 10,000.
	batches := make(map[uint64][][]byte)
	for _, f := range forwarded {
		if f.shadow != nil {
			f.shadow.answered(nil, err)
		}
		answer := jsonrpc.NewErrorResponse(f.id, jsonrpc.Errorf(jsonrpc.CodeInternalError, "mcp-idempotent: "+why+"%s", f.method, cause))
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
