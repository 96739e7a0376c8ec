package intercept

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
)

// TestUpstreamProxysApprovalRound: behind this proxy, another
// mcp-idempotent asks its client's user to approve a call in the call's
// answer (2026-07-28). Its requestState has the form of this proxy's own,
// but this proxy asks nobody about the tool, so it did not mint it: the
// continuation goes upstream, to the proxy that did, and runs the call.
func TestUpstreamProxysApprovalRound(t *testing.T) {
	inner := approving(policy.ApprovalEach, policy.ApproverClient)
	args := `{"card":"4242","amount":100}`
	question := inner.call(t.Context(), t, roundCall(args, nil, "")).only(t)
	round := asRound(t, question)
	outer := newHarness(func(ctx context.Context, _ int, p json.RawMessage) (json.RawMessage, error) {
		if !strings.Contains(string(p), "inputResponses") {
			return question.Result, nil
		}
		// The continuation reaches the inner proxy as it was sent.
		tc, perr := mcp.ParseToolCall(p)
		if perr != nil {
			return nil, perr
		}
		a := newAnswers()
		inner.in.Handle(ctx, &Request{Call: tc, Policy: &inner.pol, Origin: &Origin{Actor: "alice", Scope: "session:1", UpstreamID: "stdio:bank"},
			Upstream: inner.up, Reply: a, Correlation: "inner"})
		select {
		case ans := <-a.got:
			if ans.Error != nil {
				return nil, errors.New(string(ans.Error))
			}
			return ans.Result, nil
		case <-time.After(10 * time.Second):
			return nil, errors.New("the inner proxy gave no answer")
		}
	})
	asRound(t, outer.call(t.Context(), t, roundCall(args, nil, "")).only(t))
	if v := view(t, outer.call(t.Context(), t, roundCall(args, round, "accept")).only(t)); v.Content[0].Text != "charge #1" {
		t.Fatalf("the continuation got %+v; want the call run once approved", v)
	}
	if n := inner.up.calls.Load(); n != 1 {
		t.Fatalf("the inner proxy's upstream ran %d times; want 1", n)
	}
}
