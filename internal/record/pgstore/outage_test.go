package pgstore

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

func TestUnreachableServerFailsPromptly(t *testing.T) {
	s, err := Open(context.Background(), "postgres://postgres:hunter2@127.0.0.1:1/test", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	_, _, err = s.Reserve(ctx, newRecord("k", start), record.ReserveOptions{})
	if err == nil {
		t.Fatal("Reserve against an unreachable server succeeded")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Reserve took %v to fail; want it prompt", d)
	}
	msg := err.Error()
	t.Log(msg)
	if !strings.Contains(msg, "reserving") || !strings.Contains(msg, "postgres://127.0.0.1:1/test") {
		t.Errorf("error %q does not say what failed and name the store", msg)
	}
	if strings.Contains(msg, "hunter2") {
		t.Errorf("error %q shows the password", msg)
	}
}

// silentProxy relays TCP connections to addr until silence is called;
// from then on it takes what either side sends and passes nothing on,
// like a server that stopped answering without closing a connection.
type silentProxy struct {
	ln     net.Listener
	silent atomic.Bool
	muted  atomic.Bool // the server's bytes are dropped, the client's passed on
	mu     sync.Mutex
	conns  []net.Conn
}

func newSilentProxy(t *testing.T, addr string) *silentProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &silentProxy{ln: ln}
	t.Cleanup(p.cut)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go io.Copy(p.writer(u, &p.silent), c)
			go io.Copy(p.writer(c, &p.muted), u)
		}
	}()
	return p
}

func (p *silentProxy) silence() { p.silent.Store(true) }

// mute passes on what the client sends, and drops the server's answers:
// a server that runs what it gets, and whose answers are lost.
func (p *silentProxy) mute() { p.muted.Store(true) }

// cut closes every connection, as a network that fails for good does.
func (p *silentProxy) cut() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

type silencing struct {
	p    *silentProxy
	w    io.Writer
	drop *atomic.Bool // set, this direction too is dropped
}

func (p *silentProxy) writer(w io.Writer, drop *atomic.Bool) io.Writer {
	return silencing{p, w, drop}
}

func (s silencing) Write(b []byte) (int, error) {
	if s.p.silent.Load() || s.drop.Load() {
		return len(b), nil
	}
	return s.w.Write(b)
}

