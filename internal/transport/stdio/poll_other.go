//go:build !linux

package stdio

import (
	"io"
	"os"
)

// Pollable returns f as it is, and a function that does nothing:
// opening a pipe again with flags of its own is for Linux
// (poll_linux.go).
func Pollable(f *os.File, flag int) (io.ReadWriteCloser, func()) { return f, func() {} }
