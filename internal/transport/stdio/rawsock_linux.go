//go:build linux && !386

package stdio

import "syscall"

// rawSockets: recvfrom and sendto are system calls of their own here.
const rawSockets = true

// recvNoWait and sendNoWait read and write a socket without blocking,
// whatever its flags, and without SIGPIPE.
func recvNoWait(fd, buf, n uintptr) (uintptr, syscall.Errno) {
	m, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, buf, n, syscall.MSG_DONTWAIT, 0, 0)
	return m, e
}

func sendNoWait(fd, buf, n uintptr) (uintptr, syscall.Errno) {
	m, _, e := syscall.RawSyscall6(syscall.SYS_SENDTO, fd, buf, n, syscall.MSG_DONTWAIT|syscall.MSG_NOSIGNAL, 0, 0)
	return m, e
}
