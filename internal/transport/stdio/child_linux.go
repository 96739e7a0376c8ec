package stdio

import (
	"os"
	"syscall"
)

// childAttr makes the kernel send the child SIGTERM if the proxy dies
// without stopping it (SIGKILL, a crash): a client that kills the proxy
// it started must not leave the server it never saw running. The child
// leads a process group of its own, so that Stop reaches what it started
// too: a wrapper (sh -c, a launcher) stopped alone leaves the server it
// ran behind it, orphaned and running.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
}

// signalTree sends sig to the child's process group: the child and
// whatever it started that did not leave the group.
func signalTree(p *os.Process, sig syscall.Signal) {
	_ = syscall.Kill(-p.Pid, sig)
}
