//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package pgstore

import (
	"net"
	"syscall"
)

// pending reports whether c has bytes to read, or its peer closed it,
// without waiting or taking them: an idle connection has neither.
//
// The peek goes through Control, not Read: Read waits for the
// descriptor's read lock, which pgconn's background reader can hold on
// an idle pooled connection until the server speaks, so the pool's
// acquire would wait for ever. A peek beside that pending read takes
// nothing from it. Bytes that reader has already taken are not seen;
// the close that follows a terminated session's FATAL message is.
func pending(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return true // closed on this side
	}
	var rerr error
	var b [1]byte
	err = raw.Control(func(fd uintptr) {
		_, _, rerr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	})
	if err != nil {
		return true // closed on this side
	}
	// A byte, an end of file (nothing read, no error) or an error:
	// not idle.
	return rerr != syscall.EAGAIN && rerr != syscall.EWOULDBLOCK && rerr != syscall.EINTR
}