// TestSilentServerFailsAtTheTimeout: a server that stops answering
// without closing the connection (a network partition, a hung server)
// fails each operation after the store's timeout, instead of holding its
// caller until the connection is torn down.
func TestSilentServerFailsAtTheTimeout(t *testing.T) {
	u, err := url.Parse(serverURL(t))
	if err != nil {
		t.Fatal(err)
	}
	// The schema is made first, without the short timeout under test:
	// on a loaded machine its making takes longer.
	schema := newSchema(t)
	setup, err := Open(context.Background(), u.String(), Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	err = setup.Check(t.Context())
	setup.Close()
	if err != nil {
		t.Fatal(err)
	}
	p := newSilentProxy(t, u.Host)
	u.Host = p.ln.Addr().String()
	s, err := Open(context.Background(), u.String(), Options{Schema: schema, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		// pgx closes a connection whose operation timed out by asking
		// the server to cancel it, which a silent server never answers
		// (pgx waits up to 15s): the connections are cut first.
		p.cut()
		s.Close()
	}()
	ctx := t.Context()
	now := time.Now()
	r := newRecord("k", now)
	// The set-up's reservation, while the server still answers, opens the
	// store's first connection: on a loaded machine that took longer than
	// the 300 ms under test, so it may take a few tries.
	for try := 1; ; try++ {
		_, _, err := s.Reserve(ctx, r, record.ReserveOptions{})
		if err == nil {
			break
		}
		if try == 10 {
			t.Fatal(err)
		}
	}
	p.silence()
	for name, op := range map[string]func() error{
		"Reserve": func() error {
			_, _, err := s.Reserve(ctx, newRecord("k2", now), record.ReserveOptions{})
			return err
		},
		"Update": func() error { _, err := s.Update(ctx, r.ID, record.Change{To: record.Dispatched}); return err },
		"Get":    func() error { _, err := s.Get(ctx, r.ID); return err },
		"Wait":   func() error { _, err := s.Wait(ctx, r.ID); return err },
	} {
		start := time.Now()
		err := op()
		if err == nil {
			t.Errorf("%s against a silent server succeeded", name)
			continue
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("%s took %v to fail; want about the 300ms timeout", name, d)
		}
		if !strings.Contains(err.Error(), "postgres store") {
			t.Errorf("%s: error %q does not name the store", name, err)
		}
	}
}

// TestLostAnswerIsNotMarkedUnsent: a reservation that reached the
// server, which made it and whose answer was lost, is not marked as
// never sent (record.ErrNotSent): its caller must fail it later.
func TestLostAnswerIsNotMarkedUnsent(t *testing.T) {
	u, err := url.Parse(serverURL(t))
	if err != nil {
		t.Fatal(err)
	}
	schema := newSchema(t)
	direct, err := Open(context.Background(), u.String(), Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	ctx := t.Context()
	if err := direct.Check(ctx); err != nil {
		t.Fatal(err)
	}
	p := newSilentProxy(t, u.Host)
	u.Host = p.ln.Addr().String()
	s, err := Open(context.Background(), u.String(), Options{Schema: schema, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		p.cut() // as in TestSilentServerFailsAtTheTimeout
		s.Close()
	}()
	for try := 1; ; try++ {
		_, _, err := s.Reserve(ctx, newRecord("k", time.Now()), record.ReserveOptions{})
		if err == nil {
			break
		}
		if try == 10 {
			t.Fatal(err)
		}
	}
	p.mute()
	r := newRecord("k2", time.Now())
	_, _, err = s.Reserve(ctx, r, record.ReserveOptions{})
	if err == nil {
		t.Fatal("Reserve whose answer was lost succeeded")
	}
	// The pool may have found its connection dead first (a ping of an
	// idle one), and the reservation then got none: not sent, not made.
	_, gerr := direct.Get(ctx, r.ID)
	if made := gerr == nil; made && errors.Is(err, record.ErrNotSent) {
		t.Fatalf("Reserve = %v, marked not sent; but the server made it", err)
	} else if !made && !errors.Is(gerr, record.ErrNotFound) {
		t.Fatal(gerr)
	}
}

// TestUnsentReservationIsMarked: a reservation that got no connection
// (the server closed each as it was set up) was never sent, and says so
// (record.ErrNotSent): its caller has nothing to fail later.
func TestUnsentReservationIsMarked(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	s, err := Open(context.Background(), "postgres://postgres@"+ln.Addr().String()+"/test?sslmode=disable", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, _, err = s.Reserve(t.Context(), newRecord("k", time.Now()), record.ReserveOptions{})
	if err == nil || !errors.Is(err, record.ErrNotSent) {
		t.Fatalf("Reserve with no connection = %v; want an error marked not sent", err)
	}
}

// TestQueueIsNotAnOutage: an operation that waits longer than the
// store's timeout for one of the pool's connections, while others get
// them, is under load, not facing a server that stopped answering: it
// waits its turn instead of failing.
func TestQueueIsNotAnOutage(t *testing.T) {
	const timeout = 500 * time.Millisecond
	s, err := Open(context.Background(), serverURL(t)+"&pool_max_conns=1", Options{Schema: newSchema(t), Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	r := newRecord("k", time.Now())
	if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	// The pool's one connection goes from holder to holder, each keeping
	// it for most of a timeout; the Get queues behind both.
	first, _, err := s.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	second := make(chan error, 1)
	go func() {
		conn, _, err := s.acquire(ctx)
		if err == nil {
			time.Sleep(timeout * 4 / 5)
			conn.Release()
		}
		second <- err
	}()
	time.Sleep(timeout / 5) // the second holder queues first
	go func() {
		time.Sleep(timeout * 3 / 5)
		first.Release()
	}()
	start := time.Now()
	got, err := s.Get(ctx, r.ID)
	waited := time.Since(start)
	if err := <-second; err != nil {
		t.Fatalf("the second holder: %v", err)
	}
	if err != nil || got.ID != r.ID {
		t.Fatalf("Get behind a queue that moves = %v, %v; want the record", got, err)
	}
	if waited < timeout {
		t.Fatalf("Get waited %v, less than the %v timeout: the queue under test did not form", waited, timeout)
	}
}
