package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel/trace"

	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
	"github.com/mcp-idempotent/mcp-idempotent/internal/telemetry"
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
	// canAsk is whether the client could have been asked for an
	// approval when the call came: shadow mode asks nobody, but reports
	// what normal mode would have done (CanAsk).
	canAsk bool

	// ctx is the context the interceptor judges the call in: leave ends
	// it when the client cancels the call, as the end of a caller's
	// context detaches it in normal mode.
	ctx   context.Context
	leave context.CancelFunc

	mu        sync.Mutex
	got       bool               // the call's outcome came
	result    json.RawMessage    // the outcome: the result
	err       error              // or the error
	done      intercept.Answered // the interceptor's, once it "sent" the call
	cancelled bool               // the client cancelled the call (keepCancelledLocked)

	// What became of the answer's write to the client: the interceptor
	// records the execution delivered only once it is written (ReplyThen).
	wrote    bool        // told: the write is over, or there is none to wait for
	writeErr error       // why the client did not get the answer
	then     func(error) // the interceptor's, waiting to be told (ReplyThen)
}

// shadowToolCall passes c upstream as it came, and has the interceptor
// judge it.
func (s *Session) shadowToolCall(c *clientCall, info toolInfo) {
	sc := &shadowCall{call: c.call, pol: *info.policy, canAsk: c.CanAsk()}
	sc.ctx, sc.leave = context.WithCancel(s.shadowTrace(c))
	sc.pol.Retry = shadowRetry(sc.pol.Retry)
	sc.req = intercept.Request{
		Call:        &sc.call,
		Policy:      &sc.pol,
		Schema:      info.schema,
		Origin:      &s.origin,
		Upstream:    sc,
		Reply:       sc,
		Correlation: c.req.Correlation,
		ID:          c.req.ID,
		Listed:      info.listed,
	}
	// Judged first: with a store in memory Handle reserves at once, so
	// that the call is on record before its answer can come.
	s.opts.Interceptor.Handle(sc.ctx, &sc.req)
	c.mu.Lock()
	c.passThrough = true
	s.forward(&jsonrpc.Message{Raw: s.upstreamFrame(c), ID: c.id(), Method: "tools/call", Params: c.call.Params}, sc, c.callSpan())
	c.mu.Unlock()
	c.finish()
}

