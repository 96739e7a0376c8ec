// Package retry says which failures are safe to retry. A failure is only
// safe to retry when the request is known never to have left; any other
// failure must be assumed to have reached the upstream.
package retry

import "errors"

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
