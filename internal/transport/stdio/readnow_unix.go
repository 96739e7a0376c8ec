//go:build unix

package stdio

import (
	"errors"
	"io"
	"os"
	"syscall"
)

// readsNow reports whether readNow can read a pipe without waiting.
const readsNow = true

// readNow reads what f, a pipe the runtime's poller waits on, holds now,
// without waiting for more: io.EOF when it holds nothing.
func readNow(f *os.File, p []byte) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		for {
			n, rerr = syscall.Read(int(fd), p)
			if rerr != syscall.EINTR {
				return true // never a wait for the poller
			}
		}
	})
	switch {
	case err != nil:
		if _, serr := f.Stat(); errors.Is(serr, os.ErrClosed) {
			return 0, os.ErrClosed
		}
		return 0, err
	case rerr == syscall.EAGAIN:
		return 0, io.EOF
	case rerr != nil:
		return 0, &os.PathError{Op: "read", Path: f.Name(), Err: rerr}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}
