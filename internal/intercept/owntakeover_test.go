package intercept

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

// outageStore refuses every write while down, as a store that cannot be
// reached does; reads still answer, as SQLite's do while another process
// holds its write lock.
type outageStore struct {
	record.Store
	down atomic.Bool
}

var errOutage = errors.New("connection refused")

func (s *outageStore) Reserve(ctx context.Context, r *record.Record, opts record.ReserveOptions) (*record.Record, bool, error) {
	if s.down.Load() {
		return nil, false, errOutage
	}
	return s.Store.Reserve(ctx, r, opts)
}

func (s *outageStore) Update(ctx context.Context, id string, c record.Change) (*record.Record, error) {
	if s.down.Load() {
		return nil, errOutage
	}
	return s.Store.Update(ctx, id, c)
}

func (s *outageStore) Renew(ctx context.Context, owner string, until time.Time) error {
	if s.down.Load() {
		return errOutage
	}
	return s.Store.Renew(ctx, owner, until)
}

// TestOwnTakeoverGetsTheOutcome: an outage longer than the lease keeps the
// proxy from recording a charge's outcome, and its lease lapses. Once the
// store answers, a retry from the same proxy meets the execution before
// the outcome is recorded, and settles it as an orphan: unknown, its owner
// gone. The owner is this proxy, which holds the outcome: the retry gets
// the charge's result, and the record says so.
func TestOwnTakeoverGetsTheOutcome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ms := memstore.New(memstore.Options{})
		store := &outageStore{Store: ms}
		h := newHarness(charged)
		h.in = New(Options{Store: store, Hasher: fingerprint.NewRandom(), Lease: time.Second})

		release := make(chan struct{})
		h.up.respond = func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
			<-release
			return charged(ctx, n, p)
		}
		first := make(chan Answer, 1)
		go func() { first <- h.call(t.Context(), t, chargeCall).only(t) }()
		synctest.Wait() // dispatched, held by the upstream
		store.down.Store(true)
		close(release)
		a := <-first
		if e := jsonrpc.DecodeError(a.Error); a.Error == nil || !strings.Contains(e.Message, "could not be recorded yet") {
			t.Fatalf("first caller got %+v; want the error saying its outcome is not recorded yet", a)
		}
		time.Sleep(time.Minute) // the outage outlasts the lease
		store.down.Store(false)

		// Before the proxy's next try to record the outcome.
		a = h.call(t.Context(), t, chargeCall).only(t)
		if a.Error != nil || !strings.Contains(string(a.Result), "charge #1") {
			t.Fatalf("the retry got %s %s; want the charge's result", a.Result, a.Error)
		}
		if n := h.up.calls.Load(); n != 1 {
			t.Fatalf("upstream reached %d times; want 1", n)
		}
		recs, err := ms.List(t.Context(), record.Filter{})
		if err != nil || len(recs) != 1 || recs[0].State != record.Delivered {
			t.Fatalf("records %v (%v); want one, delivered", recs, err)
		}
		synctest.Wait() // recordLater ends: the outcome is in
	})
}

// TestOwnTakeoverWhileRunning: the outage comes while the upstream still
// runs the charge, and outlasts the lease, which the proxy cannot renew.
// A retry from the same proxy, once the store answers, settles the
// execution as an orphan, and is told its outcome is unknown. When the
// charge's answer comes, it is recorded over that unknown: its first
// caller gets it, and so does the next retry.
func TestOwnTakeoverWhileRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &outageStore{Store: memstore.New(memstore.Options{})}
		h, release, first := takenOverRunning(t, store, &store.down)
		close(release)
		a := <-first.got
		if a.Error != nil || !strings.Contains(string(a.Result), "charge #1") {
			t.Fatalf("the first caller got %s %s; want the charge's result", a.Result, a.Error)
		}
		a = h.call(t.Context(), t, chargeCall).only(t)
		if a.Error != nil || !strings.Contains(string(a.Result), "charge #1") {
			t.Fatalf("the next retry got %s %s; want the charge's result", a.Result, a.Error)
		}
		if n := h.up.calls.Load(); n != 1 {
			t.Fatalf("upstream reached %d times; want 1", n)
		}
	})
}

// takenOverRunning starts a charge through a harness on store, which
// down takes down, and holds it in the upstream until release is closed;
// meanwhile the store is down for a minute, past the lease, and once it
// is back a retry of the charge takes the execution for gone and is told
// its outcome is unknown. It returns the harness, release and what the
// charge's first caller is told.
func takenOverRunning(t *testing.T, store record.Store, down *atomic.Bool) (*harness, chan struct{}, *answers) {
	t.Helper()
	h := newHarness(charged)
	h.in = New(Options{Store: store, Hasher: fingerprint.NewRandom(), Lease: time.Second})
	release := make(chan struct{})
	h.up.respond = func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
		<-release
		return charged(ctx, n, p)
	}
	req, first := h.request(t, chargeCall)
	go h.in.Handle(t.Context(), req)
	synctest.Wait()
	down.Store(true)
	time.Sleep(time.Minute)
	down.Store(false)
	a := h.call(t.Context(), t, chargeCall).only(t)
	if !strings.Contains(string(a.Result), "Outcome unknown") {
		t.Fatalf("the retry that took the execution for gone got %s %s; want outcome unknown", a.Result, a.Error)
	}
	return h, release, first
}

