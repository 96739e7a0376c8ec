package intercept

import (
	"context"
	"encoding/json"
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
			h.in = New(Options{Store: editedStore{Store: h.store, edit: tt.edit}, Hasher: fingerprint.NewRandom()})
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
