//go:build !linux

package stdio

import "syscall"

// childAttr is nil where the kernel offers no parent-death signal: a
// proxy killed outright leaves its child to notice its closed stdin.
func childAttr() *syscall.SysProcAttr { return nil }
