//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package pgstore

import (
	"net"
	"syscall"
)

// pending reports whether c has bytes to read, or its peer closed it,
// without waiting or taking them: an idle connection has neither.
func pending(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var rerr error
	var b [1]byte
	err = raw.Read(func(fd uintptr) bool {
		// Go's sockets do not block: with nothing to read, EAGAIN.
		_, _, rerr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK)
		return true
	})
	if err != nil {
		return true // closed on this side
	}
	// A byte, an end of file (nothing read, no error) or an error:
	// not idle.
	return rerr != syscall.EAGAIN && rerr != syscall.EWOULDBLOCK && rerr != syscall.EINTR
}
