package intercept

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

// A resend is again's decision on one attempt's answer.
type resend struct {
	ok   bool          // send again
	wait time.Duration // after this wait
	why  string        // why it is sent again, for the log and the record
	// stop, when not ok, is why an answer that could have been retried
	// was not, where the caller should be told (a deadline); "" when the
	// answer is simply final.
	stop string
}

// again decides whether attempt n's answer is sent again, and after how
// long: only under a retry rule, only for a failure the retry package
// classes as retry (never sent, an HTTP status of an overloaded or
// restarting upstream, or a result the rule marks transient), only where
// sending again is safe, within the rule's attempts, and only if the wait
// ends before the call's deadline.
func (in *Interceptor) again(req *Request, n int, result json.RawMessage, err error) resend {
	rule := req.Policy.Retry
	if rule == nil {
		return resend{}
	}
	acct := in.accountOf(req)
	var (
		why        string
		retryAfter time.Duration
	)
	switch f, retryAfterText := failure(err); {
	case err == nil:
		match, ok := transient(result, rule)
		if !ok {
			if acct != nil {
				acct.budget.OnSuccess()
			}
			return resend{}
		}
		if acct != nil {
			acct.budget.OnFailure()
		}
		if !safeToResend(req.Policy, match) {
			return resend{}
		}
		why = "transient result"
		if rule.RetryAfterPath != "" {
			if secs, ok := structuredNumber(result, rule.RetryAfterPath); ok && secs > 0 {
				retryAfter = retry.Seconds(secs)
			}
		}
	case retry.Classify(f) != retry.Retry:
		return resend{}
	case f.HTTPStatus != 0:
		// The account is throttling or unreachable: as gRPC counts only
		// retryable statuses against its budget, so does this.
		if acct != nil {
			acct.budget.OnFailure()
		}
		// The status got to the proxy, so the request may have reached
		// the tool: it is sent again only where that is safe, or where the
		// status proves nothing ran (429; see retry.StatusNotRun).
		if !retry.SafeToResend(retry.Safety{
			ToolClass: string(req.Policy.Class),
			Sent:      !retry.StatusNotRun(f.HTTPStatus),
			// The upstream dedupes on the execution id sent: there is one
			// only for a recorded call whose policy forwards it.
			OnUnknownRetry: req.Policy.OnUnknown == policy.Retry && req.Policy.ForwardKey && !req.unrecorded,
		}) {
			return resend{}
		}
		why = fmt.Sprintf("HTTP %d", f.HTTPStatus)
		if d, ok := retry.ParseRetryAfter(retryAfterText, in.now()); ok {
			retryAfter = d
		}
	default:
		// The request never left (Classify): its error says so itself.
		why = err.Error()
		if ns, ok := errors.AsType[*retry.NotSentError](err); ok {
			why = ns.Error()
		}
	}
	now := in.now()
	b := retry.Backoff{Base: rule.Base, Cap: rule.Cap, MaxAttempts: rule.MaxAttempts}
	wait, ok := b.Next(n-1, retryAfter, now, time.Time{})
	if !ok {
		return resend{}
	}
	// A wait that would pass the caller's deadline fails now instead
	// (DESIGN section 7): the caller gets the last real answer at once,
	// not a timeout later. A wait ending exactly at the deadline would
	// leave the attempt no time, so it is refused too.
	if d := in.deadlineOf(req); !d.IsZero() && !now.Add(wait).Before(d) {
		left := d.Sub(now).Round(time.Millisecond)
		if left <= 0 {
			return resend{stop: fmt.Sprintf("not retried: the call's deadline has passed, so attempt %d (%s) was not begun", n+1, why)}
		}
		return resend{stop: fmt.Sprintf(
			"not retried: waiting %v for attempt %d (%s) would pass the call's deadline, %v from now",
			wait.Round(time.Millisecond), n+1, why, left)}
	}
	return resend{ok: true, wait: wait, why: why}
}

