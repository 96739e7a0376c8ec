package intercept

import (
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// A ShadowApprovalObserver is told, in shadow mode (Options.Shadow), of
// each new execution that normal mode would have held for a person's
// approval: outcome is asked, if approver (client, operator) would have
// been asked, or refused, if the client's user could not have been.
type ShadowApprovalObserver interface {
	ShadowApproval(tool Tool, approver policy.Approver, outcome string)
}

// A canAsker tells whether its caller's user could be asked (as
// Asker.CanAsk), without asking: shadow mode's Replier, which asks
// nobody, tells so what normal mode would have done.
type canAsker interface{ CanAsk() bool }

// shadowApproval reports, in shadow mode, what normal mode would have
// done about the approval of rec, req's new execution: it logs it,
// counts it, and returns the note its accepted journal line carries; ""
// if the tool needs no approval, or not in shadow mode. Shadow mode
// keeps no grants, since nobody approves: under approval: session, each
// new execution is reported, as the first of its session would be.
func (in *Interceptor) shadowApproval(req *Request, rec *record.Record) string {
	// Small enough to be inlined: most proxies are not in shadow mode.
	if !in.shadow {
		return ""
	}
	return in.shadowApprovalNote(req, rec)
}

// shadowApprovalNote is shadowApproval in shadow mode.
func (in *Interceptor) shadowApprovalNote(req *Request, rec *record.Record) string {
	pol := req.Policy
	if !pol.NeedsApproval() {
		return ""
	}
	approver, outcome, note := policy.ApproverClient, "asked", ""
	switch {
	case pol.Approver == policy.ApproverOperator:
		approver = policy.ApproverOperator
		note = "would have waited for an operator's approval before it was sent"
		if _, ok := in.store.(record.Decider); !ok {
			// Normal mode refuses to start on such a store (the CLI's
			// checkApprovals): asked is what it does once it can.
			note += ", on a durable store: normal mode does not start with an operator's approval on this one"
		}
	case req.Call.Elicits:
		note = "would have asked the client's user for approval before it was sent"
	default:
		if a, ok := req.Reply.(canAsker); ok && a.CanAsk() {
			note = "would have asked the client's user for approval before it was sent"
		} else {
			outcome = "refused"
			note = "would have been refused, unsent: it needs the client's user's approval, and the client could not be asked (no elicitation capability, or a stateless HTTP session)"
		}
	}
	note = "shadow mode (approval: " + string(pol.Approval) + "): " + note
	if pol.Approval == policy.ApprovalSession && outcome == "asked" {
		note += "; once one is approved, normal mode asks no more in the session, and shadow mode, which keeps no approvals, reports each"
	}
	msg := "would have asked for approval"
	if outcome == "refused" {
		msg = "would have refused: its approval could not be asked"
	}
	in.log.Info(msg, "execution", rec.ID, "tool", rec.Tool, "approver", approver, "request", req.Correlation)
	if so, ok := in.obs.(shadowObserver); ok {
		if ao, ok := so.Observer.(ShadowApprovalObserver); ok {
			ao.ShadowApproval(Tool{Name: req.Call.Name, Listed: req.Listed}, approver, outcome)
		}
	}
	return note
}
