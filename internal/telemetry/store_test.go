package telemetry

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
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

// TestStoreSpanOfACancelledWait: a wait its caller gave up is no store
// failure: its span has no error status, and says it was cancelled; a
// store error sets the status.
func TestStoreSpanOfACancelledWait(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")
	ctx, call := tracer.Start(context.Background(), "call")
	_, cancelled := tracer.Start(ctx, "store wait")
	end(cancelled, nil, fmt.Errorf("waiting for exe_1: %w", context.Canceled))
	_, failed := tracer.Start(ctx, "store get")
	end(failed, nil, errors.New("database is locked"))
	call.End()
	spans := rec.Ended()
	if st := spans[0].Status(); st.Code == codes.Error || !slices.Contains(spans[0].Attributes(), cancelledKey.Bool(true)) {
		t.Errorf("a cancelled wait: status %v, attributes %v; want no error, and cancelled=true", st, spans[0].Attributes())
	}
	if st := spans[1].Status(); st.Code != codes.Error || st.Description != "database is locked" {
		t.Errorf("a store error: status %v; want Error", st)
	}
}

// purgingDecider is a store that drops expired records when asked, and
// that an operator decides in, as SQLite and PostgreSQL are; purged
// counts the asks.
type purgingDecider struct {
	deciderStore
	purged *int
}

func (s purgingDecider) Purge(context.Context, int) (int, error) {
	*s.purged++
	return 0, nil
}

// TestTraceStoreKeepsPurger: the interceptor asks the store it is given
// to purge at each lease renewal; through the wrapper the store still
// gets the ask, or an idle traced proxy keeps expired records.
func TestTraceStoreKeepsPurger(t *testing.T) {
	var purged int
	s := TraceStore(purgingDecider{deciderStore{memstore.New(memstore.Options{})}, &purged}, noop.NewTracerProvider().Tracer("test"))
	p, ok := s.(interface { // intercept.Purger
		Purge(context.Context, int) (int, error)
	})
	if !ok {
		t.Fatal("TraceStore of a store that purges does not")
	}
	if _, err := p.Purge(t.Context(), 10); err != nil || purged != 1 {
		t.Fatalf("Purge through the wrapper: %v, the store asked %d times; want once", err, purged)
	}
}

// fixedReplayer answers every Replay with rec, ok if rec is not nil.
type fixedReplayer struct{ rec *record.Record }

func (f fixedReplayer) Replay(context.Context, *record.Record, record.ReserveOptions) (*record.Record, bool, bool) {
	return f.rec, f.rec == nil, f.rec != nil
}

// TestReplaySpan: a store's read for a replay is a span under the call's,
// which says whether it answered the call and, if so, with what record;
// without a call's span, none.
func TestReplaySpan(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)).Tracer("test")
	ctx, call := tracer.Start(context.Background(), "call")
	found := &record.Record{ID: "exe_1", State: record.Delivered}
	for _, r := range []record.Replayer{TraceReplayer(fixedReplayer{found}, tracer), TraceReplayer(fixedReplayer{}, tracer)} {
		r.Replay(ctx, &record.Record{Key: "k"}, record.ReserveOptions{})
		r.Replay(context.Background(), &record.Record{Key: "k"}, record.ReserveOptions{})
	}
	call.End()
	ended := spans.Ended()
	if len(ended) != 3 {
		t.Fatalf("%d spans ended; want 3: two replays under the call, and the call", len(ended))
	}
	for i, want := range []bool{true, false} {
		s := ended[i]
		if s.Name() != "store replay" || s.Parent().SpanID() != call.SpanContext().SpanID() || !slices.Contains(s.Attributes(), replayedKey.Bool(want)) {
			t.Errorf("span %d: %q under %v, attributes %v; want store replay under the call, replayed=%v", i, s.Name(), s.Parent().SpanID(), s.Attributes(), want)
		}
	}
	if !slices.Contains(ended[0].Attributes(), Execution.String("exe_1")) {
		t.Errorf("the replay's span: attributes %v; want its execution", ended[0].Attributes())
	}
}
