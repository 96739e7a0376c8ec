package stdio

import "syscall"

// childAttr makes the kernel send the child SIGTERM if the proxy dies
// without stopping it (SIGKILL, a crash): a client that kills the proxy
// it started must not leave the server it never saw running.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
