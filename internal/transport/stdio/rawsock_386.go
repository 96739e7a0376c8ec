//go:build linux && 386

package stdio

import "syscall"

// rawSockets: on linux/386 a socket's calls go through socketcall, so a
// client's socket is read through os.File (rawSocket).
const rawSockets = false

func recvNoWait(fd, buf, n uintptr) (uintptr, syscall.Errno) { return 0, syscall.ENOSYS }
func sendNoWait(fd, buf, n uintptr) (uintptr, syscall.Errno) { return 0, syscall.ENOSYS }
