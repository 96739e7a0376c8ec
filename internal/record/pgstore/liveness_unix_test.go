//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package pgstore

import (
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
)

// readOnce reads from c once, as pgconn's background reader does on a
// pooled connection, and sends what the read returned.
func readOnce(c net.Conn, done chan<- error) {
	var b [1]byte
	_, err := c.Read(b[:])
	done <- err
}

// awaitParkedRead returns once a readOnce is parked in the poller, so
// holding its descriptor's read lock.
func awaitParkedRead() {
	buf := make([]byte, 1<<20)
	for {
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "[IO wait") && strings.Contains(g, "pgstore.readOnce") {
				return
			}
		}
		runtime.Gosched()
	}
}

// TestPendingBesideARead: the peek at a pooled connection does not wait
// for a read pending on it (a hang of the pool's acquire, and of every
// call, before), and still tells idle from closed.
func TestPendingBesideARead(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	done := make(chan error, 1)
	go readOnce(c, done)
	awaitParkedRead()
	if pending(c) {
		t.Fatal("pending on an idle connection with a read parked on it")
	}
	if _, err := s.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	s.Close()
	go readOnce(c, done)
	if err := <-done; err != io.EOF {
		t.Fatalf("read after the peer closed: %v, want EOF", err)
	}
	if !pending(c) {
		t.Fatal("not pending on a connection its peer closed")
	}
	c.Close()
	if !pending(c) {
		t.Fatal("not pending on a connection closed on this side")
	}
}
