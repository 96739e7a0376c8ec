package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// TimeStore returns s with Reserve, Update, Get and Renew timed into
// mcp_idempotent_store_seconds and their failures counted in
// mcp_idempotent_store_errors_total. Wait passes through untimed: it
// blocks until another call settles, so its time is the tool's, not the
// store's. The result is a record.Lister when s is one, and a
// record.Decider too when s is both (WaitDecided passes through untimed,
// as Wait does).
//
// Only the interceptor's handle should be wrapped: other interfaces a
// concrete store has (a durable store's Secret and Close) are not kept.
func (m *Metrics) TimeStore(s record.Store) record.Store {
	t := &timedStore{Store: s, m: m}
	l, ok := s.(record.Lister)
	if !ok {
		return t
	}
	if d, ok := s.(record.Decider); ok {
		return timedDecider{timedLister{t, l}, d}
	}
	return timedLister{t, l}
}

// timedStore times the methods it overrides; the embedded Store supplies
// the rest.
type timedStore struct {
	record.Store
	m *Metrics
}

// timedLister keeps List reachable through the wrapper.
type timedLister struct {
	*timedStore
	record.Lister
}

// timedDecider keeps List and WaitDecided reachable through the wrapper.
type timedDecider struct {
	timedLister
	record.Decider
}

// observe records one operation that began at start and ended with err.
func (t *timedStore) observe(op string, start time.Time, err error) {
	t.m.store.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if err != nil && !answer(err) {
		t.m.storeErrors.WithLabelValues(op).Inc()
	}
}

// answer reports whether err is an answer the store gave rather than a
// failure of the store: the interceptor branches on these in normal
// operation.
func answer(err error) bool {
	return errors.Is(err, record.ErrNotFound) || errors.Is(err, record.ErrConflict) || errors.Is(err, context.Canceled)
}

func (t *timedStore) Reserve(ctx context.Context, r *record.Record, opts record.ReserveOptions) (*record.Record, bool, error) {
	start := time.Now()
	rec, won, err := t.Store.Reserve(ctx, r, opts)
	t.observe("reserve", start, err)
	return rec, won, err
}

func (t *timedStore) Update(ctx context.Context, id string, c record.Change) (*record.Record, error) {
	start := time.Now()
	rec, err := t.Store.Update(ctx, id, c)
	t.observe("update", start, err)
	return rec, err
}

func (t *timedStore) Get(ctx context.Context, id string) (*record.Record, error) {
	start := time.Now()
	rec, err := t.Store.Get(ctx, id)
	t.observe("get", start, err)
	return rec, err
}

func (t *timedStore) Renew(ctx context.Context, owner string, until time.Time) error {
	start := time.Now()
	err := t.Store.Renew(ctx, owner, until)
	t.observe("renew", start, err)
	return err
}

// TimeReplayer returns r with Replay timed as the op replay. A replay it
// answers takes the place of a reservation's read; one it does not is
// timed again as the reservation that follows.
func (m *Metrics) TimeReplayer(r record.Replayer) record.Replayer {
	return timedReplayer{r, m}
}

type timedReplayer struct {
	r record.Replayer
	m *Metrics
}

func (t timedReplayer) Replay(ctx context.Context, r *record.Record, opts record.ReserveOptions) (*record.Record, bool, bool) {
	start := time.Now()
	rec, unheld, ok := t.r.Replay(ctx, r, opts)
	t.m.store.WithLabelValues("replay").Observe(time.Since(start).Seconds())
	return rec, unheld, ok
}

// Purge passes a purge through, untimed, to a store that drops expired
// records when asked (intercept.Purger), and does nothing for one that
// does not. The interceptor asks through this wrapper at each lease
// renewal: without Purge here, an idle proxy serving metrics would keep
// expired records past their retention, and lapsed orphans unsettled.
func (t *timedStore) Purge(ctx context.Context, limit int) (int, error) {
	if p, ok := t.Store.(intercept.Purger); ok {
		return p.Purge(ctx, limit)
	}
	return 0, nil
}
