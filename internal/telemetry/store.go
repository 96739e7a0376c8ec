package telemetry

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// TraceStore returns s with Reserve, Update, Get and Wait traced: each is
// a span under the span its context holds, and none is started without
// one, so the work no call asked for (lease renewals, sweeps) makes no
// root spans. The result is a record.Lister when s is one, and a
// record.Decider, its WaitDecided traced too, when s is both.
func TraceStore(s record.Store, t trace.Tracer) record.Store {
	ts := &tracedStore{Store: s, t: t}
	l, ok := s.(record.Lister)
	if !ok {
		return ts
	}
	if d, ok := s.(record.Decider); ok {
		return tracedDecider{tracedLister{ts, l}, d}
	}
	return tracedLister{ts, l}
}

// tracedDecider keeps List and WaitDecided reachable through the
// wrapper, and traces the wait for a decision: an approval's.
type tracedDecider struct {
	tracedLister
	d record.Decider
}

func (s tracedDecider) WaitDecided(ctx context.Context, id string) (*record.Record, error) {
	ctx, span := s.start(ctx, "wait decided")
	rec, err := s.d.WaitDecided(ctx, id)
	if span != nil && rec == nil {
		span.SetAttributes(Execution.String(id))
	}
	end(span, rec, err)
	return rec, err
}

// tracedStore traces the methods it overrides; the embedded Store
// supplies the rest.
type tracedStore struct {
	record.Store
	t trace.Tracer
}

// tracedLister keeps List reachable through the wrapper.
type tracedLister struct {
	*tracedStore
	record.Lister
}

// start starts the span of the store operation op, or returns a nil span
// when ctx holds no sampled span context to parent it. The parent need
// not be recording: a call in shadow mode is judged under its span's
// context alone, and on after the span ends.
func (s *tracedStore) start(ctx context.Context, op string) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsSampled() {
		return ctx, nil
	}
	return s.t.Start(ctx, "store "+op, trace.WithSpanKind(trace.SpanKindInternal))
}

// end ends span, if there is one, with the record's id and state and the
// operation's error. ErrConflict and ErrNotFound are the store's answers,
// not failures; nor is a caller that stopped waiting (context.Canceled: a
// client's cancel, or its session's end), which the span records as an
// attribute.
func end(span trace.Span, rec *record.Record, err error) {
	if span == nil {
		return
	}
	if rec != nil {
		span.SetAttributes(Execution.String(rec.ID), State.String(string(rec.State)))
	}
	switch {
	case err == nil, errors.Is(err, record.ErrConflict), errors.Is(err, record.ErrNotFound):
	case errors.Is(err, context.Canceled):
		span.SetAttributes(cancelledKey.Bool(true))
	default:
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// cancelledKey marks a store operation its caller stopped waiting for.
var cancelledKey = attribute.Key("mcp_idempotent.cancelled")

func (s *tracedStore) Reserve(ctx context.Context, r *record.Record, opts record.ReserveOptions) (*record.Record, bool, error) {
	ctx, span := s.start(ctx, "reserve")
	rec, won, err := s.Store.Reserve(ctx, r, opts)
	if span != nil {
		span.SetAttributes(wonKey.Bool(won))
	}
	end(span, rec, err)
	return rec, won, err
}

func (s *tracedStore) Update(ctx context.Context, id string, c record.Change) (*record.Record, error) {
	ctx, span := s.start(ctx, "update")
	rec, err := s.Store.Update(ctx, id, c)
	if span != nil && rec == nil {
		span.SetAttributes(Execution.String(id), State.String(string(c.To)))
	}
	end(span, rec, err)
	return rec, err
}

func (s *tracedStore) Get(ctx context.Context, id string) (*record.Record, error) {
	ctx, span := s.start(ctx, "get")
	rec, err := s.Store.Get(ctx, id)
	end(span, rec, err)
	return rec, err
}

// Wait's span is the time a caller waited for another's execution to
// settle: the wait of an attached call.
func (s *tracedStore) Wait(ctx context.Context, id string) (*record.Record, error) {
	ctx, span := s.start(ctx, "wait")
	rec, err := s.Store.Wait(ctx, id)
	if span != nil && rec == nil {
		span.SetAttributes(Execution.String(id))
	}
	end(span, rec, err)
	return rec, err
}

// TraceReplayer returns r with Replay traced as TraceStore traces
// Reserve: a span "store replay" under the call's, if it has one.
func TraceReplayer(r record.Replayer, t trace.Tracer) record.Replayer {
	return tracedReplayer{r, &tracedStore{t: t}}
}

type tracedReplayer struct {
	r record.Replayer
	s *tracedStore // for start alone
}

func (t tracedReplayer) Replay(ctx context.Context, r *record.Record, opts record.ReserveOptions) (*record.Record, bool, bool) {
	ctx, span := t.s.start(ctx, "replay")
	rec, unheld, ok := t.r.Replay(ctx, r, opts)
	if span != nil {
		span.SetAttributes(replayedKey.Bool(ok))
	}
	end(span, rec, nil)
	return rec, unheld, ok
}

// replayedKey says whether a store's read answered a replay.
const replayedKey = attribute.Key("mcp_idempotent.replayed")

// wonKey says whether a reservation won: the call starts a new execution.
const wonKey = attribute.Key("mcp_idempotent.won")

// purger is intercept.Purger, which this package cannot import: a store
// that drops expired records when asked.
type purger interface {
	Purge(ctx context.Context, limit int) (int, error)
}

// Purge passes a purge through, untraced (background work makes no
// spans), to a store that is a purger, and does nothing for one that is
// not. The interceptor asks through this wrapper at each lease renewal:
// without Purge here, an idle traced proxy would keep expired records
// past their retention, and lapsed orphans unsettled.
func (s *tracedStore) Purge(ctx context.Context, limit int) (int, error) {
	if p, ok := s.Store.(purger); ok {
		return p.Purge(ctx, limit)
	}
	return 0, nil
}
