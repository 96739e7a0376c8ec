//go:build unix

package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestKeyFileReadEndsWithTheContext: a key, token or checkpoint file
// that blocks its read for good (a FIFO with no writer) gives way to a
// SIGTERM, which ends the command's context, as a policy file does.
// Before, the open waited for a writer with the signal caught, and the
// proxy or audit verify could be stopped only by SIGKILL.
func TestKeyFileReadEndsWithTheContext(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "key.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("no FIFO here:", err)
	}
	t.Cleanup(func() {
		// A writer that opens and closes lets the blocked reads end.
		for range 8 {
			if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				w.Close()
			}
		}
	})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for name, read := range map[string]func() error{
		"--journal-key":     func() error { _, err := readSigner(ctx, fifo); return err },
		"--key":             func() error { _, err := readVerifiers(ctx, fifo); return err },
		"--auth-token-file": func() error { _, err := readTokens(ctx, fifo); return err },
	} {
		if err := read(); !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), fifo) {
			t.Errorf("%s FIFO with the context ended = %v; want context.Canceled, naming the file", name, err)
		}
	}
	var stdout, stderr bytes.Buffer
	err := Run(ctx, []string{"audit", "verify", "--key", fifo, fifo}, nil, &stdout, &stderr)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("audit verify --key FIFO with the context ended = %v; want context.Canceled", err)
	}
}
