//go:build unix

package cli

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
)

// TestStopContextNamesTheSignal: a StopContext a signal ends is
// cancelled, as signal.NotifyContext's, with a cause hurryOnSignal reads
// the signal from.
func TestStopContextNamesTheSignal(t *testing.T) {
	ctx, stop := StopContext(t.Context())
	defer stop()
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-ctx.Done()
	var s stopSignal
	if cause := context.Cause(ctx); !errors.As(cause, &s) || s.Signal != syscall.SIGTERM || !errors.Is(cause, context.Canceled) {
		t.Fatalf("the cause is %v; want a stopSignal of SIGTERM that is context.Canceled", cause)
	}
}
