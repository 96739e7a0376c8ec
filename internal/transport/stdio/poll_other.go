//go:build !linux

package stdio

import "os"

// Pollable returns f as it is, and a function that does nothing:
// opening a pipe again with flags of its own is for Linux
// (poll_linux.go).
func Pollable(f *os.File, flag int) (*os.File, func()) { return f, func() {} }
