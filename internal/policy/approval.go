package policy

import "time"

// Approval says when a person approves a tool's calls before they are
// sent. It decides whether a caller may start an execution, never whether
// a call is one that exists: a retry of an execution approved, refused or
// still awaiting its decision is never asked about again.
type Approval string

// The approval modes.
const (
	// ApprovalNone: calls are sent without asking anyone.
	ApprovalNone Approval = "none"
	// ApprovalEach: every new execution of the tool is approved first.
	ApprovalEach Approval = "each"
	// ApprovalSession: the first execution of the tool in a session is
	// approved, and that approval covers the tool's later executions in
	// the session until it ends.
	ApprovalSession Approval = "session"
)

// An Approver is who is asked.
type Approver string

// The approvers.
const (
	// ApproverClient asks the caller's user, through MCP elicitation.
	ApproverClient Approver = "client"
	// ApproverOperator lets an operator decide from any host that reaches
	// the store (mcp-idempotent activity approve, deny). It needs a store
	// shared across processes.
	ApproverOperator Approver = "operator"
)

// DefaultApprovalTimeout is how long an execution waits for its approval
// before it is refused.
const DefaultApprovalTimeout = 10 * time.Minute

// MinApprovalTimeout bounds approval_timeout from below: a person needs
// that long at least to decide, and a shorter one (1ms written for 1m)
// would refuse every call before anyone could answer.
const MinApprovalTimeout = time.Second

// MaxApprovalTimeout bounds approval_timeout: an execution awaiting its
// approval holds its key, and its caller, that long.
const MaxApprovalTimeout = 7 * 24 * time.Hour

// NeedsApproval reports whether p's executions wait for a person's
// approval before they are sent.
func (p *Policy) NeedsApproval() bool {
	return p.Approval == ApprovalEach || p.Approval == ApprovalSession
}

var (
	approvals = []string{string(ApprovalNone), string(ApprovalEach), string(ApprovalSession)}
	approvers = []string{string(ApproverClient), string(ApproverOperator)}
)
