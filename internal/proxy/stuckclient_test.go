package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// stuckWriter is the pipe to a client that no longer reads it but keeps
// it open: a write blocks until Close, which fails it, as closing an
// *os.File the poller waits on does.
type stuckWriter struct {
	once   sync.Once
	closed chan struct{}
	w      io.Closer
}

func (s *stuckWriter) Write(p []byte) (int, error) {
	<-s.closed
	return 0, errors.New("closed")
}

func (s *stuckWriter) Close() error {
	s.once.Do(func() { close(s.closed) })
	return s.w.Close()
}

// TestToldToStopWithAStuckClient: a session told to stop (SIGTERM) while
// its client reads none of its answers ends, rather than waiting for ever
// on a write to the client, so that the upstream is stopped before
// whoever sent the signal kills the proxy.
func TestToldToStopWithAStuckClient(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	r := newRigWriting(t, ctx, 0, Options{ShutdownGrace: time.Minute}, func(c Conn) Conn { return c },
		func(w io.WriteCloser) io.WriteCloser { return &stuckWriter{closed: make(chan struct{}), w: w} }, nil)
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	r.upstream.next(t, "upstream")
	// Its answer is written to the client, and that write never ends.
	r.upstream.send(t, `{"jsonrpc":"2.0","id":1,"result":{}}`)
	r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	r.upstream.next(t, "upstream")
	stop()
	r.wait(t)
}

// TestInputEndWithAStuckClient: a client that closes its input and reads
// none of its answers, but keeps the pipe open, does not hold the
// session's end for ever either.
func TestInputEndWithAStuckClient(t *testing.T) {
	r := newRigWriting(t, context.Background(), 0, Options{ShutdownGrace: 10 * time.Millisecond}, func(c Conn) Conn { return c },
		func(w io.WriteCloser) io.WriteCloser { return &stuckWriter{closed: make(chan struct{}), w: w} }, nil)
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	r.upstream.next(t, "upstream")
	r.upstream.send(t, `{"jsonrpc":"2.0","id":1,"result":{}}`)
	r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	r.upstream.next(t, "upstream")
	r.clientW.Close()
	select {
	case <-r.stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("session did not stop")
	}
}

// watchedConn is a client Conn whose write under way is under, and whose
// Close is counted.
type watchedConn struct {
	Conn
	mu     sync.Mutex
	under  uint64
	closes int
}

func (c *watchedConn) WriteUnderWay() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.under++ // every look sees a new write: the client takes them
	return c.under
}

func (c *watchedConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closes++
	return nil
}

// TestSlowEndWithAReadingClient: a session's end that is slow for another
// reason than the client (a slow store) does not give up on a client
// that takes what is written to it.
func TestSlowEndWithAReadingClient(t *testing.T) {
	c := &watchedConn{}
	s := &Session{client: c, log: slog.New(slog.DiscardHandler)}
	ctx, stop := context.WithCancel(context.Background())
	stop()
	end := s.boundClientWrites(ctx)
	time.Sleep(4 * stopWrites)
	end()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closes != 0 {
		t.Fatal("the output to a client that reads was closed")
	}
}
