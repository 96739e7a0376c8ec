package intercept

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

func lastNote(r *record.Record) string {
	for i := len(r.History) - 1; i >= 0; i-- {
		if r.History[i].Note != "" {
			return r.History[i].Note
		}
	}
	return "no reason recorded"
}

// executionMeta is the execution as a client sees it in _meta.
type executionMeta struct {
	ID       string               `json:"id"`
	State    record.State         `json:"state"`
	Tool     string               `json:"tool"`
	Times    map[string]time.Time `json:"times"`
	Attempts int                  `json:"attempts"`
	Attached int                  `json:"attached"`
	Upstream string               `json:"upstream,omitempty"`
}

func describe(r *record.Record) executionMeta {
	m := executionMeta{ID: r.ID, State: r.State, Tool: r.Tool, Times: make(map[string]time.Time, len(r.History)), Attempts: r.Attempts, Attached: r.Attached}
	for _, t := range r.History {
		m.Times[string(t.State)] = t.At
	}
	return m
}

// toolResult builds an isError CallToolResult that speaks for the proxy.
func toolResult(text, outcome string, r *record.Record) json.RawMessage {
	return mcp.TextResult(text, true, map[string]any{mcp.MetaOutcome: outcome, mcp.MetaExecution: describe(r)})
}

// alreadyDoneResult is the success a caller gets when a re-send found the
// effect already in place: what the upstream said is kept in the text.
func alreadyDoneResult(r *record.Record, upstream json.RawMessage) json.RawMessage {
	said := mcp.Texts(upstream)
	return mcp.TextResult(fmt.Sprintf(
		"Done: execution %s of %s had already taken effect; sending it again, the upstream answered: %s",
		r.ID, r.Tool, strings.Join(said, " ")), false, map[string]any{mcp.MetaOutcome: "already_done"})
}

// unknownResult is the answer of an execution whose outcome is unknown.
// After more than one attempt it says so: a caller told of one send
// would look for one effect, where each attempt may have had its own.
func unknownResult(r *record.Record) json.RawMessage {
	last := r.At(record.Dispatched).UTC().Format(time.RFC3339Nano)
	const advice = "Do not retry blindly: check whether it happened first."
	if r.Attempts > 1 {
		return toolResult(fmt.Sprintf(
			"Outcome unknown: execution %s of %s%s was attempted %d times on the upstream (%s), the first at %s and the last at %s, "+
				"and the last got no usable answer (%s). It may or may not have taken effect, and it was not sent after the last attempt. %s",
			r.ID, r.Tool, approvedWords(r), r.Attempts, r.Upstream, firstDispatch(r), last, lastNote(r), advice), "unknown", r)
	}
	return toolResult(fmt.Sprintf(
		"Outcome unknown: execution %s of %s%s was sent to the upstream (%s) at %s and no usable answer was observed (%s). "+
			"It may or may not have taken effect, and it was not sent again. %s",
		r.ID, r.Tool, approvedWords(r), r.Upstream, last, lastNote(r), advice), "unknown", r)
}

// firstDispatch returns when r was first dispatched, as unknownResult
// writes times.
func firstDispatch(r *record.Record) string {
	for _, t := range r.History {
		if t.State == record.Dispatched {
			return t.At.UTC().Format(time.RFC3339Nano)
		}
	}
	return "an unrecorded time"
}

// approvedWords says who approved r and when, as in " (approved by bob
// through operator at ...)", or "" if it needed no approval.
func approvedWords(r *record.Record) string {
	for _, t := range r.History {
		if t.State == record.Authorized {
			return fmt.Sprintf(" (approved by %s through %s at %s)", decider(t), t.Via, t.At.UTC().Format(time.RFC3339))
		}
	}
	return ""
}

// decider names who made the decision t: the person, or what stood in.
func decider(t record.Transition) string {
	switch {
	case t.By != "":
		return t.By
	case t.Via == record.ViaTimeout:
		return "no one (the approval timed out)"
	}
	return "an unnamed decider"
}

// refusedResult is the answer of an execution whose approval was refused:
// an error result that says so first, so that a model does not send the
// same call again hoping for another answer. Replayed, to a call that
// matched the refused one, it says it is that call's stored outcome: the
// reason, such as a client that could not be asked, was true of that
// call's client, not necessarily of this one's.
func refusedResult(r *record.Record, replay bool) json.RawMessage {
	var t record.Transition
	if n := len(r.History); n > 0 {
		t = r.History[n-1]
	}
	why := t.Note
	if why == "" {
		why = "no reason given"
	}
	until := r.ExpiresAt.UTC().Format(time.RFC3339)
	again := fmt.Sprintf("The same call gets this refusal again until %s; do not retry it unchanged.", until)
	if replay {
		again = fmt.Sprintf("This is the stored outcome of an earlier identical call, which this call matched: it was not asked about again, "+
			"and the same call gets this refusal until %s. A call with other arguments or a new client key, or this one after then, is a new execution and is asked about.", until)
	}
	text := fmt.Sprintf("Refused: execution %s of %s was not approved, so it was not sent: %s (decided by %s through %s at %s). %s",
		r.ID, r.Tool, why, decider(t), t.Via, t.At.UTC().Format(time.RFC3339), again)
	if replay {
		// Marked as every other replay is.
		return mcp.TextResult(text, true, map[string]any{mcp.MetaOutcome: "refused", mcp.MetaReplayed: true, mcp.MetaExecution: describe(r)})
	}
	return toolResult(text, "refused", r)
}

// inProgressResult says that r is still under way after the caller
// waited window, to the millisecond: a window a client's deadline
// shortened is seldom a round number, and its nanoseconds say nothing.
// One under a millisecond is told to the microsecond, not as 0s.
// Under replay: undelivered (undelivered set) a retry gets the answer
// only until it reaches a caller, the first one most often: after that
// the same call runs again, and the caller must not be told otherwise.
func inProgressResult(r *record.Record, window time.Duration, undelivered bool) json.RawMessage {
	if window >= time.Millisecond {
		window = window.Round(time.Millisecond)
	} else {
		window = window.Round(time.Microsecond)
	}
	state := string(r.State)
	switch r.Awaiting {
	case record.ApproverOperator:
		state += ", awaiting approval from an operator: mcp-idempotent activity approve " + r.ID
	case record.ApproverClient:
		state += ", awaiting approval from the client's user"
	}
	advice := "Do not retry: the same call attaches to this execution and returns its answer once it is done."
	if undelivered {
		advice = "Do not retry blindly: the same call attaches to this execution while it runs, but once its answer has reached a caller, " +
			"the same call runs again (replay: undelivered). Check whether it happened first."
	}
	return toolResult(fmt.Sprintf("Still in progress: execution %s of %s has not finished after %s (state %s). %s",
		r.ID, r.Tool, window, state, advice), "in_progress", r)
}

// notRecordedYet is the answer of a caller of execution r, whose outcome
// this process holds and the store has not taken yet.
func notRecordedYet(r *record.Record) *jsonrpc.Error {
	return jsonrpc.Errorf(jsonrpc.CodeInternalError,
		"mcp-idempotent: execution %s of %s ran, but its outcome could not be recorded yet; calling again attaches to it and gets the outcome once it is",
		r.ID, r.Tool)
}
