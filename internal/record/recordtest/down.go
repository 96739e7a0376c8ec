package recordtest

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// UpdatesDown is a Store whose updates fail while Down is set, like a
// store that went away after a reservation: for tests of what a proxy
// does with an outcome it cannot record.
type UpdatesDown struct {
	record.Store
	Down atomic.Bool
}

// ErrDown is UpdatesDown's error while it is down.
var ErrDown = errors.New("connection refused")

func (s *UpdatesDown) Update(ctx context.Context, id string, c record.Change) (*record.Record, error) {
	if s.Down.Load() {
		return nil, ErrDown
	}
	return s.Store.Update(ctx, id, c)
}
