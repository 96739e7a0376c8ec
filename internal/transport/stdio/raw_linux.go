package stdio

import (
	"errors"
	"io"
	"os"
	"syscall"
	"unsafe"
)

// Raw returns f, a non-blocking file the runtime's poller waits on and
// whose open file no other process holds (an end of an os.Pipe), as a
// file read and written with raw system calls; or f itself if it is
// blocking, which a raw call would block in with its thread's processor
// held. Nothing may call f.Fd() afterwards, which makes f blocking.
//
// A read or write through os.File enters the system call as one that may
// block: it marks the thread's processor as given up, and, if the whole
// process was idle, wakes the runtime's monitor thread (sysmon) to watch
// it. On a file that never blocks that is all cost: between two calls of
// a client that makes one at a time the proxy is idle, so the first read
// of each call woke the monitor, and on a VM a thread's wake-up costs
// more than the call's own work (docs/benchmarks.md). A raw call is made
// as any other instruction; where the file is not ready it returns
// EAGAIN, and the poller waits for it as for an os.File.
func Raw(f *os.File) io.ReadWriteCloser {
	rc, err := f.SyscallConn()
	if err != nil {
		return f
	}
	blocking := true
	rc.Control(func(fd uintptr) {
		flags, err := fcntl(int(fd), syscall.F_GETFL, 0)
		blocking = err != nil || flags&syscall.O_NONBLOCK == 0
	})
	if blocking {
		return f
	}
	return &rawFile{f: f, rc: rc}
}

// rawSocket is Raw for a socket another process may hold too: it is
// read and written with MSG_DONTWAIT, which never blocks, whatever the
// other process does to its flags; or f itself where that cannot be
// had (linux/386 has no recvfrom of its own).
func rawSocket(f *os.File) io.ReadWriteCloser {
	rc, err := f.SyscallConn()
	if err != nil || !rawSockets {
		return f
	}
	return &rawFile{f: f, rc: rc, socket: true}
}

// rawFile is Raw's file.
type rawFile struct {
	f      *os.File
	rc     syscall.RawConn
	socket bool // recvfrom and sendto, with MSG_DONTWAIT
}

func (r *rawFile) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := r.rc.Read(func(fd uintptr) bool {
		for {
			buf := uintptr(unsafe.Pointer(&p[0]))
			var m uintptr
			var e syscall.Errno
			if r.socket {
				m, e = recvNoWait(fd, buf, uintptr(len(p)))
			} else {
				m, _, e = syscall.RawSyscall(syscall.SYS_READ, fd, buf, uintptr(len(p)))
			}
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // the poller waits, then calls again
			}
			n, errno = int(m), e
			return true
		}
	})
	switch {
	case err != nil:
		return 0, r.waitError("read", err)
	case errno != 0:
		return 0, &os.PathError{Op: "read", Path: r.f.Name(), Err: errno}
	}
	raceRead(p[:n])
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

func (r *rawFile) Write(p []byte) (int, error) {
	raceWriting()
	var n int
	var errno syscall.Errno
	err := r.rc.Write(func(fd uintptr) bool {
		for n < len(p) {
			buf, size := uintptr(unsafe.Pointer(&p[n])), uintptr(len(p)-n)
			var m uintptr
			var e syscall.Errno
			if r.socket {
				m, e = sendNoWait(fd, buf, size)
			} else {
				m, _, e = syscall.RawSyscall(syscall.SYS_WRITE, fd, buf, size)
			}
			switch e {
			case 0:
				n += int(m)
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false // the poller waits until there is room
			default:
				errno = e
				return true
			}
		}
		return true
	})
	raceWritten(p[:n])
	switch {
	case err != nil:
		return n, r.waitError("write", err)
	case errno != 0:
		return n, &os.PathError{Op: "write", Path: r.f.Name(), Err: errno}
	}
	return n, nil
}

// waitError is the error of a read or write whose wait for the file
// failed: os.ErrClosed, as os.File's, if the file was closed (the only
// failure of a wait on a polled file without deadlines); else err.
func (r *rawFile) waitError(op string, err error) error {
	if _, serr := r.f.Stat(); errors.Is(serr, os.ErrClosed) {
		err = os.ErrClosed
	}
	return &os.PathError{Op: op, Path: r.f.Name(), Err: err}
}

func (r *rawFile) Close() error { return r.f.Close() }
