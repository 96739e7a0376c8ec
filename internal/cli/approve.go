package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// decide approves or denies (a.verb) an execution that awaits an
// operator's approval, prints it, and appends the decision to a.journal,
// if given, as resolve does. The proxy that holds the execution wakes
// and sends it, or answers its callers with the refusal.
func (a *activityArgs) decide(ctx context.Context, store record.Store, stdout io.Writer) error {
	to := record.Authorized
	if a.verb == "deny" {
		to = record.Refused
	}
	return a.operatorChange(ctx, stdout, "decided", func() (*record.Record, error) {
		return decideExecution(ctx, store, a.pos[0], to, osUser(), a.note)
	})
}

// decideExecution moves execution id, which must await an operator, to
// to (authorized or refused), as by decided, with note.
func decideExecution(ctx context.Context, store record.Store, id string, to record.State, by, note string) (*record.Record, error) {
	cur, err := store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := awaitsOperator(cur); err != nil {
		return nil, err
	}
	// Only from accepted: the proxy's timeout may refuse it meanwhile,
	// and the first decision stands.
	r, err := store.Update(ctx, id, record.Change{To: to, From: record.Accepted, By: by, Via: record.ApproverOperator, Note: note})
	if errors.Is(err, record.ErrConflict) {
		if now, gerr := store.Get(ctx, id); gerr == nil {
			return nil, fmt.Errorf("execution %s was decided meanwhile: %w", id, awaitsOperator(now))
		}
		return nil, fmt.Errorf("execution %s changed while it was being decided: %w", id, err)
	}
	return r, err
}

// awaitsOperator returns nil if r awaits an operator's approval, or an
// error that says what it is instead.
func awaitsOperator(r *record.Record) error {
	switch {
	case r.State == record.Accepted && r.Awaiting == record.ApproverOperator && r.Orphaned(time.Now()):
		// No process would send it: the next call of it settles it, and
		// is asked again.
		return fmt.Errorf("execution %s awaits an operator, but its proxy went away (its lease lapsed at %s): nothing would send it; the next call of it asks again",
			r.ID, stamp(r.LeaseUntil))
	case r.State == record.Accepted && r.Awaiting == record.ApproverOperator:
		return nil
	case r.State == record.Accepted && r.Awaiting == record.ApproverClient:
		return fmt.Errorf("execution %s awaits the approval of its client's user, not an operator's", r.ID)
	case r.State == record.Accepted:
		return fmt.Errorf("execution %s awaits no approval", r.ID)
	}
	for i := len(r.History) - 1; i >= 0; i-- {
		if t := r.History[i]; t.State == record.Authorized || t.State == record.Refused {
			return fmt.Errorf("execution %s was already %s by %s through %s at %s; it is %s now",
				r.ID, t.State, orNone(t.By), t.Via, stamp(t.At), r.State)
		}
	}
	return fmt.Errorf("execution %s is %s; only an execution that awaits an operator's approval is approved or denied", r.ID, r.State)
}

// orNone is s, or "no one" when it is empty: a decision no person made,
// such as a timeout.
func orNone(s string) string {
	if s == "" {
		return "no one"
	}
	return s
}
