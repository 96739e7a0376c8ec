// Package retry says which failures are safe to retry, how long to wait
// before the next attempt, and how much an upstream account can take
// (DESIGN.md section 7, issue 5).
//
// A failure is only safe to retry when the request is known never to have
// left; any other failure must be assumed to have reached the upstream,
// and is resent only where the tool's replay contract says so
// (SafeToResend).
//
// The parts, in the order a retry loop uses them:
//
//   - Classify maps one failed attempt to Retry, Fail or Bug.
//   - SafeToResend says whether a retry after dispatch may happen at all;
//     StatusNotRun, whether an HTTP status proves nothing ran.
//   - Backoff.Next gives the full-jitter wait, floored by Retry-After
//     (ParseRetryAfter), or refuses when attempts or the deadline run out.
//   - Bucket is the account's allowance: every attempt takes from it.
//     Allowance.TakeAt is the same arithmetic for a store that shares the
//     allowance across processes.
//   - RetryBudget stops retries, not first attempts, when the account is
//     failing.
//
// The package is a leaf: it imports no other package of this module, and
// it reads no clock and no global randomness of its own except where a nil
// option asks for the default. Times are passed in, so tests never sleep.
package retry

import (
	"errors"
	"fmt"
)

// NotSentError wraps a failure that happened before any byte of the
// request left the proxy: nothing can have run upstream.
type NotSentError struct {
	Err error
}

func (e *NotSentError) Error() string { return "not sent: " + e.Err.Error() }

func (e *NotSentError) Unwrap() error { return e.Err }

// NotSent wraps err as a NotSentError.
func NotSent(err error) error { return &NotSentError{Err: err} }

// IsNotSent reports whether err says the request never left.
func IsNotSent(err error) bool {
	var ns *NotSentError
	return errors.As(err, &ns)
}

// A MalformedError is an answer from the upstream that is not what the
// protocol allows, such as a response with neither result nor error, or a
// tool result that is not an object. It is a bug, not a transient
// failure: it is not retried, and the proxy says so loudly. The server
// received the call and may have run it, so the call's outcome is
// unknown.
type MalformedError struct {
	What string // what was wrong
	Size int    // the size of the answer, in bytes
	Head string // its first bytes, for the log
}

func (e *MalformedError) Error() string {
	return fmt.Sprintf("malformed answer from the upstream: %s (%d bytes, starting %q)", e.What, e.Size, e.Head)
}

// Summary is e without its first bytes, which may quote the tool's
// result: what a record, the journal or a trace may keep of it.
func (e *MalformedError) Summary() string {
	return fmt.Sprintf("malformed answer from the upstream: %s (%d bytes)", e.What, e.Size)
}

// Malformed returns a MalformedError for raw, keeping its first 64 bytes.
func Malformed(what string, raw []byte) error {
	head := raw
	if len(head) > 64 {
		head = head[:64]
	}
	return &MalformedError{What: what, Size: len(raw), Head: string(head)}
}
