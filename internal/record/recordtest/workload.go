package recordtest

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// A Workload makes records as the proxy makes them for new tools/call
// requests, so that what a store keeps per record is measured on what it
// really gets: each record has its own id, fingerprint (also its key),
// tool name and result, as each call parses and hashes its own, and
// shares its actor, scope, upstream and owner with the calls of its
// session.
type Workload struct {
	Actor, Scope, Upstream, Owner string
	// ResultSize is the length of each result, in bytes; 0 means 200.
	ResultSize int
	// Retention is each record's; 0 means a day, the default.
	Retention time.Duration
	n         int
}

// NewWorkload returns a Workload with the names a proxy session gives.
func NewWorkload() *Workload {
	return &Workload{
		Actor:    "alice",
		Scope:    "session:" + record.NewID(time.Now())[4:],
		Upstream: "github ref:3f9a0c1d2e4b5a69",
		Owner:    "proxy-" + record.NewID(time.Now())[4:],
	}
}

// Execute runs the workload's next execution through s as the proxy does
// when no account makes it wait: reserved and dispatched in one step with
// a lease, completed with a result, and delivered.
func (w *Workload) Execute(ctx context.Context, s record.Store) (*record.Record, error) {
	w.n++
	sum := sha256.Sum256(strconv.AppendInt(nil, int64(w.n), 10))
	fp := hex.EncodeToString(sum[:])
	r := &record.Record{
		ID:          record.NewID(time.Now()),
		Key:         fp,
		Fingerprint: fp,
		Actor:       w.Actor,
		Scope:       w.Scope,
		Upstream:    w.Upstream,
		Tool:        string([]byte("create_issue")), // parsed from each call
		Retention:   cmp.Or(w.Retention, 24*time.Hour),
		Owner:       w.Owner,
	}
	opts := record.ReserveOptions{Dispatch: true, Lease: 30 * time.Second}
	if _, won, err := s.Reserve(ctx, r, opts); err != nil || !won {
		return nil, fmt.Errorf("reserving %s: won=%v err=%v", r.Key, won, err)
	}
	if _, err := s.Update(ctx, r.ID, record.Change{To: record.Completed, Result: w.result()}); err != nil {
		return nil, err
	}
	return s.Update(ctx, r.ID, record.Change{To: record.Delivered, From: record.Completed})
}

// result returns a CallToolResult of w.ResultSize bytes, in a buffer of
// its own, as each answer is read into one.
func (w *Workload) result() []byte {
	size := w.ResultSize
	if size == 0 {
		size = 200
	}
	b := fmt.Appendf(make([]byte, 0, size), `{"content":[{"type":"text","text":"Created issue #%d in acme/widgets: `, w.n)
	const tail = `"}],"isError":false}`
	for len(b) < size-len(tail) {
		b = append(b, 'x')
	}
	return append(b, tail...)
}
