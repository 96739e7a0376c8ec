package intercept

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

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

func unknownResult(r *record.Record) json.RawMessage {
	sent := r.At(record.Dispatched).UTC().Format(time.RFC3339Nano)
	return toolResult(fmt.Sprintf(
		"Outcome unknown: execution %s of %s was sent to the upstream (%s) at %s and no usable answer was observed (%s). "+
			"It may or may not have taken effect. Do not retry blindly: check whether it happened first.",
		r.ID, r.Tool, r.Upstream, sent, lastNote(r)), "unknown", r)
}

func inProgressResult(r *record.Record, window time.Duration) json.RawMessage {
	return toolResult(fmt.Sprintf(
		"Still in progress: execution %s of %s has not finished after %s (state %s). "+
			"Do not retry: the same call attaches to this execution and returns its answer once it is done.",
		r.ID, r.Tool, window, r.State), "in_progress", r)
}