// shadowTrace returns the context c is judged in: when traced, one whose
// parent is c's span, so that the store's spans and the send's join the
// client's trace under it. Only the span's context is passed: the span
// says passed_through, what calls_total counts, and ends with the
// answer c gets, while the judging may go on after that.
func (s *Session) shadowTrace(c *clientCall) context.Context {
	if s.opts.Tracer == nil {
		return context.Background()
	}
	span := trace.SpanFromContext(c.ctx.Context)
	span.SetAttributes(telemetry.Decision.String("passed_through"))
	return trace.ContextWithSpanContext(context.Background(), span.SpanContext())
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

// CanAsk tells the interceptor whether the client could have been asked
// for an approval; nothing asks it.
func (sc *shadowCall) CanAsk() bool { return sc.canAsk }

// Reply implements intercept.Replier: the client got the upstream's own
// answer, passed through.
func (sc *shadowCall) Reply(intercept.Answer) error { return nil }

// DeliversLater implements intercept.DeliveryReplier: whether the client
// got the upstream's answer is known once the client's transport took it
// (writeShadowAnswer).
func (sc *shadowCall) DeliversLater() bool { return true }

// ReplyThen implements intercept.DeliveryReplier: it writes nothing, and
// tells written what became of the upstream's answer, now or once known.
func (sc *shadowCall) ReplyThen(_ intercept.Answer, written func(error)) error {
	sc.mu.Lock()
	if !sc.wrote {
		sc.then = written
		sc.mu.Unlock()
		return nil
	}
	err := sc.writeErr
	sc.mu.Unlock()
	written(err)
	return nil
}

// written takes what became of the write of the call's answer to the
// client: err nil once the transport took it.
func (sc *shadowCall) written(err error) {
	sc.mu.Lock()
	if sc.wrote {
		sc.mu.Unlock()
		return
	}
	sc.wrote, sc.writeErr = true, err
	then := sc.then
	sc.then = nil
	sc.mu.Unlock()
	if then != nil {
		then(err)
	}
}

// writeShadowAnswer writes frame, the upstream's answer to sc's call, to
// the client, and tells sc when the client's transport took it or why it
// did not.
func (s *Session) writeShadowAnswer(frame []byte, sc *shadowCall) {
	if w := s.clientAnswers; w != nil {
		if err := w.WriteAnswer(frame, sc.written); err != nil {
			s.log.Debug("writing to the client", "err", err)
			sc.written(err)
		}
		return
	}
	err := s.client.WriteFrame(frame)
	if err != nil {
		s.log.Debug("writing to the client", "err", err)
	}
	sc.written(err)
}

// answered takes the outcome of the call as it passed through: what the
// client got, if anything, is written already.
func (sc *shadowCall) answered(result json.RawMessage, err error) {
	sc.settle(result, err, true)
}

// settle takes the outcome of the call; wrote says whether its write to
// the client, if any, is over (written is not to be waited for).
func (sc *shadowCall) settle(result json.RawMessage, err error, wrote bool) {
	if wrote {
		// Before the outcome: a reply it leads to is told at once.
		sc.written(nil)
	}
	sc.mu.Lock()
	if sc.got {
		sc.mu.Unlock()
		return
	}
	if sc.cancelled && err != nil && !retry.IsNotSent(err) {
		// Not sent, nothing ran: failed, as in normal mode.
		err = cancelledOutcome(err)
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
	result, err := sc.outcomeOfFrame(frame)
	sc.settle(result, err, true)
}

// answeredFrameFirst is answeredFrame for an answer about to be written
// to the client: the delivery waits for written.
func (sc *shadowCall) answeredFrameFirst(frame []byte) {
	sc.req.ShadowAnswerCame()
	result, err := sc.outcomeOfFrame(frame)
	sc.settle(result, err, false)
}

// outcomeOfFrame returns the outcome frame, the upstream's answer,
// holds.
func (sc *shadowCall) outcomeOfFrame(frame []byte) (json.RawMessage, error) {
	var msg jsonrpc.Message
	if err := jsonrpc.DecodeInto(&msg, bytes.Clone(frame)); err != nil {
		return nil, retry.Malformed("an answer to tools/call that cannot be read", frame)
	}
	return outcomeOf("tools/call", &msg)
}

// keepCancelledLocked takes sc, if not nil, as cancelled by its client,
// and keeps it under key until the upstream answers the request (taken
// by takeCancelledLocked), its id is used again (dropCancelledLocked) or
// the upstream is given up on (abandon); maxCancelledShadows at most.
// Normal mode keeps a caller's cancellation from the upstream and
// records the outcome of the execution all the same, for a retry to
// replay; here the cancellation went upstream as it came, and the answer
// to the cancelled request, if one comes, is the nearest to that outcome
// there is. s.mu must be held.
func (s *Session) keepCancelledLocked(key string, sc *shadowCall) {
	if sc == nil {
		return
	}
	sc.mu.Lock()
	sc.cancelled = true
	sc.mu.Unlock()
	sc.leave() // before the answer can come: it is not delivered
	if len(s.cancelledShadows) >= maxCancelledShadows {
		// An upstream that never answers a cancelled call would keep
		// each in flight, and here, until the session ends.
		go sc.answered(nil, errTooManyCancelled)
		return
	}
	if s.cancelledShadows == nil {
		s.cancelledShadows = make(map[string]*shadowCall)
	}
	s.cancelledShadows[key] = sc
}

// takeCancelledLocked returns the cancelled call kept under key, if
// any, and forgets it. s.mu must be held.
func (s *Session) takeCancelledLocked(key string) *shadowCall {
	sc := s.cancelledShadows[key]
	delete(s.cancelledShadows, key)
	return sc
}

// dropCancelledLocked ends the cancelled call kept under key, if any,
// whose id the client uses again: an answer under it may then be either
// request's, so the cancelled one's outcome is not observed. s.mu must
// be held; the outcome is recorded on a goroutine of its own, since
// recording it must not hold s.mu.
func (s *Session) dropCancelledLocked(key string) {
	if sc := s.takeCancelledLocked(key); sc != nil {
		go sc.answered(nil, errIDUsedAgain)
	}
}

// maxCancelledShadows bounds the cancelled calls a session keeps.
const maxCancelledShadows = 1024

// errTooManyCancelled is the outcome of a cancelled call that found
// maxCancelledShadows kept already.
var errTooManyCancelled = fmt.Errorf("%d cancelled calls already awaited an answer", maxCancelledShadows)

// errIDUsedAgain is the outcome of a cancelled call whose id the client
// used again before the upstream answered it.
var errIDUsedAgain = errors.New("the client used its id again before the upstream answered")

// cancelledOutcome is the outcome of a call the client cancelled that
// ended with err rather than a result. The upstream answered the
// cancellation, which normal mode would not have passed on, or never
// answered: either way the tool's own outcome, which normal mode would
// have waited for, was not observed. Unknown then (no JSON-RPC error
// survives, which would settle it failed), and its note keeps an
// upstream error's code but not its message, as outcome does.
func cancelledOutcome(err error) error {
	if e, ok := errors.AsType[*jsonrpc.Error](err); ok {
		return fmt.Errorf("the client cancelled the call, and the upstream answered it with error %d; the outcome without the cancellation was not observed", e.Code)
	}
	return fmt.Errorf("the client cancelled the call, and %v; the outcome without the cancellation was not observed", err)
}

// unreadableShadow settles the call in shadow mode under key, if any,
// whose answer from the upstream is not JSON: the outcome was not
// observed, as normal mode takes its own request's unreadable answer. The
// frame passes on to the client as it came; the request stays remembered
// (unreadableAnswer).
func (s *Session) unreadableShadow(key string, err error) {
	s.mu.Lock()
	sc := s.forwarded[key].shadow
	if sc == nil {
		sc = s.takeCancelledLocked(key)
	}
	s.mu.Unlock()
	if sc != nil {
		sc.answered(nil, fmt.Errorf("the upstream's answer could not be read: %w", err))
	}
}

// notSent tells sc, if any, that the call was not sent.
func (sc *shadowCall) notSent(why error) {
	if sc != nil {
		sc.answered(nil, retry.NotSent(why))
	}
}
