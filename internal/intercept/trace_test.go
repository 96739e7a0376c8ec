package intercept

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
)

// traced gives h an interceptor that traces into the returned recorder,
// and returns the function that makes a call under a span of its own,
// as the session does, and returns that span once the call is answered.
func traced(h *harness, asking *asker) (*tracetest.SpanRecorder, func(t *testing.T) sdktrace.ReadOnlySpan) {
	rec := tracetest.NewSpanRecorder()
	tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")
	h.in = New(Options{Store: h.store, Hasher: fingerprint.NewRandom(), Tracer: tracer})
	return rec, func(t *testing.T) sdktrace.ReadOnlySpan {
		t.Helper()
		ctx, span := tracer.Start(context.Background(), "call")
		req, a := h.request(t, chargeCall)
		if asking != nil {
			asking.answers = a
			req.Reply, req.Origin.Session = asking, "session:1"
		}
		h.in.Handle(ctx, req)
		a.only(t)
		span.End()
		return span.(sdktrace.ReadOnlySpan)
	}
}

func spanAttr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// TestReplayedCallsNameTheirAttempts: a call answered from the record
// sends nothing, and its span still says how many sends the execution
// took, as its first call's does.
func TestReplayedCallsNameTheirAttempts(t *testing.T) {
	h := newHarness(charged)
	_, call := traced(h, nil)
	first, replay := call(t), call(t)
	if d := spanAttr(replay, "mcp_idempotent.decision"); d != "replayed" {
		t.Fatalf("the second call's decision is %q; want replayed", d)
	}
	for name, s := range map[string]sdktrace.ReadOnlySpan{"first": first, "replayed": replay} {
		if got := spanAttr(s, "mcp_idempotent.attempts"); got != "1" {
			t.Errorf("the %s call's span has mcp_idempotent.attempts %q; want 1", name, got)
		}
	}
}

// TestClientApprovalIsASpan: asking the client's user is a child span of
// the call's, elicitation/create, that says what came of it.
func TestClientApprovalIsASpan(t *testing.T) {
	for _, tt := range []struct {
		name   string
		answer func(context.Context, json.RawMessage) (json.RawMessage, error)
		want   string
	}{
		{"accepted", elicited("accept", ""), "approved"},
		{"declined", elicited("decline", ""), "refused"},
		{"unanswered", func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}, "timeout"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := approving(policy.ApprovalEach, policy.ApproverClient)
			h.pol.ApprovalTimeout = 10 * time.Millisecond
			rec, call := traced(h, newAsker(tt.answer))
			parent := call(t)
			var asks []sdktrace.ReadOnlySpan
			for _, s := range rec.Ended() {
				if s.Name() == "elicitation/create" {
					asks = append(asks, s)
				}
			}
			if len(asks) != 1 {
				t.Fatalf("%d elicitation/create spans; want 1", len(asks))
			}
			ask := asks[0]
			if ask.Parent().SpanID() != parent.SpanContext().SpanID() {
				t.Errorf("the ask's span is under %v; want the call's", ask.Parent().SpanID())
			}
			if got := spanAttr(ask, "mcp_idempotent.approval"); got != tt.want {
				t.Errorf("mcp_idempotent.approval %q; want %q", got, tt.want)
			}
			if got := spanAttr(ask, "mcp_idempotent.approver"); got != "client" {
				t.Errorf("mcp_idempotent.approver %q; want client", got)
			}
		})
	}
}
