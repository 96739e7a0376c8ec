//go:build !linux

package stdio

import (
	"os"
	"syscall"
)

// childAttr is nil where the kernel offers no parent-death signal: a
// proxy killed outright leaves its child to notice its closed stdin.
func childAttr() *syscall.SysProcAttr { return nil }

// signalTree signals the child alone: it leads no process group here.
func signalTree(p *os.Process, sig syscall.Signal) {
	if sig == syscall.SIGKILL {
		_ = p.Kill() // the one os.Process sends on Windows too
		return
	}
	_ = p.Signal(sig)
}
