package stdio

import (
	"bytes"
	"errors"
	"io"
	"os"
	"runtime"
	"syscall"
	"testing"
)

// blockingPipe returns a pipe whose ends are blocking, as a client
// hands the proxy its stdin and stdout (os.Pipe's are not).
func blockingPipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	r, w = os.NewFile(uintptr(p[0]), "r"), os.NewFile(uintptr(p[1]), "w")
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

// blockingSockets returns a socket pair, blocking, as Node hands a
// child its stdin and stdout.
func blockingSockets(t *testing.T) (a, b *os.File) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	a, b = os.NewFile(uintptr(fds[0]), "a"), os.NewFile(uintptr(fds[1]), "b")
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func nonblocking(t *testing.T, f *os.File) bool {
	t.Helper()
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var flags int
	rc.Control(func(fd uintptr) { flags, err = fcntl(int(fd), syscall.F_GETFL, 0) })
	if err != nil {
		t.Fatal(err)
	}
	return flags&syscall.O_NONBLOCK != 0
}

// readWaitingEnds checks that in delivers a frame, and that a read
// waiting on it returns once done is called: a read blocked in the
// kernel would not, and the test would not end.
func readWaitingEnds(t *testing.T, in io.Reader, w io.Writer, done func()) {
	t.Helper()
	w.Write([]byte("{}\n"))
	c := NewConn(in, io.Discard, 0)
	if frame, err := c.ReadFrame(); err != nil || string(frame) != "{}" {
		t.Fatalf("ReadFrame = %q, %v; want {}", frame, err)
	}
	read := make(chan error, 1)
	go func() {
		_, err := c.ReadFrame()
		read <- err
	}()
	done()
	if err := <-read; !errors.Is(err, os.ErrClosed) {
		t.Fatalf("a read waiting on the file returned %v; want os.ErrClosed", err)
	}
}

// TestPollablePipe: a pipe the client hands over is read through an
// open file of the proxy's own, non-blocking, while the client's keeps
// its flags.
func TestPollablePipe(t *testing.T) {
	r, w := blockingPipe(t)
	in, done := Pollable(r, os.O_RDONLY)
	if in == r {
		t.Fatal("Pollable returned the client's file")
	}
	if !nonblocking(t, fileOf(t, in)) {
		t.Error("the new file is blocking")
	}
	if nonblocking(t, r) {
		t.Error("the client's file was made non-blocking")
	}
	readWaitingEnds(t, in, w, done)
}

// TestPollableStdout: the proxy writes through an open file of its own
// too; a write larger than the pipe waits for the client to read, and
// the client sees the end when the proxy's files close.
func TestPollableStdout(t *testing.T) {
	r, w := blockingPipe(t)
	out, done := Pollable(w, os.O_WRONLY)
	if out == w {
		t.Fatal("Pollable returned the client's file")
	}
	if !nonblocking(t, fileOf(t, out)) {
		t.Error("the new file is blocking")
	}
	if nonblocking(t, w) {
		t.Error("the client's file was made non-blocking")
	}
	big := bytes.Repeat([]byte("x"), 1<<20) // more than a pipe holds
	go func() {
		out.Write(big)
		done()
		w.Close()
	}()
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("read %d bytes, %v; want %d", len(got), err, len(big))
	}
}

// TestPollableSocket: a socket is made non-blocking and polled through
// a copy of its descriptor, and given its flags back when done.
func TestPollableSocket(t *testing.T) {
	mine, client := blockingSockets(t)
	in, done := Pollable(mine, os.O_RDONLY)
	if in == mine {
		t.Fatal("Pollable returned the socket as it was")
	}
	if !nonblocking(t, fileOf(t, in)) {
		t.Error("the socket is blocking")
	}
	readWaitingEnds(t, in, client, done)
	if nonblocking(t, mine) {
		t.Error("the socket's flags were not given back")
	}
}

// TestPollableLeavesOthers: a regular file is used as it is, and so is a
// socket that is also another of the process's standard files.
func TestPollableLeavesOthers(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "stdin")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got, _ := Pollable(f, os.O_RDONLY); got != f {
		t.Error("a regular file was opened anew")
	}

	// The socket as stderr too (2>&1): its flag must stay.
	mine, _ := blockingSockets(t)
	saved, err := syscall.Dup(2)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		syscall.Dup3(saved, 2, 0)
		syscall.Close(saved)
	}()
	if err := syscall.Dup3(int(mine.Fd()), 2, 0); err != nil {
		t.Fatal(err)
	}
	if got, _ := Pollable(mine, os.O_WRONLY); got != mine {
		t.Error("a socket that is stderr too was made non-blocking")
	}
	if nonblocking(t, mine) {
		t.Error("a socket that is stderr too was made non-blocking")
	}
}