// overOwnFailsOnce is an outageStore whose first write of an outcome over
// an unknown (the outcome this process holds, written over its own
// takeover) does not reach the store, as a store still unsteady after an
// outage may drop it.
type overOwnFailsOnce struct {
	*outageStore
	failed atomic.Bool
}

func (s *overOwnFailsOnce) Update(ctx context.Context, id string, c record.Change) (*record.Record, error) {
	if c.From == record.Unknown && c.To != record.Dispatched && s.failed.CompareAndSwap(false, true) {
		return nil, errOutage
	}
	return s.outageStore.Update(ctx, id, c)
}

// TestOwnTakeoverWhileRunningStoreFails: as TestOwnTakeoverWhileRunning,
// but the store does not answer the write of the charge's outcome over
// the unknown when its answer comes. The outcome is kept and recorded
// once the store answers again: the next retry gets the charge's result,
// not an unknown that nothing will ever resolve.
func TestOwnTakeoverWhileRunningStoreFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &overOwnFailsOnce{outageStore: &outageStore{Store: memstore.New(memstore.Options{})}}
		h, release, first := takenOverRunning(t, store, &store.down)
		close(release)
		a := <-first.got
		if e := jsonrpc.DecodeError(a.Error); a.Error == nil || !strings.Contains(e.Message, "could not be recorded yet") {
			t.Fatalf("the first caller got %s %s; want the error saying its outcome is not recorded yet", a.Result, a.Error)
		}
		time.Sleep(time.Minute) // the proxy records the outcome it kept
		a = h.call(t.Context(), t, chargeCall).only(t)
		if a.Error != nil || !strings.Contains(string(a.Result), "charge #1") {
			t.Fatalf("the next retry got %s %s; want the charge's result", a.Result, a.Error)
		}
		if n := h.up.calls.Load(); n != 1 {
			t.Fatalf("upstream reached %d times; want 1", n)
		}
	})
}

// takeoverHeldJournal holds the line of an orphan's takeover until hold is
// closed, as a journal slow to write it would.
type takeoverHeldJournal struct {
	memJournal
	hold chan struct{}
}

func (j *takeoverHeldJournal) Record(e journal.Entry) error {
	if strings.Contains(e.Note, "went away") {
		<-j.hold
	}
	return j.memJournal.Record(e)
}

// TestOwnOrphanPurgedJournalsInOrder: the store's purge settles an
// execution of this process's own as an orphan while the proxy keeps its
// outcome to record. The journal says the execution became unknown, and
// then that its outcome was recorded over it: never the other way round,
// which would leave it unknown to whoever reads the journal.
func TestOwnOrphanPurgedJournalsInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ms := memstore.New(memstore.Options{})
		store := &outageStore{Store: ms}
		h := newHarness(charged)
		j := &takeoverHeldJournal{hold: make(chan struct{})}
		h.in = New(Options{Store: store, Hasher: fingerprint.NewRandom(), Lease: time.Second, Journal: j})
		release := make(chan struct{})
		h.up.respond = func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
			<-release
			return charged(ctx, n, p)
		}
		first := make(chan Answer, 1)
		go func() { first <- h.call(t.Context(), t, chargeCall).only(t) }()
		synctest.Wait()
		store.down.Store(true)
		close(release)
		<-first // told its outcome is not recorded yet
		time.Sleep(time.Minute)
		store.down.Store(false)

		// The purge, before the proxy's next try to record the outcome.
		recs, err := ms.List(t.Context(), record.Filter{})
		if err != nil || len(recs) != 1 {
			t.Fatalf("records %v (%v); want one", recs, err)
		}
		o, err := ms.Update(t.Context(), recs[0].ID, record.OrphanChange(recs[0]))
		if err != nil {
			t.Fatal(err)
		}
		go h.in.JournalOrphan(o)
		synctest.Wait() // the orphan's line is held
		close(j.hold)
		synctest.Wait() // recordLater ends
		if got := j.states(); !slices.Equal(got[len(got)-2:], []string{"unknown", "completed"}) {
			t.Fatalf("journal states %v; want unknown, then completed", got)
		}
		if rec, err := ms.Get(t.Context(), o.ID); err != nil || rec.State != record.Completed {
			t.Fatalf("record %v (%v); want completed", rec, err)
		}
	})
}
