package intercept

import (
	"context"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// A store that went away after a call was reserved cannot match a retry
// of it to its execution, nor reserve the retry: the retry would be told
// the call was not executed, though it ran, or runs or may run a moment
// later, in this very process, which holds its outcome or will. A model told so may do the
// action another way. This process matches the retry itself, as the
// store would have: to its execution under way (sentCalls), or to one
// whose outcome it keeps trying to record (recordLater). The retry
// attaches to it, and gets its outcome once the store takes it, or is
// told it is still in progress at the end of its wait.

// ownExecution returns a copy of the execution of fresh's call (same key
// and fingerprint) that this process sent and holds: under way, or ended
// with an outcome the store has not taken yet. Nil if there is none.
//
// An execution under way is joined whatever the tool's policy, as the
// store joins one: sent, or reserved and waiting for its account, which
// may send it a moment later (unsent). One with a kept outcome is not under way, though it
// is still among sentCalls while it ends: its caller is told first. An outcome is, as the store would replay it, only when
// it is a completion and replace (the reservation's Replace) takes no
// settled record: a failure runs again, and a tool whose policy runs a
// delivered call again (idempotent, or replay: undelivered) would run
// this one again, if its first caller got the answer, which this process
// does not keep count of.
func (in *Interceptor) ownExecution(fresh *record.Record, replace []record.State) *record.Record {
	if r := in.sent.of(fresh.Key, fresh.Fingerprint); r != nil && in.own.keptFor(r.ID) == nil {
		return r
	}
	if r := in.unsent.of(fresh.Key, fresh.Fingerprint); r != nil {
		return r
	}
	if k := in.own.keptForCall(fresh.Key, fresh.Fingerprint); k != nil && k.c.To == record.Completed && len(replace) == 0 {
		return k.sent.Clone()
	}
	return nil
}

// attachOwn attaches req, whose reservation the store refused (err), to
// own, this process's execution of the same call.
func (in *Interceptor) attachOwn(ctx context.Context, req *Request, own *record.Record, err error) {
	in.log.Warn("the store refused the reservation of a call this process runs or ran; attached to its execution",
		"execution", own.ID, "tool", own.Tool, "request", req.Correlation, "err", err)
	in.decided(req, own.Tool, "attached")
	req.joined, req.joinedHow = own.ID, joinedWaited
	in.goAttach(ctx, own, req)
}
