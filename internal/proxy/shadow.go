package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"

	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

// A shadowCall is a tools/call in shadow mode (intercept.Options.Shadow):
// it went upstream as the client sent it, and the interceptor judges it
// as if it were the proxy's to run. Whatever the interceptor answers goes
// nowhere; if it would have run the call, the answer the call got is the
// outcome it records.
type shadowCall struct {
	call mcp.ToolCall
	pol  policy.Policy // its retry rule sends nothing more (shadowRetry)
	req  intercept.Request

	mu     sync.Mutex
	got    bool               // the call's outcome came
	result json.RawMessage    // the outcome: the result
	err    error              // or the error
	done   intercept.Answered // the interceptor's, once it "sent" the call
}

// shadowToolCall passes c upstream as it came, and has the interceptor
// judge it.
func (s *Session) shadowToolCall(c *clientCall, info toolInfo) {
	sc := &shadowCall{call: c.call, pol: *info.policy}
	sc.pol.Retry = shadowRetry(sc.pol.Retry)
	sc.req = intercept.Request{
		Call:           &sc.call,
		Policy:         &sc.pol,
		SchemaDefaults: info.defaults,
		Actor:          s.opts.Actor,
		Scope:          s.opts.Scope,
		UpstreamID:     s.opts.UpstreamID,
		UpstreamName:   s.opts.UpstreamName,
		Upstream:       sc,
		Reply:          sc,
		Correlation:    c.key(),
		Session:        s.opts.Scope,
		ID:             c.id(),
		Listed:         info.listed,
	}
	// Judged first: with a store in memory Handle reserves at once, so
	// that the call is on record before its answer can come.
	s.opts.Interceptor.Handle(context.Background(), &sc.req)
	c.mu.Lock()
	c.passThrough = true
	s.forward(&jsonrpc.Message{Raw: s.upstreamFrame(c), ID: c.id(), Method: "tools/call", Params: c.call.Params}, sc)
	c.mu.Unlock()
	c.finish()
}

// shadowRetry returns the retry rule a call in shadow mode is judged
// under: rule's, less what would make the proxy send or wait itself (a
// second attempt, an account's allowance). It still reads the answer as
// the proxy would: a transient one left after the last attempt ends the
// execution failed, to be run again, not a result to replay.
func shadowRetry(rule *policy.RetryRule) *policy.RetryRule {
	if rule == nil {
		return nil
	}
	judged := *rule
	judged.MaxAttempts = 1
	judged.Account = ""
	return &judged
}

// Send implements intercept.Upstream: the call went upstream already, as
// the client sent it, and done gets the answer it got.
func (sc *shadowCall) Send(_ context.Context, _ string, _ json.RawMessage, done intercept.Answered) {
	sc.mu.Lock()
	if sc.done != nil {
		sc.mu.Unlock()
		done.Answered(nil, retry.NotSent(errors.New("shadow mode: the call went upstream once, as the client sent it")))
		return
	}
	if sc.got {
		sc.mu.Unlock()
		done.Answered(sc.result, sc.err)
		return
	}
	sc.done = done
	sc.mu.Unlock()
}

// Reply implements intercept.Replier: the client got the upstream's own
// answer, passed through.
func (sc *shadowCall) Reply(intercept.Answer) error { return nil }

// answered takes the outcome of the call as it passed through.
func (sc *shadowCall) answered(result json.RawMessage, err error) {
	sc.mu.Lock()
	if sc.got {
		sc.mu.Unlock()
		return
	}
	sc.got, sc.result, sc.err = true, result, err
	done := sc.done
	sc.mu.Unlock()
	if done != nil {
		done.Answered(result, err)
	}
}

// answeredFrame takes the upstream's answer frame to the call: its own
// copy, since the frame's buffer is the reader's.
func (sc *shadowCall) answeredFrame(frame []byte) {
	var msg jsonrpc.Message
	if err := jsonrpc.DecodeInto(&msg, bytes.Clone(frame)); err != nil {
		sc.answered(nil, retry.Malformed("an answer to tools/call that cannot be read", frame))
		return
	}
	sc.answered(outcomeOf("tools/call", &msg))
}

// errShadowCancelled is the outcome of a call in shadow mode that the
// client cancelled: what the upstream then did is not observed.
var errShadowCancelled = errors.New("the client cancelled the call as it passed through; its outcome was not observed")

// notSent tells sc, if any, that the call was not sent.
func (sc *shadowCall) notSent(why error) {
	if sc != nil {
		sc.answered(nil, retry.NotSent(why))
	}
}
