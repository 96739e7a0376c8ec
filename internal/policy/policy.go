// Package policy holds each tool's replay contract: how calls to it are
// matched, replayed and settled. Defaults come from the tool's annotations
// in tools/list.
package policy

import (
	"encoding/json"
	"time"
)

// A Class says what calling a tool does to the world.
type Class string

// The classes of tool.
const (
	// ReadOnly tools (readOnlyHint) pass straight through: no record, free
	// to retry.
	ReadOnly Class = "read_only"
	// Idempotent tools (idempotentHint) have concurrent duplicates
	// coalesced into one execution; a later call runs again.
	Idempotent Class = "idempotent"
	// SideEffect tools (everything else, the MCP default) are fully
	// deduplicated: a repeated call within the retention gets the stored
	// answer.
	SideEffect Class = "side_effect"
)

// Replay says which settled executions a repeated call attaches to.
type Replay string

// The replay modes.
const (
	// ReplayAlways: identical calls within the retention are retries.
	ReplayAlways Replay = "always"
	// ReplayUndelivered: only executions whose answer never reached the
	// caller (and in-flight ones) are attached to.
	ReplayUndelivered Replay = "undelivered"
)

// Defaults.
const (
	DefaultRetention    = 24 * time.Hour
	DefaultAttachWindow = 10 * time.Minute
)

// A Policy is one tool's replay contract.
type Policy struct {
	Class Class
	// Retention is how long a completed execution replays.
	Retention time.Duration
	// Replay says whether delivered executions are replayed.
	Replay Replay
	// AttachWindow is how long a caller waits on an in-flight execution
	// before it is told the execution is still in progress.
	AttachWindow time.Duration
	// Source says where the class came from, for logs and `policy show`.
	Source string
}

// Annotations are the tool annotations of MCP's Tool type that bear on
// replay. A nil hint is absent.
type Annotations struct {
	ReadOnlyHint    *bool `json:"readOnlyHint,omitempty"`
	DestructiveHint *bool `json:"destructiveHint,omitempty"`
	IdempotentHint  *bool `json:"idempotentHint,omitempty"`
	OpenWorldHint   *bool `json:"openWorldHint,omitempty"`
}

// FromAnnotations returns the default policy for a tool with annotations a;
// nil means the tool is not known, which MCP treats like a tool with no
// annotations: it may have side effects.
func FromAnnotations(a *Annotations) Policy {
	p := Policy{Class: SideEffect, Retention: DefaultRetention, Replay: ReplayAlways, AttachWindow: DefaultAttachWindow, Source: "default (no annotations)"}
	switch {
	case a == nil:
		p.Source = "default (tool not listed)"
	case isTrue(a.ReadOnlyHint):
		p.Class, p.Source = ReadOnly, "annotation readOnlyHint"
	case isTrue(a.IdempotentHint):
		p.Class, p.Source = Idempotent, "annotation idempotentHint"
	}
	return p
}

func isTrue(b *bool) bool { return b != nil && *b }

// A Tool is what tools/list says of one tool.
type Tool struct {
	Name        string          `json:"name"`
	Annotations *Annotations    `json:"annotations,omitempty"`
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
}

// A ListPage is one page of a tools/list result.
type ListPage struct {
	Tools      []Tool `json:"tools"`
	NextCursor string `json:"nextCursor,omitempty"`
}

// ParseListResult decodes a tools/list result.
func ParseListResult(result json.RawMessage) (ListPage, error) {
	var page ListPage
	err := json.Unmarshal(result, &page)
	return page, err
}
