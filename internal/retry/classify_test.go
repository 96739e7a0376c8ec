package retry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
)

// TestClassify has a row for every case issue 5 lists under retry, fail
// and bug, then the unclassified ones and the order of the rules.
func TestClassify(t *testing.T) {
	refused := errors.New("connection refused")
	tests := []struct {
		name string
		f    Failure
		want Class
	}{
		// retry
		{"not sent", Failure{Err: NotSent(refused)}, Retry},
		{"not sent, wrapped", Failure{Err: fmt.Errorf("dispatching: %w", NotSent(refused))}, Retry},
		{"HTTP 429", Failure{HTTPStatus: 429}, Retry},
		{"HTTP 502", Failure{HTTPStatus: 502}, Retry},
		{"HTTP 503", Failure{HTTPStatus: 503}, Retry},
		{"HTTP 504", Failure{HTTPStatus: 504}, Retry},
		{"transient tool result", Failure{Transient: true}, Retry},
		{"transient tool result over HTTP 200", Failure{HTTPStatus: 200, Transient: true}, Retry},

		// fail
		{"HTTP 400", Failure{HTTPStatus: 400}, Fail},
		{"HTTP 401", Failure{HTTPStatus: 401}, Fail},
		{"HTTP 403", Failure{HTTPStatus: 403}, Fail},
		{"HTTP 404", Failure{HTTPStatus: 404}, Fail},
		{"HTTP 422", Failure{HTTPStatus: 422}, Fail},
		{"HTTP 501", Failure{HTTPStatus: 501}, Fail},
		{"JSON-RPC invalid params", Failure{RPCCode: -32602}, Fail},
		{"JSON-RPC method not found", Failure{RPCCode: -32601}, Fail},
		{"caller cancelled", Failure{Err: context.Canceled}, Fail},
		{"caller's deadline passed", Failure{Err: context.DeadlineExceeded}, Fail},
		{"caller cancelled, wrapped", Failure{Err: fmt.Errorf("waiting: %w", context.Canceled)}, Fail},

		// bug
		{"response not JSON-RPC", Failure{Malformed: true}, Bug},
		{"result of the wrong shape", Failure{HTTPStatus: 200, Malformed: true}, Bug},

		// unclassified: fail
		{"nothing known", Failure{}, Fail},
		{"error after sending", Failure{Err: errors.New("connection reset by peer")}, Fail},
		{"HTTP 500", Failure{HTTPStatus: 500}, Fail},
		{"HTTP 408", Failure{HTTPStatus: 408}, Fail},
		{"HTTP 302", Failure{HTTPStatus: 302}, Fail},
		{"JSON-RPC internal error", Failure{RPCCode: -32603}, Fail},
		{"JSON-RPC server-defined error", Failure{RPCCode: -32000}, Fail},

		// the order of the rules
		{"cancelled before sending: nobody to retry for", Failure{Err: NotSent(context.Canceled)}, Fail},
		{"cancelled beats a retryable status", Failure{Err: context.Canceled, HTTPStatus: 503}, Fail},
		{"a 503 page is not a bug", Failure{HTTPStatus: 503, Malformed: true}, Retry},
		{"a 400 page is not a bug", Failure{HTTPStatus: 400, Malformed: true}, Fail},
		{"malformed beats transient", Failure{Malformed: true, Transient: true}, Bug},
		{"a JSON-RPC error is not transient", Failure{RPCCode: -32602, Transient: true}, Fail},
		{"a terminal status beats transient", Failure{HTTPStatus: 401, Transient: true}, Fail},
	}
	for _, tt := range tests {
		if got := Classify(tt.f); got != tt.want {
			t.Errorf("%s: Classify(%+v) = %v, want %v", tt.name, tt.f, got, tt.want)
		}
	}
}

func TestClassString(t *testing.T) {
	for c, want := range map[Class]string{Fail: "fail", Retry: "retry", Bug: "bug", Class(7): "Class(7)"} {
		if got := c.String(); got != want {
			t.Errorf("Class(%d).String() = %q, want %q", int(c), got, want)
		}
	}
	var zero Class
	if zero != Fail {
		t.Errorf("the zero Class is %v, want fail: an unset class must be terminal", zero)
	}
}

// TestSafeToResend checks which attempts may go again after dispatch.
func TestSafeToResend(t *testing.T) {
	tests := []struct {
		name string
		s    Safety
		want bool
	}{
		{"side effect, not sent", Safety{ToolClass: "side_effect"}, true},
		{"unannotated, not sent", Safety{}, true},
		{"read only, sent", Safety{ToolClass: "read_only", Sent: true}, true},
		{"idempotent, sent", Safety{ToolClass: "idempotent", Sent: true}, true},
		{"side effect, sent and timed out", Safety{ToolClass: "side_effect", Sent: true}, false},
		{"unannotated, sent", Safety{Sent: true}, false},
		{"unknown class counts as a side effect", Safety{ToolClass: "Read_Only", Sent: true}, false},
		{"side effect, vendor said it did nothing", Safety{ToolClass: "side_effect", Sent: true, TransientSafe: true}, true},
		{"side effect, upstream dedupes on the key", Safety{ToolClass: "side_effect", Sent: true, OnUnknownRetry: true}, true},
	}
	for _, tt := range tests {
		if got := SafeToResend(tt.s); got != tt.want {
			t.Errorf("%s: SafeToResend(%+v) = %v, want %v", tt.name, tt.s, got, tt.want)
		}
	}
}

func TestStatusNotRun(t *testing.T) {
	for status, want := range map[int]bool{
		http.StatusTooManyRequests:     true,
		http.StatusBadGateway:          false,
		http.StatusServiceUnavailable:  false,
		http.StatusGatewayTimeout:      false,
		http.StatusBadRequest:          false,
		http.StatusInternalServerError: false,
		0:                              false,
	} {
		if got := StatusNotRun(status); got != want {
			t.Errorf("StatusNotRun(%d) = %v; want %v", status, got, want)
		}
	}
}
