package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// upstreamExited acts on the end of the upstream link in use: everyone
// who waited on it is answered and, with Options.Restart set and no crash
// loop (exits holds the recent exits, this one added now), the upstream
// is started again. It returns the new link's pump channel; or nil and
// the error Run returns.
func (s *Session) upstreamExited(ctx context.Context, exits *exitLog) (<-chan error, error) {
	gone := s.current()
	if s.opts.Restart == nil {
		s.voidServerRequests(gone, serverExited)
		s.endCallIntake()
		s.upstreamGone(gone)
		s.clientAnswered(ctx) // every caller is answered at once: the upstream is gone
		return nil, ErrUpstreamClosed
	}
	n := exits.add(time.Now(), s.opts.RestartWindow)
	if n > s.opts.MaxRestarts {
		s.voidServerRequests(gone, serverExited)
		s.endCallIntake()
		s.upstreamGone(gone)
		s.log.Error("the upstream keeps exiting; giving up", "exits", n, "window", s.opts.RestartWindow)
		s.clientAnswered(ctx)
		return nil, fmt.Errorf("%w: %w (%d exits within %v)", ErrUpstreamClosed, ErrCrashLoop, n, s.opts.RestartWindow)
	}
	// The next link is in use before the callers of the one that is
	// gone are answered: a call that comes once they are waits for the
	// restart, instead of meeting the closed connection.
	l := &link{ready: make(chan struct{}), gone: make(chan struct{}), gen: gone.gen + 1}
	s.mu.Lock()
	s.up = l
	s.mu.Unlock()
	// Before the new upstream can ask anything: its requests number from
	// 1 again, and the client must not take them for the exited one's.
	s.voidServerRequests(gone, serverRestarted)
	s.upstreamGone(gone)
	s.mu.Lock()
	exited := gone.conn
	s.mu.Unlock()
	next, err := s.restart(ctx, l, exited, n)
	if err != nil {
		s.endCallIntake()
		s.clientAnswered(ctx)
		if ctx.Err() != nil || errors.Is(err, errClientLeft) {
			return nil, nil
		}
		return nil, fmt.Errorf("%w: %w", ErrUpstreamClosed, &RestartError{Err: err})
	}
	return next, nil
}

// Why the client is told a request of the upstream's gets no answer
// (voidServerRequests).
const (
	serverExited    = "mcp-idempotent: the MCP server exited before this request was answered"
	serverRestarted = "mcp-idempotent: the MCP server that sent this request exited and is being restarted; an answer to it would be dropped"
)

// clientAnswered waits until what the client sent before the session
// ends this way is answered: the calls under way, and the message its
// pump is handling (a request that waited for the upstream, answered
// once it is gone), which must reach the client before Run returns and
// its connection closes. A client that does not read its answers holds
// the end for the shutdown grace at most.
func (s *Session) clientAnswered(ctx context.Context) {
	handled := make(chan struct{})
	go func() {
		s.handling.Lock()
		s.handling.Unlock()
		close(handled)
	}()
	grace := time.NewTimer(s.opts.ShutdownGrace)
	defer grace.Stop()
	select {
	case <-handled:
	case <-grace.C:
		s.log.Warn("a message of the client's was still being handled as the session ended", "grace", s.opts.ShutdownGrace)
	case <-ctx.Done():
	}
	s.inflight.Wait()
}

// errClientLeft is why a restart stopped: the client's input ended
// meanwhile, which ends the session as it would have without the restart.
var errClientLeft = errors.New("the client has gone")

// An exitLog holds the upstream's recent exits, for the crash-loop limit.
type exitLog []time.Time

// add notes an exit at now, forgets those more than window before it,
// and returns how many are left.
func (e *exitLog) add(now time.Time, window time.Duration) int {
	*e = append(*e, now)
	for now.Sub((*e)[0]) > window {
		*e = (*e)[1:]
	}
	return len(*e)
}

