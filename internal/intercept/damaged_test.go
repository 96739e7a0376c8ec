package intercept

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// editedStore hands out the records its Store holds as edit leaves them:
// a durable store that something other than the proxy wrote to.
type editedStore struct {
	record.Store
	edit func(*record.Record)
}

func (s editedStore) Reserve(ctx context.Context, r *record.Record, opts record.ReserveOptions) (*record.Record, bool, error) {
	rec, won, err := s.Store.Reserve(ctx, r, opts)
	if rec != nil && !won {
		rec = rec.Clone()
		s.edit(rec)
	}
	return rec, won, err
}

// TestDamagedRecordNotAnswered: a settled record whose answer is not one
// the upstream could have given is neither replayed, which would write
// what is not JSON to the client or pass it off as the tool's result, nor
// run again. The caller is told which execution and what is wrong.
func TestDamagedRecordNotAnswered(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(*record.Record)
		why  string
	}{
		{"result not JSON", func(r *record.Record) { r.Result = json.RawMessage(`garbage{`) }, "its result is not JSON"},
		{"no result", func(r *record.Record) { r.Result = nil }, "without a result"},
		{"error not JSON", func(r *record.Record) {
			r.State, r.Result, r.Error = record.Failed, nil, json.RawMessage(`nope`)
		}, "its error is not a JSON object"},
		{"error not an object", func(r *record.Record) {
			r.State, r.Result, r.Error = record.Failed, nil, json.RawMessage(`42`)
		}, "its error is not a JSON object"},
		{"state unknown to this build", func(r *record.Record) { r.State = "archived" }, `its state "archived" is not one this build knows`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(charged)
			// StoreWaits: a durable store, which another program may write to.
			h.in = New(Options{Store: editedStore{Store: h.store, edit: tt.edit}, Hasher: fingerprint.NewRandom(), StoreWaits: true})
			if a := h.call(t.Context(), t, chargeCall).only(t); a.Error != nil {
				t.Fatalf("first call got %s", a.Error)
			}
			id := h.onlyRecord(t).ID
			a := h.call(t.Context(), t, chargeCall).only(t)
			if a.Result != nil {
				t.Fatalf("got result %s; want an error", a.Result)
			}
			e := jsonrpc.DecodeError(a.Error)
			if e == nil || !strings.Contains(e.Message, id) || !strings.Contains(e.Message, tt.why) || !strings.Contains(e.Message, "not run again") {
				t.Fatalf("got %s; want an error naming %s and saying %s", a.Error, id, tt.why)
			}
			if n := h.up.calls.Load(); n != 1 {
				t.Fatalf("upstream reached %d times; want 1", n)
			}
		})
	}
}

// unreadableStore refuses every reservation as a store does whose record
// of the call's key cannot be read.
type unreadableStore struct{ record.Store }

func (unreadableStore) Reserve(context.Context, *record.Record, record.ReserveOptions) (*record.Record, bool, error) {
	return nil, false, fmt.Errorf("reading record exe_0: %w: attempts: invalid syntax", record.ErrUnreadable)
}

// TestUnreadableRecordNotCalledUnavailable: a reservation refused for a
// record the store cannot read is not said to be the store's being
// unavailable, which invites calling again: the store answered, and
// calling again reads the same record.
func TestUnreadableRecordNotCalledUnavailable(t *testing.T) {
	h := newHarness(charged)
	h.in = New(Options{Store: unreadableStore{h.store}, Hasher: fingerprint.NewRandom()})
	a := h.call(t.Context(), t, chargeCall).only(t)
	e := jsonrpc.DecodeError(a.Error)
	if e == nil || strings.Contains(e.Message, "unavailable") || !strings.Contains(e.Message, "cannot read") || !strings.Contains(e.Message, "exe_0") {
		t.Fatalf("got %s; want an error saying the store holds a record it cannot read, exe_0", a.Error)
	}
	if n := h.up.calls.Load(); n != 0 {
		t.Fatalf("upstream reached %d times; want 0", n)
	}
}
