//go:build unix

package stdio

import (
	"io"
	"os"
	"syscall"
)

// readNow reads from f, a non-blocking file whose read deadline has
// passed, what is in it now; where nothing is, it reports the end. A
// read through f would fail at once, before it reads.
func readNow(f *os.File, p []byte) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, io.EOF
	}
	n := 0
	var rerr error
	if err := rc.Control(func(fd uintptr) {
		for {
			n, rerr = syscall.Read(int(fd), p)
			if rerr != syscall.EINTR {
				return
			}
		}
	}); err != nil || rerr != nil || n <= 0 {
		return 0, io.EOF // EAGAIN: nothing is left that the child wrote
	}
	return n, nil
}
