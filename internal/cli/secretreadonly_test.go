package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/servicetest"
)

// readOnlyStore answers and takes no writes, with no secret stored yet:
// a Redis replica given as the URL.
type readOnlyStore struct{ record.Store }

func (readOnlyStore) Secret(context.Context) ([]byte, error) {
	return nil, record.WritesRefused(errors.New("storing the secret: READONLY You can't write against a read only replica."))
}

func (readOnlyStore) Close() error { return nil }

// TestReadOnlyStoreSaid: a store whose server answers and takes no
// writes, so that the secret cannot be stored, is not said to be out of
// reach: the log says what the server answered, at start and on each
// try after it.
func TestReadOnlyStoreSaid(t *testing.T) {
	var buf bytes.Buffer
	lw := &lockedWriter{w: &buf}
	log := slog.New(slog.NewTextHandler(lw, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if _, err := newHasher(t.Context(), readOnlyStore{}, log, false); err != nil {
		t.Fatal(err)
	}
	servicetest.Eventually(t, "a try after the start to be logged", func() error {
		lw.mu.Lock()
		defer lw.mu.Unlock()
		if got := buf.String(); strings.Count(got, "READONLY") < 2 {
			return fmt.Errorf("logged %q", got)
		}
		return nil
	})
	lw.mu.Lock()
	got := buf.String()
	lw.mu.Unlock()
	if strings.Contains(got, "cannot be reached") || !strings.Contains(got, "level=ERROR msg=\"the store's server answers and takes no writes") {
		t.Fatalf("the log says the store cannot be reached, or not that it takes no writes:\n%s", got)
	}
}
