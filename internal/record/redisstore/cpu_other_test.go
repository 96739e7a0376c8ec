//go:build !unix

package redisstore_test

import (
	"testing"
	"time"
)

// processCPU skips the benchmark: this system has no getrusage, and a
// client's CPU time is what the benchmark reports.
func processCPU(tb testing.TB) time.Duration {
	tb.Helper()
	tb.Skip("client CPU time is read with getrusage, which this system lacks")
	return 0
}
