//go:build unix

package policy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestLoadRefusesAnEndlessFile: a path such as /dev/zero is refused once
// it passes MaxFileSize, rather than read until the memory runs out.
func TestLoadRefusesAnEndlessFile(t *testing.T) {
	_, err := Load(t.Context(), "/dev/zero")
	if err == nil || !strings.Contains(err.Error(), "larger than 4 MiB") {
		t.Fatalf("Load(/dev/zero) = %v; want it refused as larger than 4 MiB", err)
	}
}

// TestLoadEndsWithItsContext: a read that blocks for good (a FIFO with
// no writer) ends when the context does, as on a SIGTERM at start.
func TestLoadEndsWithItsContext(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "policy.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("no FIFO here:", err)
	}
	t.Cleanup(func() {
		// A writer that opens and closes lets the blocked read end.
		if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
	})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := Load(ctx, fifo); !errors.Is(err, context.Canceled) {
		t.Fatalf("Load(FIFO) with its context ended = %v; want context.Canceled", err)
	}
}
