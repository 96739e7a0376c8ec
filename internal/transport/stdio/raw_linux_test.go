package stdio

import (
	"bytes"
	"errors"
	"io"
	"os"
	"syscall"
	"testing"
)

// TestRawBlockingFile: a blocking file is not made raw: a raw read would
// hold its thread's processor for as long as it blocks.
func TestRawBlockingFile(t *testing.T) {
	r, w := blockingPipe(t)
	if Raw(r) != io.ReadWriteCloser(r) || Raw(w) != io.ReadWriteCloser(w) {
		t.Fatal("Raw wrapped a blocking file")
	}
}

// TestRawPipe: frames go through raw reads and writes as through the
// files, a write larger than the pipe waits for the reader, and the
// reader sees the end once the writer is closed.
func TestRawPipe(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r, w := Raw(pr), Raw(pw)
	if _, ok := r.(*rawFile); !ok {
		t.Fatalf("Raw(os.Pipe's read end) = %T; want *rawFile", r)
	}
	defer r.Close()
	big := bytes.Repeat([]byte("x"), 1<<20) // more than a pipe holds
	go func() {
		c := NewConn(nil, w, 0)
		c.WriteFrame([]byte(`{"a":1}`))
		w.Write(big)
		w.Close()
	}()
	c := NewConn(r, io.Discard, 0)
	if frame, err := c.ReadFrame(); err != nil || string(frame) != `{"a":1}` {
		t.Fatalf("ReadFrame = %q, %v", frame, err)
	}
	rest, err := io.ReadAll(c.r)
	if err != nil || !bytes.Equal(rest, big) {
		t.Fatalf("read %d bytes after the frame, %v; want %d", len(rest), err, len(big))
	}
}

// TestRawClosed: closing the file ends a read waiting on it, and a later
// write fails, both with os.ErrClosed as an os.File's would.
func TestRawClosed(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	r := Raw(pr)
	read := make(chan error, 1)
	go func() {
		_, err := r.Read(make([]byte, 10))
		read <- err
	}()
	r.Close()
	if err := <-read; !errors.Is(err, os.ErrClosed) {
		t.Errorf("a read waiting on the closed file returned %v; want os.ErrClosed", err)
	}
	w := Raw(pw)
	w.Close()
	if _, err := w.Write([]byte("x")); !errors.Is(err, os.ErrClosed) {
		t.Errorf("a write on the closed file returned %v; want os.ErrClosed", err)
	}
}

// TestRawBrokenPipe: a write to a pipe whose reader is gone fails with
// EPIPE, by which the proxy tells a client that went away.
func TestRawBrokenPipe(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	pr.Close()
	w := Raw(pw)
	defer w.Close()
	if _, err := w.Write([]byte("{}\n")); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("write to a pipe without a reader returned %v; want EPIPE", err)
	}
}

// TestRawNotPolled: a wait that fails for another reason than the file's
// closing says so: a non-blocking file the poller does not know (made
// non-blocking after the runtime saw it) is not at its end.
func TestRawNotPolled(t *testing.T) {
	r, w := blockingPipe(t)
	raw := &rawFile{f: r}
	var err error
	if raw.rc, err = r.SyscallConn(); err != nil {
		t.Fatal(err)
	}
	raw.rc.Control(func(fd uintptr) {
		flags, _ := fcntl(int(fd), syscall.F_GETFL, 0)
		fcntl(int(fd), syscall.F_SETFL, flags|syscall.O_NONBLOCK)
	})
	defer w.Close()
	_, err = stdout{raw, r}.Read(make([]byte, 10))
	if err == nil || errors.Is(err, os.ErrClosed) || err == io.EOF {
		t.Fatalf("a read that could not wait returned %v; want the wait's error", err)
	}
}

// TestRawHandoff: what a goroutine wrote before a raw write is seen by
// the one that reads the bytes, as the race detector is told for
// os.File; without that, -race reports a race that is not one.
func TestRawHandoff(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r, w := Raw(pr), Raw(pw)
	defer r.Close()
	defer w.Close()
	var handed int
	go func() {
		handed = 1
		w.Write([]byte{1})
	}()
	if _, err := r.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if handed != 1 {
		t.Fatal("the write's bytes came before what was written before it")
	}
}
