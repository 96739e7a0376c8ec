package retry

import "net/http"

// Safety is what SafeToResend needs to know about an attempt that
// Classify said to Retry: where the request got to, and what the tool's
// replay contract allows.
type Safety struct {
	// ToolClass is the tool's class as the policy spells it: "read_only",
	// "idempotent" or "side_effect". Anything else, the empty string
	// included, counts as "side_effect", which is the MCP default for a
	// tool without annotations.
	//
	// (It is not called Class: in this package a Class is a failure's.)
	ToolClass string
	// Sent is set when the request may have left the proxy: any failure
	// but a NotSentError.
	Sent bool
	// TransientSafe is set when the attempt's result matched a transient
	// pattern that the policy declares safe_to_resend: the vendor says it
	// did nothing (a 429 in a tool result, say).
	TransientSafe bool
	// OnUnknownRetry is set when the policy says on_unknown: retry: the
	// same execution id is forwarded, and the upstream is trusted to
	// deduplicate on it.
	OnUnknownRetry bool
}

// SafeToResend reports whether the request may be sent again. A request
// that never left may always be; one that may have left only when running
// it twice does no harm (read_only, idempotent), when the vendor said it did
// nothing (TransientSafe), or when the upstream dedupes on the forwarded key
// (OnUnknownRetry). A side effect whose outcome is unknown is never resent:
// that is the duplicate this proxy exists to prevent.
func SafeToResend(s Safety) bool {
	if !s.Sent {
		return true
	}
	switch s.ToolClass {
	case "read_only", "idempotent":
		return true
	}
	return s.TransientSafe || s.OnUnknownRetry
}

// StatusNotRun reports whether an HTTP status proves that the request did
// not run, so that even a side effect may be sent again.
//
// Only 429 does: a rate limiter, in the server or in a gateway before it,
// refuses the request before anything handles it (RFC 6585 section 4).
// The other statuses Classify retries prove nothing. A 502 or a 504 is a
// gateway saying the server's answer went missing, which may be after the
// server ran the request. A 503 usually means the server was not ready,
// but gateways send it too for a connection to the server that broke
// after the request went up (Envoy's "upstream connect error or
// disconnect/reset before headers"), so it cannot tell "never ran" from
// "ran, answer lost" either.
func StatusNotRun(status int) bool {
	return status == http.StatusTooManyRequests
}

// StatusMayHaveRun reports whether an HTTP status can come after the
// server received the request and ran it, its answer lost: a 5xx (the
// server failed mid-call, or a gateway gave up waiting for it: 502, 503
// and 504 for the reasons given at StatusNotRun, and the like of
// Cloudflare's 522 and 524), but 501 and 505, which refuse the request
// itself; and 408, a timeout that may have cut the request off mid-run.
// An execution that ends on one of them has an unknown outcome, not a
// failed one: a failed execution's call runs again when it is sent again,
// which could repeat a side effect that happened.
func StatusMayHaveRun(status int) bool {
	switch {
	case status == http.StatusRequestTimeout:
		return true
	case status == http.StatusNotImplemented, status == http.StatusHTTPVersionNotSupported:
		return false
	}
	return status >= 500 && status <= 599
}
