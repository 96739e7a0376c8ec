package proxy

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
)

// shutdown ends the session once the client has gone (or ctx is done):
// it lets calls under way finish within the grace, then passes the end of
// input on to the upstream, and keeps relaying what it still writes until
// it closes too. upstreamDone is the pump channel of the link in use.
func (s *Session) shutdown(ctx context.Context, upstreamDone <-chan error) {
	// The client, if Run was told to stop rather than left, may still send.
	s.endCallIntake()
	deadline := time.NewTimer(s.opts.ShutdownGrace)
	defer deadline.Stop()
	settled := make(chan struct{})
	go func() {
		// The callers still attached, then the executions sent whose
		// callers left: a dispatched side effect is not cut off by the
		// client going, within the grace.
		s.inflight.Wait()
		<-s.sendsSettled()
		<-s.forwardsSettled()
		close(settled)
	}()
	select {
	case <-settled:
	case <-deadline.C:
		s.log.Warn("requests still under way at shutdown", s.stillWaiting(slog.Duration("grace", s.opts.ShutdownGrace))...)
	case <-ctx.Done():
		// Told to stop (SIGTERM, SIGINT): no grace. What is under way
		// is answered below, as at the end of the grace.
		select {
		case <-settled:
		default:
			s.log.Warn("told to stop; calls still under way are answered now", s.stillWaiting()...)
		}
	case <-upstreamDone:
		defer s.boundClientWrites(ctx)()
		s.upstreamGone(s.current())
		s.endCalls()
		return
	}
	if l := s.current(); !closed(l.gone) {
		s.mu.Lock()
		conn := l.conn // nil while a restart has not started the upstream yet
		s.mu.Unlock()
		if conn != nil {
			// Close may wait on the upstream: an HTTP one's DELETE,
			// which a server with calls under way may hold for seconds.
			// Those waiting are answered first; Run returns once it is
			// closed.
			closing := make(chan struct{})
			go func() {
				defer close(closing)
				conn.Close()
			}()
			defer func() { <-closing }()
		}
	}
	select {
	case <-upstreamDone:
		defer s.boundClientWrites(ctx)()
		s.upstreamGone(s.current())
		s.endCalls()
		return
	case <-time.After(drainWait):
		s.log.Debug("the upstream is still open after the end of input", "waited", drainWait)
	case <-ctx.Done():
		// Told to stop: no more relaying either.
	}
	// Whoever still waits is answered before the upstream is stopped: no
	// request is left without an answer. A client that reads none of
	// them would hold this up for ever.
	defer s.boundClientWrites(ctx)()
	s.abandon(s.current(), errSessionEnded, "the session ended before the upstream answered %s", false)
	s.endCalls()
}

// boundClientWrites bounds how long the session's end waits on a client
// that reads none of its answers but keeps its pipe open: once a write to
// it has not moved for stuckWrites, or for stopWrites after the session
// is told to stop (whoever sent the signal kills the proxy soon after,
// and the upstream must be stopped first), the answers still owed are
// given up and its write side is closed, which fails the write blocked
// on it. They count as not delivered. Only a client that tells what it
// writes (a stdio one) is bounded so. The function returned ends the
// bound, once the session's end has written all it owes.
func (s *Session) boundClientWrites(ctx context.Context) (end func()) {
	w, ok := s.client.(writeWatcher)
	if !ok {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		period := stuckWrites
		tick := time.NewTimer(period)
		defer tick.Stop()
		stop := ctx.Done()
		var last uint64
		for {
			select {
			case <-done:
				return
			case <-stop:
				stop, period = nil, stopWrites
				tick.Reset(period)
				continue
			case <-tick.C:
			}
			n := w.WriteUnderWay()
			if n != 0 && n == last {
				break
			}
			last = n
			tick.Reset(period)
		}
		s.log.Warn("the client reads none of the answers still owed; giving them up", "waited", period)
		if err := s.client.Close(); err != nil {
			s.log.Debug("closing the output to the client", "err", err)
		}
	}()
	return func() { close(done) }
}

// A writeWatcher is a client Conn that tells of the write to it under
// way (stdio.Conn.WriteUnderWay).
type writeWatcher interface{ WriteUnderWay() uint64 }

// stuckWrites and stopWrites are boundClientWrites' waits: a client that
// reads takes a write long before either.
const (
	stuckWrites = drainWait
	stopWrites  = 250 * time.Millisecond
)

// stillWaiting returns, after attrs, what shutdown waits for: the
// client's tools/calls, the proxy's own requests (executions whose
// callers left among them), and the methods of the client's requests
// passed through, such as a tasks/result that waits for its task.
func (s *Session) stillWaiting(attrs ...any) []any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var methods []string
	for _, f := range s.forwarded {
		if !standing(f.method) && !slices.Contains(methods, f.method) {
			methods = append(methods, f.method)
		}
	}
	slices.Sort(methods)
	return append(attrs, "calls", len(s.calls), "sent", s.sending, "requests", methods)
}

// endCalls ends, with intercept.ErrSessionEnded, the calls still waiting
// when the session ends (callers attached to an execution under way in
// another process), so that each is told the execution is still in
// progress rather than taken for a caller who cancelled, and one still
// waiting for a slow store to reserve it that it did not run; then it
// waits, not for ever, for those answers to be written.
func (s *Session) endCalls() {
	s.mu.Lock()
	calls := make([]*clientCall, 0, len(s.calls))
	for _, c := range s.calls {
		calls = append(calls, c)
	}
	s.mu.Unlock()
	in := s.opts.Interceptor
	for _, c := range calls {
		c.ctx.endWith(intercept.ErrSessionEnded)
		if in != nil {
			// After the end, as EndReserving asks: its reservation
			// is seen through without it, and never sent.
			in.EndReserving(&c.req)
		}
	}
	waited := make(chan struct{})
	go func() {
		s.inflight.Wait()
		close(waited)
	}()
	select {
	case <-waited:
	case <-time.After(drainWait):
	}
}

// endCallIntake makes the session refuse the client's tools/calls from
// now on (startToolCall), before Run waits for those under way (inflight)
// and returns, while the client's pump, blocked in a read, may go on: a
// call taken during that wait would race it, since a count's Start from
// zero must happen before the Wait that is to see it, and would run after
// the session.
func (s *Session) endCallIntake() {
	s.mu.Lock()
	s.callsEnded = true
	s.mu.Unlock()
}

// drainWait bounds how long Run relays the upstream's output after passing
// on the end of input; a server that does not exit by then is stopped by
// the caller of Run.
const drainWait = 2 * time.Second

// closedChannel is a channel closed from the start.
var closedChannel = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()
