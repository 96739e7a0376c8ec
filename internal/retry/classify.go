package retry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// A Class is what to do about one failed attempt.
//
// The zero value is Fail, so a Class nobody set is terminal: DESIGN.md
// section 7 says unknown errors are terminal.
type Class int

// The classes of failure.
const (
	// Fail ends the call with this failure. It is the default for
	// anything Classify does not recognise.
	Fail Class = iota
	// Retry may try again after a wait, if the attempt is safe to resend
	// (SafeToResend) and the budgets allow.
	Retry
	// Bug points at a broken upstream or a broken proxy: it is not
	// retried, the proxy logs it at error level, and the caller is told
	// what went wrong (for an answer that came malformed, that the
	// outcome is unknown).
	Bug
)

func (c Class) String() string {
	switch c {
	case Fail:
		return "fail"
	case Retry:
		return "retry"
	case Bug:
		return "bug"
	}
	return fmt.Sprintf("Class(%d)", int(c))
}

// A Failure describes one failed attempt: whatever the transport and the
// result checks saw. Set the fields that apply and leave the others zero;
// Classify looks at them in a fixed order (see there).
type Failure struct {
	// Err is the transport's error, if any: a NotSentError when the
	// request never left, the context's error when the caller gave up.
	Err error
	// HTTPStatus is the status of an HTTP upstream's answer, or 0 when
	// there was none (stdio, or no answer at all). A 2xx status is not a
	// failure in itself.
	HTTPStatus int
	// RPCCode is the code of the JSON-RPC error the upstream answered
	// with, or 0 when it answered with none. JSON-RPC reserves no meaning
	// for 0 and MCP servers do not use it, so 0 can stand for "none".
	RPCCode int
	// Transient is set when the tool result matched one of the policy's
	// transient patterns: the tool itself said "try again later".
	Transient bool
	// Malformed is set when the upstream's answer could not be read as
	// the response it should be: not JSON-RPC, or a result of the wrong
	// shape.
	Malformed bool
}

// Classify maps one failed attempt to a Class. The first rule that applies
// decides:
//
//  1. The caller cancelled or ran out of time (context.Canceled,
//     context.DeadlineExceeded anywhere in Err's chain): Fail. Nobody is
//     left to retry for, even if the request never left.
//  2. Err is a NotSentError: Retry. Nothing can have run upstream.
//  3. A non-2xx HTTPStatus: Retry for 429, 502, 503 and 504 (the upstream
//     or a gateway in front of it is overloaded or restarting), Fail for
//     anything else (400, 401, 403, 404, 422, 501 and the statuses nobody
//     listed). The status decides before the body is looked at: the HTML
//     page a load balancer sends with its 503 is not JSON-RPC, and not a
//     bug either.
//  4. Malformed: Bug.
//  5. A JSON-RPC error (RPCCode != 0): Fail. Invalid params (-32602) and
//     method not found (-32601) will fail the same way again, and no
//     other code says the request is worth repeating; a tool that is
//     merely busy says so in its result, which the policy can mark
//     transient.
//  6. Transient: Retry.
//  7. Anything else: Fail.
func Classify(f Failure) Class {
	switch {
	case errors.Is(f.Err, context.Canceled), errors.Is(f.Err, context.DeadlineExceeded):
		return Fail
	case IsNotSent(f.Err):
		return Retry
	case f.HTTPStatus != 0 && f.HTTPStatus/100 != 2:
		if retryableStatus(f.HTTPStatus) {
			return Retry
		}
		return Fail
	case f.Malformed:
		return Bug
	case f.RPCCode != 0:
		return Fail
	case f.Transient:
		return Retry
	}
	return Fail
}

// retryableStatus reports whether an HTTP status says the upstream did not
// act and may later: it is throttling (429) or a gateway could not reach it
// (502, 503, 504).
func retryableStatus(status int) bool {
	switch status {
	case http.StatusTooManyRequests, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}
