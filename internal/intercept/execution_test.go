package intercept

import (
	"context"
	"encoding/json"
	"testing"
	"testing/synctest"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// syncUpstream answers every call before Send returns, as a transport
// does that fails a send at once (never sent, a context already ended).
type syncUpstream struct{ *upstream }

func (u syncUpstream) Send(ctx context.Context, method string, params json.RawMessage, done Answered) {
	n := int(u.calls.Add(1))
	done.Answered(u.respond(ctx, n, params))
}

// TestAnswerDuringTheSend: an execution whose answers come before
// Upstream.Send returns runs on, on the caller's goroutine for the first
// attempt and on the backoff's for the next, and settles once.
func TestAnswerDuringTheSend(t *testing.T) {
	for _, unrecorded := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(busyThen(2))
			h.pol.Retry = retryRule(true)
			req, a := h.request(t, chargeCall)
			req.Upstream = syncUpstream{h.up}
			if unrecorded {
				h.in.Unrecorded(t.Context(), req)
			} else {
				h.in.Handle(t.Context(), req)
			}
			v := view(t, a.only(t))
			if v.IsError || v.Content[0].Text != "charge #3" {
				t.Fatalf("unrecorded %v: the caller got %+v; want the third attempt's success", unrecorded, v)
			}
			if err := h.in.Wait(t.Context()); err != nil {
				t.Fatal(err)
			}
			if h.up.calls.Load() != 3 {
				t.Fatalf("unrecorded %v: the upstream saw %d calls; want 3", unrecorded, h.up.calls.Load())
			}
			if unrecorded {
				return
			}
			if rec := h.onlyRecord(t); rec.Attempts != 3 || rec.State != record.Delivered {
				t.Fatalf("record: %d attempts, %s; want 3, delivered", rec.Attempts, rec.State)
			}
		})
	}
}
