package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/servicetest"
)

// refusingLater is a store that cannot be reached at first, then
// answers and refuses its URL (as a Redis user the ACL keeps from what
// the store needs).
type refusingLater struct {
	record.Store
	tries atomic.Int32
}

func (s *refusingLater) Secret(context.Context) ([]byte, error) {
	if s.tries.Add(1) == 1 {
		return nil, errors.New("connection refused")
	}
	return nil, record.StoreRefused(errors.New("NOPERM this user has no permissions"))
}

func (s *refusingLater) Close() error { return nil }

// TestSecretRefusedLaterIsSaid: a store that could not be reached at
// start and then answers refusing the URL is no longer "not reachable
// yet": the proxy says so at error level, once, as a start would have.
func TestSecretRefusedLaterIsSaid(t *testing.T) {
	var buf bytes.Buffer
	lw := &lockedWriter{w: &buf}
	log := slog.New(slog.NewTextHandler(lw, nil))
	store := &refusingLater{}
	if _, err := newHasher(t.Context(), store, log, false); err != nil {
		t.Fatal(err)
	}
	servicetest.Eventually(t, "the refusal to be logged", func() error {
		lw.mu.Lock()
		defer lw.mu.Unlock()
		if got := buf.String(); !strings.Contains(got, "level=ERROR") || !strings.Contains(got, "refuses the URL") || !strings.Contains(got, "NOPERM") {
			return fmt.Errorf("logged %q", got)
		}
		return nil
	})
}
