package cli

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
)

// storeGoesDown answers a call, taking the store down before it does.
type storeGoesDown struct{ s *recordtest.UpdatesDown }

func (u storeGoesDown) Send(_ context.Context, _ string, _ json.RawMessage, done intercept.Answered) {
	u.s.Down.Store(true)
	done.Answered(json.RawMessage(`{"content":[{"type":"text","text":"charged"}]}`), nil)
}

type discard struct{}

func (discard) Reply(intercept.Answer) error { return nil }

// TestExitWaitsForOutcomes: a proxy whose store refused a call's outcome
// while it was down does not exit, and lose it, while it still tries to
// record it: it waits for the store to take it.
func TestExitWaitsForOutcomes(t *testing.T) {
	mem := memstore.New(memstore.Options{})
	store := &recordtest.UpdatesDown{Store: mem}
	in := intercept.New(intercept.Options{Store: store, Hasher: fingerprint.NewRandom()})
	call, perr := mcp.ParseToolCall(json.RawMessage(`{"name":"charge_card","arguments":{}}`))
	if perr != nil {
		t.Fatal(perr)
	}
	pol := policy.FromAnnotations(nil)
	in.Handle(t.Context(), &intercept.Request{Call: call, Policy: &pol, Actor: "alice", Scope: "session:1",
		UpstreamID: "stdio:bank", Upstream: storeGoesDown{store}, Reply: discard{}})

	exited := make(chan struct{})
	go func() {
		waitForOutcomes(t.Context(), in, slog.New(slog.NewTextHandler(io.Discard, nil)))
		close(exited)
	}()
	select {
	case <-exited:
		t.Fatal("the proxy exited while an outcome was still to be recorded")
	case <-time.After(300 * time.Millisecond):
	}
	store.Down.Store(false)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the proxy did not exit once the store took the outcome")
	}
	if recs := mem.Records(); len(recs) != 1 || recs[0].State != record.Completed {
		t.Fatalf("records %+v; want the execution completed", recs)
	}
}
