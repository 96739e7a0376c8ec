package intercept

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
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

// copyingUpstream is a CopyingUpstream: it keeps a copy of the params of
// each request before Send returns, as a transport writing them into a
// frame of its own does.
type copyingUpstream struct {
	*upstream
	mu   sync.Mutex
	sent []json.RawMessage
}

func (u *copyingUpstream) CopiesParams() bool { return true }

func (u *copyingUpstream) Send(ctx context.Context, method string, params json.RawMessage, done Answered) {
	params = bytes.Clone(params)
	u.mu.Lock()
	u.sent = append(u.sent, params)
	u.mu.Unlock()
	u.upstream.Send(ctx, method, params, done)
}

// TestParamsIntoReusedBuffer checks that the params of sends built in the
// buffer a CopyingUpstream lets the interceptor use again each carry
// their own arguments and execution id.
func TestParamsIntoReusedBuffer(t *testing.T) {
	h := newHarness(charged)
	u := &copyingUpstream{upstream: h.up}
	for i := range 3 {
		req, a := h.request(t, fmt.Sprintf(`{"name":"charge_card","arguments":{"card":"4242","amount":%d}}`, i))
		req.Upstream = u
		h.in.Handle(t.Context(), req)
		view(t, a.only(t))
	}
	ids := map[string]bool{}
	for _, r := range h.store.Records() {
		ids[r.ID] = true
	}
	for i, p := range u.sent {
		var v struct {
			Arguments struct{ Amount int } `json:"arguments"`
			Meta      map[string]string    `json:"_meta"`
		}
		if err := json.Unmarshal(p, &v); err != nil || v.Arguments.Amount != i || !ids[v.Meta[mcp.MetaExecutionID]] {
			t.Fatalf("send %d: params %s (%v); want amount %d and the id of one of %v", i, p, err, i, ids)
		}
		delete(ids, v.Meta[mcp.MetaExecutionID])
	}
	if len(u.sent) != 3 {
		t.Fatalf("%d sends; want 3", len(u.sent))
	}
}