// TestPollableOneSocket: one socket handed in as both stdin and stdout
// (not fds 0 to 2, which are left alone then): the second call finds it
// non-blocking already, and its file must be polled too, or a write
// larger than the socket holds fails with EAGAIN.
func TestPollableOneSocket(t *testing.T) {
	mine, client := blockingSockets(t)
	_, doneIn := Pollable(mine, os.O_RDONLY)
	out, doneOut := Pollable(mine, os.O_WRONLY)
	if out == mine {
		t.Fatal("the second call returned the socket, which nothing polls")
	}
	big := bytes.Repeat([]byte("x"), 4<<20)
	wrote := make(chan error, 1)
	go func() {
		_, err := out.Write(big)
		wrote <- err
	}()
	got, err := io.ReadFull(client, make([]byte, len(big)))
	if err != nil || got != len(big) {
		t.Fatalf("client read %d bytes, %v", got, err)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("writing %d bytes: %v", len(big), err)
	}
	doneOut()
	doneIn()
	if nonblocking(t, mine) {
		t.Error("the socket's flags were not given back")
	}
}

// TestPollableRestoreAfterClose: the flags are given back to the socket,
// not to whatever file has its descriptor's number once it is closed.
func TestPollableRestoreAfterClose(t *testing.T) {
	mine, _ := blockingSockets(t)
	_, done := Pollable(mine, os.O_RDONLY)
	rc, err := mine.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var number uintptr
	rc.Control(func(fd uintptr) { number = fd })
	mine.Close()
	// os.Pipe's files are non-blocking; the lowest free number is the
	// socket's.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	var got uintptr
	rr, _ := r.SyscallConn()
	rr.Control(func(fd uintptr) { got = fd })
	if got != number {
		t.Skipf("the pipe took descriptor %d, not the socket's %d", got, number)
	}
	done()
	if !nonblocking(t, r) {
		t.Fatal("giving the socket its flags back made another file blocking")
	}
}

// fileOf returns the file rw reads and writes.
func fileOf(t *testing.T, rw io.ReadWriteCloser) *os.File {
	t.Helper()
	switch f := rw.(type) {
	case *os.File:
		return f
	case *rawFile:
		return f.f
	}
	t.Fatalf("%T is not a file", rw)
	return nil
}

// TestPollableSocketMadeBlocking: a client that keeps a copy of the
// proxy's socket and makes it blocking again cannot make a read block
// its thread with its processor held: the runtime must still stop the
// world for a collection while the read waits.
func TestPollableSocketMadeBlocking(t *testing.T) {
	mine, client := blockingSockets(t)
	in, done := Pollable(mine, os.O_RDONLY)
	defer done()
	rc, err := mine.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	rc.Control(func(fd uintptr) {
		flags, _ := fcntl(int(fd), syscall.F_GETFL, 0)
		fcntl(int(fd), syscall.F_SETFL, flags&^syscall.O_NONBLOCK)
	})
	read := make(chan error, 1)
	go func() {
		_, err := in.Read(make([]byte, 10))
		read <- err
	}()
	// A read blocked in the kernel without telling the runtime holds up
	// a stop of the world until it returns: nothing would write, and
	// runtime.GC would not return.
	gc := make(chan struct{})
	go func() {
		for range 20 {
			runtime.GC()
		}
		close(gc)
	}()
	<-gc
	client.Write([]byte("x"))
	if err := <-read; err != nil {
		t.Fatal(err)
	}
}

// TestPolledRefusesBlocking: a copy of a socket found blocking when the
// file is made (its client cleared the flag in between) is not polled,
// so it is closed and not used: its first EAGAIN would fail the read.
func TestPolledRefusesBlocking(t *testing.T) {
	mine, _ := blockingSockets(t)
	rc, err := mine.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var dup int
	rc.Control(func(fd uintptr) { dup, err = fcntl(int(fd), syscall.F_DUPFD_CLOEXEC, 3) })
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := polled(dup, "dup"); ok {
		t.Fatal("a blocking copy was taken as polled")
	}
	if _, err := fcntl(dup, syscall.F_GETFD, 0); err != syscall.EBADF {
		t.Errorf("the refused copy is still open (F_GETFD: %v)", err)
	}
}
