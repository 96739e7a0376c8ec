package telemetry

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace/noop"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

// deciderStore is a store in memory with a WaitDecided, as a shared store
// has.
type deciderStore struct{ *memstore.Store }

func (s deciderStore) WaitDecided(ctx context.Context, id string) (*record.Record, error) {
	return s.Get(ctx, id)
}

// TestTraceStoreKeepsDecider: a store an operator decides in stays one
// through the wrapper, or approvals by an operator would be refused, and
// its wait passes through.
func TestTraceStoreKeepsDecider(t *testing.T) {
	inner := deciderStore{memstore.New(memstore.Options{})}
	r := &record.Record{ID: "exe_1", Key: "k", Fingerprint: "k", Awaiting: record.ApproverOperator}
	if _, _, err := inner.Reserve(t.Context(), r, record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	s := TraceStore(inner, noop.NewTracerProvider().Tracer("test"))
	d, ok := s.(record.Decider)
	if _, lists := s.(record.Lister); !ok || !lists {
		t.Fatalf("TraceStore of a record.Decider and Lister: Decider %v, Lister %v; want both", ok, lists)
	}
	if got, err := d.WaitDecided(t.Context(), "exe_1"); err != nil || got.ID != "exe_1" {
		t.Fatalf("WaitDecided through the wrapper = %v, %v", got, err)
	}
}
