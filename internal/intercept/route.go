package intercept

import (
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
)

// A Route is what becomes of one tools/call under its tool's policy.
type Route int

const (
	// RoutePassThrough: the call goes upstream as it came, unrecorded: a
	// read-only tool's, or a call without a client key to a tool matched
	// by key only, with no retry rule (and so no account) to apply.
	RoutePassThrough Route = iota
	// RouteUnrecorded: not recorded either, but the proxy sends the call
	// itself (Interceptor.Unrecorded): its sends take from its account,
	// and its transient answers are sent again where that is safe.
	RouteUnrecorded
	// RouteRecorded: the call maps to an execution (Interceptor.Handle).
	RouteRecorded
	// RouteUnapproved: the call needs an approval, which a call that
	// would run unrecorded cannot keep: refused, with the error RouteCall
	// returns. In shadow mode, which asks nobody, it passes through.
	RouteUnapproved
	// RouteUnreadable: the call's client key or deadline cannot be read,
	// its _meta holds the proxy's execution id in another case, or a
	// member of its params is not as MCP allows: refused, with the
	// error RouteCall (or the call's parse) returns. In shadow mode,
	// which keeps no record of it, it passes through unrecorded.
	RouteUnreadable
)

// PassesInShadow reports whether a call refused under r goes upstream as
// it came in shadow mode: a refusal for what only the proxy would have
// done with it, not for params it cannot read as the upstream does.
func (r Route) PassesInShadow() bool {
	return r == RouteUnapproved || r == RouteUnreadable
}

// RouteCall says what becomes of call under pol, or returns the error
// that refuses it. It is the one place that decides: the session that
// received the call only carries the decision out.
func RouteCall(call *mcp.ToolCall, pol *policy.Policy) (Route, *jsonrpc.Error) {
	// A client key that cannot be read refuses the call, but a read-only
	// tool's, whose calls are never matched by key: taken for a call
	// without one, it would go unrecorded to a tool matched by key only.
	if call.KeyErr() != nil && pol.Class != policy.ReadOnly {
		return RouteUnreadable, call.KeyErr()
	}
	unrecorded := pol.Class == policy.ReadOnly || pol.Scope == policy.ScopeKey && call.Key == ""
	switch {
	case unrecorded && pol.NeedsApproval():
		// The policy file refuses this pairing; --scope key makes it.
		return RouteUnapproved, jsonrpc.Errorf(jsonrpc.CodeInvalidParams,
			"mcp-idempotent: %s needs an approval, which is kept in its execution's record, and this call would run unrecorded "+
				"(scope key, and no idempotency key): send one in params._meta[%q]", call.Name, mcp.MetaKey)
	case unrecorded && pol.Retry == nil:
		// Passed upstream as it came, a call keeps no deadline of the
		// proxy's: one that cannot be read does not refuse it.
		return RoutePassThrough, nil
	case call.DeadlineErr() != nil:
		// Anything else the proxy sends itself, within the client's
		// deadline.
		return RouteUnreadable, call.DeadlineErr()
	case unrecorded:
		return RouteUnrecorded, nil
	case call.ExecutionIDErr() != nil:
		// Only a recorded call carries an execution id of the proxy's.
		return RouteUnreadable, call.ExecutionIDErr()
	}
	return RouteRecorded, nil
}