// restart starts the upstream again on l, the link already in use, after
// a backoff that grows with the number of recent exits, replays the
// client's handshake on it, and makes it ready. It returns l's pump
// channel. previous is the Conn of the upstream that exited.
func (s *Session) restart(ctx context.Context, l *link, previous Conn, exits int) (<-chan error, error) {
	// l is in use already, not ready: the client's traffic waits for it
	// instead of meeting the connection that is gone.
	s.mu.Lock()
	handshake, initialized, protocol, toolsChange := s.handshake, s.initialized, s.protocol, s.toolsChange
	s.mu.Unlock()
	s.tools.invalidate()
	fail := func(err error) (<-chan error, error) {
		s.restartFailed(ctx, l, previous, err)
		return nil, err
	}

	wait := restartBackoff(exits)
	s.log.Warn("the upstream exited; starting it again", "in", wait, "recent_exits", exits)
	select {
	case <-time.After(wait):
	case <-ctx.Done():
		return fail(ctx.Err())
	case <-s.clientEnded:
		return fail(errClientLeft)
	}
	conn, err := s.opts.Restart(ctx)
	if err != nil {
		return fail(err)
	}
	s.mu.Lock()
	l.setConn(conn)
	s.mu.Unlock()
	done := s.startPump(ctx, l)
	if handshake != nil {
		exited, err := s.awaitHandshake(ctx, done, handshake, protocol)
		switch {
		case exited:
			// One more exit, which Run counts and acts on as any
			// other. Its callers, the handshake among them, are
			// answered then.
			s.log.Warn("the upstream exited during the replayed handshake")
			again := make(chan error, 1)
			again <- err
			return again, nil
		case errors.Is(err, errClientLeft):
			conn.Close()
			return fail(err)
		}
		if err == nil && initialized {
			err = conn.WriteFrame([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
		}
		if err != nil && transportFailure(err) {
			// An HTTP server that could not be reached, or whose gateway
			// failed (a deploy under way): one more exit, counted as any
			// other, rather than the end of the session.
			s.log.Warn("replaying the client's handshake failed; starting the upstream again", "err", err)
			conn.Close()
			return done, nil
		}
		if err != nil {
			conn.Close()
			return fail(fmt.Errorf("replaying the client's handshake: %w", err))
		}
	}
	if toolsChange {
		// The new upstream may list other tools (another version of
		// its command, tools that depend on its state). Told before
		// the client's requests go to it: a tools/list the client
		// sends on this waits for it, and is answered by it.
		s.writeClient([]byte(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`))
	}
	close(l.ready)
	s.log.Info("the upstream was started again", "handshake_replayed", handshake != nil)
	return done, nil
}

// restartFailed ends l, on which the upstream could not be started again
// for err, and wakes the traffic that waited for it, with errors.
func (s *Session) restartFailed(ctx context.Context, l *link, previous Conn, err error) {
	if ctx.Err() == nil && !errors.Is(err, errClientLeft) {
		// What waited is told why it was not sent: how the upstream
		// exited, and why the one in its place was refused, not how
		// that one ended once the proxy closed it.
		failed := &RestartError{Err: err}
		why := exitCause(previous) + "; " + failed.Error()
		s.mu.Lock()
		l.failed, l.unstarted = failed, why
		s.mu.Unlock()
	}
	s.upstreamGone(l)
}

// awaitHandshake replays handshake, the client's initialize params, on
// the upstream started again, whose pump channel is done, and waits for
// its answer, whose error it returns (sameProtocol's too). With exited
// set, the upstream exited first, and err is its pump's. Once the client
// has gone it returns errClientLeft: no one is left to use the upstream,
// and the session ends now, not once a handshake that hangs times out.
func (s *Session) awaitHandshake(ctx context.Context, done <-chan error, handshake json.RawMessage, protocol string) (exited bool, err error) {
	hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	answered := make(chan error, 1)
	go func() {
		result, err := s.call(hctx, "initialize", handshake)
		if err == nil {
			err = sameProtocol(result, protocol)
		}
		answered <- err
	}()
	select {
	case err := <-answered:
		return false, err
	case perr := <-done:
		cancel()
		<-answered
		return true, perr
	case <-s.clientEnded:
		cancel()
		<-answered
		return false, errClientLeft
	}
}

// sameProtocol checks that result, the restarted upstream's answer to
// the replayed initialize, agrees on protocol, the version the session
// speaks ("" when it is not known). A command started again may run
// another server (a newer package, a downgrade), which may agree on
// another version: the client would go on speaking its own to a server
// that speaks another, so the restart fails instead.
func sameProtocol(result json.RawMessage, protocol string) error {
	got, _ := jsonrpc.StringValue(jsonrpc.Member(result, "protocolVersion"))
	if protocol == "" || got == protocol {
		return nil
	}
	return fmt.Errorf("the MCP server started again agreed on protocol version %q, not %q that the client speaks", got, protocol)
}

// transportFailure reports whether err, a request's failure, is the
// transport's own account of an HTTP request that got no answer and may
// get one if sent again: nothing was sent, the connection broke, or a
// status that a server or gateway gives while it restarts (408, 429, 5xx).
// The server's own refusal, such as a JSON-RPC error, is not.
func transportFailure(err error) bool {
	na, ok := errors.AsType[*jsonrpc.NoAnswer](err)
	if !ok {
		return false
	}
	switch s := na.Status; {
	case na.NotSent, s == 0, s == http.StatusRequestTimeout, s == http.StatusTooManyRequests, s >= 500:
		return true
	}
	return false
}

// restartBackoff is the wait before a restart: 100ms, doubling with each
// recent exit, at most 5s.
func restartBackoff(exits int) time.Duration {
	d := 100 * time.Millisecond << min(exits-1, 6)
	return min(d, 5*time.Second)
}

// CrashLoopSpan is the least time from the first to the last of
// maxRestarts+1 exits of the upstream: the waits before the restarts
// between them (restartBackoff). A RestartWindow shorter than it never
// holds that many exits, so a crash loop is never seen, and the upstream
// is started again for ever.
func CrashLoopSpan(maxRestarts int) time.Duration {
	const capped = 7 // restartBackoff(k) is its most, 5s, from k = 7 on
	var d time.Duration
	for k := 1; k <= min(maxRestarts, capped-1); k++ {
		d += restartBackoff(k)
	}
	if n := maxRestarts - (capped - 1); n > 0 {
		if int64(n) > (math.MaxInt64-int64(d))/int64(restartBackoff(capped)) {
			return math.MaxInt64
		}
		d += time.Duration(n) * restartBackoff(capped)
	}
	return d
}
