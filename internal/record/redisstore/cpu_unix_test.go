//go:build unix

package redisstore_test

import (
	"syscall"
	"testing"
	"time"
)

// processCPU returns the CPU time this process has used, user and
// system.
func processCPU(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
