package stdio

import (
	"io"
	"os"
	"strconv"
	"syscall"
	"time"
)

// Pollable returns a reader and writer for f, the proxy's own stdin
// (flag os.O_RDONLY) or stdout (os.O_WRONLY), that the runtime's poller
// waits on and that reads and writes with raw system calls (Raw), or f
// itself where that cannot be had safely; and a function to call once
// done with it, which closes what it opened (a read waiting on it
// returns) and gives f back the flags it came with. Closing f itself
// does not end a read on what Pollable returned.
//
// A read blocked in the kernel holds a thread, and while calls are in
// flight the runtime keeps taking its processor back and waking another
// thread to run the rest: on a VM each such wake-up costs more than a
// call's own work. Through the poller a waiting read holds nothing
// (docs/benchmarks.md).
//
// The poller needs the file non-blocking, and O_NONBLOCK belongs to the
// open file, which others may share: a terminal's is its shell's too.
// So a pipe is opened again, through /proc/self/fd, as an open file of
// the proxy's own, and f keeps its flags. A socket cannot be opened
// again; its flag is set, since a client that starts the proxy on a
// socket pair (Node does) keeps no copy of the proxy's end, unless
// another of the proxy's standard files is the same socket (2>&1): its
// writes would then fail where they waited. A client that does keep a
// copy may make it blocking again, so the socket is read and written
// with MSG_DONTWAIT, which does not block whatever its flags. Anything
// else is left as it is.
func Pollable(f *os.File, flag int) (io.ReadWriteCloser, func()) {
	none := func() {}
	fi, err := f.Stat()
	if err != nil {
		return f, none
	}
	// Not f.Fd(), which would make f blocking if it is not.
	rc, err := f.SyscallConn()
	if err != nil {
		return f, none
	}
	var fd int
	rc.Control(func(u uintptr) { fd = int(u) })
	switch fi.Mode().Type() {
	case os.ModeNamedPipe:
		again, err := syscall.Open("/proc/self/fd/"+strconv.Itoa(fd), flag|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
		if err != nil {
			// No /proc, or a pipe whose reader is gone already (ENXIO):
			// f reports that as it always has.
			return f, none
		}
		p := os.NewFile(uintptr(again), f.Name())
		return Raw(p), func() { p.Close() }
	case os.ModeSocket:
		return pollableSocket(f, fd)
	}
	return f, none
}

// pollableSocket is Pollable for a socket, at fd.
func pollableSocket(f *os.File, fd int) (io.ReadWriteCloser, func()) {
	none := func() {}
	var st syscall.Stat_t
	if syscall.Fstat(fd, &st) != nil {
		return f, none
	}
	for other := 0; other <= 2; other++ {
		var o syscall.Stat_t
		if other != fd && syscall.Fstat(other, &o) == nil && o.Dev == st.Dev && o.Ino == st.Ino {
			return f, none
		}
	}
	flags, err := fcntl(fd, syscall.F_GETFL, 0)
	if err != nil {
		return f, none
	}
	// The file polled is a copy of the descriptor, made non-blocking
	// before NewFile sees it. Even when the socket is non-blocking
	// already: f may have been made before that (one socket handed in
	// as both stdin and stdout), and then nothing polls it.
	dup, err := fcntl(fd, syscall.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return f, none
	}
	if flags&syscall.O_NONBLOCK != 0 {
		p, ok := polled(dup, f.Name())
		if !ok {
			return f, none
		}
		return rawSocket(p), func() { p.Close() }
	}
	// The flags are given back through a copy of its own: by then f's
	// descriptor may have been closed and its number be another file's.
	keep, err := fcntl(fd, syscall.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		syscall.Close(dup)
		return f, none
	}
	if _, err := fcntl(fd, syscall.F_SETFL, flags|syscall.O_NONBLOCK); err != nil {
		syscall.Close(dup)
		syscall.Close(keep)
		return f, none
	}
	restore := func() {
		fcntl(keep, syscall.F_SETFL, flags)
		syscall.Close(keep)
	}
	p, ok := polled(dup, f.Name())
	if !ok {
		restore()
		return f, none
	}
	return rawSocket(p), func() {
		p.Close()
		restore()
	}
}

// polled returns the file for fd, or closes fd and reports false if the
// poller does not wait on it: NewFile polls a descriptor only if it
// finds it non-blocking, and a client holding the same socket may have
// made it blocking again in between.
func polled(fd int, name string) (*os.File, bool) {
	p := os.NewFile(uintptr(fd), name)
	if err := p.SetReadDeadline(time.Time{}); err != nil {
		p.Close()
		return nil, false
	}
	return p, true
}

func fcntl(fd, cmd, arg int) (int, error) {
	r, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), uintptr(cmd), uintptr(arg))
	if errno != 0 {
		return 0, errno
	}
	return int(r), nil
}
