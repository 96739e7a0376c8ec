//go:build !linux

package stdio

import (
	"io"
	"os"
)

// Raw returns f as it is: raw system calls are made on Linux only
// (raw_linux.go).
func Raw(f *os.File) io.ReadWriteCloser { return f }