// failure reads an attempt's error as the retry classifier sees it, and
// returns the Retry-After value an HTTP upstream sent with it, if any.
//
// The status is the one the proxy's own transport got instead of an
// answer (a *jsonrpc.NoAnswer), or one an upstream reports in a JSON-RPC
// internal error (-32603) whose data holds "http_status" and
// "retry_after", as a proxy in front of an HTTP server answers (this one
// included): the upstream's word about its own vendor, which a retry rule
// may act on. A server's own error of another code is the server refusing
// the request, whatever its data says. Nothing in an upstream's error can
// say that the request was not sent.
func failure(err error) (retry.Failure, string) {
	f := retry.Failure{Err: err}
	if na, ok := errors.AsType[*jsonrpc.NoAnswer](err); ok && na.Refused() {
		f.HTTPStatus, f.RPCCode = na.Status, jsonrpc.CodeInternalError
		return f, na.RetryAfter
	}
	rpcErr, ok := errors.AsType[*jsonrpc.Error](err)
	if !ok {
		return f, ""
	}
	f.RPCCode = rpcErr.Code
	if rpcErr.Code != jsonrpc.CodeInternalError || len(rpcErr.Data) == 0 || rpcErr.Data[0] != '{' {
		return f, ""
	}
	var data struct {
		HTTPStatus int    `json:"http_status"`
		RetryAfter string `json:"retry_after"`
	}
	if json.Unmarshal(rpcErr.Data, &data) != nil {
		return f, ""
	}
	f.HTTPStatus = data.HTTPStatus
	return f, data.RetryAfter
}

// withNote adds the proxy's note to an attempt's answer, which is still
// the caller's answer: a text item added to a tool result, the note added
// to a JSON-RPC error's message or to another error's text.
func withNote(result json.RawMessage, err error, note string) (json.RawMessage, error) {
	note = "mcp-idempotent: " + note + "."
	if err == nil {
		return mcp.WithText(result, note), nil
	}
	if rpcErr, ok := rpcError(err); ok {
		e := *rpcErr
		e.Message += " (" + note + ")"
		e.Raw = nil // changed: no longer the object as it came
		return result, &e
	}
	return result, fmt.Errorf("%w (%s)", err, note)
}

// rpcError returns the JSON-RPC error an attempt's error stands for in the
// caller's answer: the upstream's own error, or the one that stands for an
// HTTP status the transport got instead of the answer. A request that was
// not sent, or got no answer at all, has none.
func rpcError(err error) (*jsonrpc.Error, bool) {
	if retry.IsNotSent(err) {
		return nil, false
	}
	if na, ok := errors.AsType[*jsonrpc.NoAnswer](err); ok {
		if na.Refused() {
			return na.Object(), true
		}
		return nil, false
	}
	return errors.AsType[*jsonrpc.Error](err)
}

// mayHaveRun reports whether an attempt that the retry rule sends again,
// having answered result or err, may have run: anything but a request
// not sent, a status that proves nothing ran (429), or a transient
// result the policy says means the upstream did nothing.
func mayHaveRun(result json.RawMessage, err error, rule *policy.RetryRule) bool {
	if err == nil {
		m, ok := transient(result, rule)
		return !ok || !m.SafeToResend
	}
	if retry.IsNotSent(err) {
		return false
	}
	f, _ := failure(err)
	return !retry.StatusNotRun(f.HTTPStatus)
}

// safeToResend reports whether a transient result of this tool may be
// sent again: a read-only or idempotent tool, or a result the policy
// declares means the upstream did nothing.
func safeToResend(p *policy.Policy, m policy.ResultMatch) bool {
	return retry.SafeToResend(retry.Safety{ToolClass: string(p.Class), Sent: true, TransientSafe: m.SafeToResend})
}

// transient returns the rule's first transient match for a tool result.
// Only an error result (isError: true) can be transient: a success whose
// text happens to match ("charged 429 to card 4242") did its work, and
// sending it again would do it again.
func transient(result json.RawMessage, rule *policy.RetryRule) (policy.ResultMatch, bool) {
	if !isError(result) {
		return policy.ResultMatch{}, false
	}
	return firstMatch(result, rule.Transient)
}

// notSent reports whether err says an attempt never left: the upstream
// cannot have run it, nor answered it.
func notSent(err error) bool {
	_, ok := errors.AsType[*retry.NotSentError](err)
	return ok
}
