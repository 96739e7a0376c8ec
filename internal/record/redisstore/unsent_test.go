package redisstore_test

import (
	"errors"
	"io"
	"net"
	neturl "net/url"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// TestUnsentReservationIsMarked: a reservation whose connection could not
// be made or set up (the server refuses it, or its database) was never
// sent, and says so (record.ErrNotSent): its caller has nothing to fail
// later. One sent to a server that then stopped answering may have run,
// and does not say so.
func TestUnsentReservationIsMarked(t *testing.T) {
	base := serverURL(t)
	u, err := neturl.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	noDB := *u
	noDB.Path = "/9999"
	refused := *u
	refused.Host = "127.0.0.1:1"
	for _, url := range []string{noDB.String(), refused.String()} {
		s := open(t, url, newPrefix(t, base), nil)
		_, _, err := s.Reserve(ctx, newRecord("k"), record.ReserveOptions{})
		if err == nil || !errors.Is(err, record.ErrNotSent) {
			t.Errorf("Reserve on %s = %v; want an error marked not sent", url, err)
		}
	}

	relay := newSilentRelay(t, u.Host)
	silent := *u
	silent.Host = relay.addr
	q := silent.Query()
	q.Set("read_timeout", "300ms")
	silent.RawQuery = q.Encode()
	s := open(t, silent.String(), newPrefix(t, base), nil)
	if _, _, err := s.Reserve(ctx, newRecord("k"), record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	relay.silent.Store(true)
	_, _, err = s.Reserve(ctx, newRecord("k2"), record.ReserveOptions{})
	if err == nil || errors.Is(err, record.ErrNotSent) {
		t.Errorf("Reserve sent to a server that stopped answering = %v; want an error not marked not sent", err)
	}
}

// silentRelay relays TCP connections to a server until silent is set;
// from then on it passes nothing on, as a server that stopped answering
// without closing a connection.
type silentRelay struct {
	addr   string
	silent atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func newSilentRelay(t *testing.T, target string) *silentRelay {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &silentRelay{addr: ln.Addr().String()}
	t.Cleanup(func() {
		ln.Close()
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, c := range r.conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			r.mu.Lock()
			r.conns = append(r.conns, c, u)
			r.mu.Unlock()
			go io.Copy(relayWriter{r, u}, c)
			go io.Copy(relayWriter{r, c}, u)
		}
	}()
	return r
}

type relayWriter struct {
	r *silentRelay
	w io.Writer
}

func (w relayWriter) Write(b []byte) (int, error) {
	if w.r.silent.Load() {
		return len(b), nil
	}
	return w.w.Write(b)
}
