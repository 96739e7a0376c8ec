package intercept

import (
	"context"
	"sync"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/workers"
)

// replayingStore is a memory store that waits, as far as the interceptor
// knows (StoreWaits), whose reservations wait while held, and which
// replays from a read (record.Replayer) the records it reserved.
type replayingStore struct {
	*memstore.Store
	mu       sync.Mutex
	held     chan struct{} // while not nil, reservations wait for it to close
	ids      map[string]string
	reserved []record.ReserveOptions
	replays  int // calls of Replay
}

func (s *replayingStore) hold() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held = make(chan struct{})
	return s.held
}

func (s *replayingStore) Reserve(ctx context.Context, r *record.Record, opts record.ReserveOptions) (*record.Record, bool, error) {
	s.mu.Lock()
	held := s.held
	s.mu.Unlock()
	if held != nil {
		<-held
	}
	rec, won, err := s.Store.Reserve(ctx, r, opts)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reserved = append(s.reserved, opts)
	if err == nil {
		s.ids[r.Key] = rec.ID
	}
	return rec, won, err
}

func (s *replayingStore) Replay(ctx context.Context, r *record.Record, opts record.ReserveOptions) (*record.Record, bool, bool) {
	s.mu.Lock()
	s.replays++
	id, ok := s.ids[r.Key]
	s.mu.Unlock()
	if !ok {
		return nil, true, false
	}
	rec, err := s.Store.Get(ctx, id)
	if err != nil || rec.State != record.Delivered || rec.Fingerprint != r.Fingerprint {
		return nil, false, false
	}
	return rec, false, true
}

func (s *replayingStore) replayed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.replays
}

// only returns the one record the store reserved, and its key.
func (s *replayingStore) only(t *testing.T) (key string, rec *record.Record) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ids) != 1 {
		t.Fatalf("%d keys reserved; want 1", len(s.ids))
	}
	for k, id := range s.ids {
		r, err := s.Store.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		key, rec = k, r
	}
	return key, rec
}

func (s *replayingStore) reservations() []record.ReserveOptions {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]record.ReserveOptions(nil), s.reserved...)
}

// TestReplayAnsweredWhereItArrives: with a store that waits and replays
// from a read, a replay is answered by the goroutine that brings it,
// before Handle returns, and makes no reservation: a held reservation
// holds it up in no way. A new call goes to a worker as before, its
// reservation told that the read found its key unheld. A tool whose
// calls replace a delivered execution is not replayed from the read.
func TestReplayAnsweredWhereItArrives(t *testing.T) {
	h := newHarness(charged)
	st := &replayingStore{Store: h.store, ids: make(map[string]string)}
	h.in = New(Options{Store: st, Hasher: fingerprint.NewRandom(), StoreWaits: true, Replayer: st, Workers: workers.New(0)})

	first := h.call(t.Context(), t, chargeCall).only(t)
	if err := h.in.Wait(t.Context()); err != nil { // delivered
		t.Fatal(err)
	}
	if got := st.reservations(); len(got) != 1 || !got[0].Unheld {
		t.Fatalf("the first call's reservations %+v; want one, told its key was unheld", got)
	}

	release := st.hold()
	again := h.call(t.Context(), t, chargeCall)
	if again.count() != 1 {
		close(release)
		t.Fatal("the replay was not answered when Handle returned")
	}
	if v, first := view(t, again.only(t)), view(t, first); !v.Meta.Replayed || v.Content[0].Text != first.Content[0].Text {
		t.Errorf("the replay answered %+v; want the first answer, %q, replayed", v, first.Content[0].Text)
	}

	other := h.call(t.Context(), t, `{"name":"charge_card","arguments":{"card":"4242","amount":7}}`)
	if other.count() != 0 {
		t.Error("a new call was answered while reservations are held")
	}
	close(release)
	if v := view(t, other.only(t)); v.Meta.Replayed {
		t.Errorf("the new call was replayed: %+v", v)
	}
	if err := h.in.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := len(st.reservations()); n != 2 {
		t.Errorf("%d reservations; want 2: the replay made none", n)
	}

	// Where calls replace a delivered execution (delivering.wait), the
	// worker's reservation decides.
	h.pol.Class = policy.Idempotent
	release = st.hold()
	third := h.call(t.Context(), t, chargeCall)
	if third.count() != 0 {
		t.Error("a call whose tool replaces delivered executions was answered from the read")
	}
	close(release)
	third.only(t)
	if n := len(st.reservations()); n != 3 {
		t.Errorf("%d reservations; want 3", n)
	}
}

// TestReplayLeftToTheWorker: a replay is not answered from a read while
// this process holds an outcome of the call's that the store has not
// taken (ownTakeovers), or runs an execution under the call's client key
// for another action (sentCalls): the read is not even made, and the
// worker, which checks both, answers. (Here the worker replays too: the
// rule is conservative.)
func TestReplayLeftToTheWorker(t *testing.T) {
	const keyed = `{"name":"charge_card","arguments":{"card":"4242","amount":100},"_meta":{"idempotencyKey":"order-1"}}`
	for _, tc := range []struct {
		name, params string
		// hold makes the process hold what keeps the read from being
		// made, and returns what lets it go.
		hold func(t *testing.T, h *harness, key string, rec *record.Record) (letGo func())
	}{
		{"outcome kept", chargeCall, func(t *testing.T, h *harness, key string, rec *record.Record) func() {
			req, _ := h.request(t, chargeCall)
			k := h.in.own.keep(req, rec, record.Change{To: record.Completed, Result: rec.Result})
			return func() { h.in.own.forget(rec.ID, k) }
		}},
		{"client key sent for another action", keyed, func(_ *testing.T, h *harness, key string, rec *record.Record) func() {
			h.in.sent.add(&record.Record{ID: "exe_other", Key: key, Fingerprint: "another action"})
			return func() { h.in.sent.drop(key, "exe_other") }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(charged)
			st := &replayingStore{Store: h.store, ids: make(map[string]string)}
			h.in = New(Options{Store: st, Hasher: fingerprint.NewRandom(), StoreWaits: true, Replayer: st, Workers: workers.New(0)})
			first := view(t, h.call(t.Context(), t, tc.params).only(t)).Content[0].Text
			if err := h.in.Wait(t.Context()); err != nil { // delivered
				t.Fatal(err)
			}
			reads := st.replayed()
			if h.call(t.Context(), t, tc.params).count() != 1 || st.replayed() != reads+1 {
				t.Fatal("a replay was not answered from a read")
			}

			key, rec := st.only(t)
			letGo := tc.hold(t, h, key, rec)
			defer letGo()
			reads = st.replayed()
			if v := view(t, h.call(t.Context(), t, tc.params).only(t)); !v.Meta.Replayed || v.Content[0].Text != first {
				t.Errorf("the worker answered %+v; want %q, replayed", v, first)
			}
			if n := st.replayed() - reads; n != 0 {
				t.Errorf("%d reads; want none: the worker decides this call", n)
			}
		})
	}
}
