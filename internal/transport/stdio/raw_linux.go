package stdio

import (
	"io"
	"os"
	"syscall"
	"unsafe"
)

// Raw returns f, a pipe or socket the runtime's poller waits on (an
// os.Pipe end, or one Pollable returned), as a file read and written with
// raw system calls; or f itself if it is blocking, which a raw call would
// block in with the thread's processor held.
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

// rawFile is Raw's file.
type rawFile struct {
	f  *os.File
	rc syscall.RawConn
}

func (r *rawFile) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := r.rc.Read(func(fd uintptr) bool {
		for {
			m, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
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
		return 0, r.closed("read")
	case errno != 0:
		return 0, &os.PathError{Op: "read", Path: r.f.Name(), Err: errno}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (r *rawFile) Write(p []byte) (int, error) {
	var n int
	var errno syscall.Errno
	err := r.rc.Write(func(fd uintptr) bool {
		for n < len(p) {
			m, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[n])), uintptr(len(p)-n))
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
	switch {
	case err != nil:
		return n, r.closed("write")
	case errno != 0:
		return n, &os.PathError{Op: "write", Path: r.f.Name(), Err: errno}
	}
	return n, nil
}

// closed is the error of a read or write on the file once it is closed:
// the only error a wait on a pollable file without deadlines returns.
// It is os.File's for the same case.
func (r *rawFile) closed(op string) error {
	return &os.PathError{Op: op, Path: r.f.Name(), Err: os.ErrClosed}
}

func (r *rawFile) Close() error { return r.f.Close() }
