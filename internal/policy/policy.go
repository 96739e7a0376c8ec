// Package policy holds each tool's replay contract: how calls to it are
// matched, replayed and settled. Defaults come from the tool's annotations
// in tools/list.
package policy

import (
	"encoding/json"
	"regexp"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
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

// A Scope says within what calls are matched.
type Scope string

// The intent scopes.
const (
	// ScopeSession matches calls within one MCP session: on stdio, one
	// proxy process.
	ScopeSession Scope = "session"
	// ScopeActor matches the actor's calls across sessions and restarts
	// (with a durable or shared store).
	ScopeActor Scope = "actor"
	// ScopeKey matches only calls that carry a client key; calls without
	// one run as they come, unrecorded.
	ScopeKey Scope = "key"
	// ScopeGlobal matches calls across actors. Only a tool named exactly
	// in the policy file may have it.
	ScopeGlobal Scope = "global"
)

// OnUnknown says what a call gets when it matches an execution whose
// outcome is unknown (sent, no answer observed).
type OnUnknown string

// The unknown-outcome modes.
const (
	// Block answers "outcome unknown" with the execution record and never
	// re-sends.
	Block OnUnknown = "block"
	// Retry re-dispatches once under the same execution id, so an upstream
	// that honours the forwarded key can dedupe it.
	Retry OnUnknown = "retry"
	// Recover asks the tool's status tool first, and re-dispatches only if
	// it says the action is not done.
	Recover OnUnknown = "recover"
)

// A JournalMode says how a value (a call's arguments, a tool's result)
// appears in the activity journal (DESIGN section 9).
type JournalMode string

// The journal modes.
const (
	// JournalHash shows a keyed hash of the value: HMAC-SHA-256, under the
	// fingerprint secret, of its canonical JSON (RFC 8785). Lines of one
	// action show one hash, and whoever holds the secret can check a
	// value they have against it; nobody else can read the value, or find
	// it by hashing guesses from a small space (card numbers, amounts).
	JournalHash JournalMode = "hash"
	// JournalRedact shows only that there was a value.
	JournalRedact JournalMode = "redact"
	// JournalClear shows the value as it came: for tools whose arguments
	// or results hold nothing secret, where the journal must say exactly
	// what was asked or answered.
	JournalClear JournalMode = "clear"
)

// A JournalRule says how a tool's calls appear in the activity journal.
type JournalRule struct {
	Arguments JournalMode
	Result    JournalMode // the result, or the upstream's JSON-RPC error
}

// Defaults.
const (
	// DefaultJournalArguments hashes arguments: the journal can tell which
	// lines are the same action without holding card numbers.
	DefaultJournalArguments = JournalHash
	// DefaultJournalResult redacts results: they are often large and may
	// hold what the tool read (personal data), and an auditor rarely has
	// a result of their own to check against a hash.
	DefaultJournalResult = JournalRedact

	DefaultRetention    = 24 * time.Hour
	DefaultAttachWindow = 10 * time.Minute
	// DefaultDeadline bounds the time a call with a retry rule may spend
	// from its arrival in the proxy's own waits (an account's allowance,
	// a backoff). It is the MCP TypeScript SDK's default request timeout:
	// most clients have given up by then, and a wait past that only holds
	// the account's room for an answer that a retry of the client's would
	// find replayed anyway.
	DefaultDeadline = time.Minute
)

// A Policy is one tool's replay contract.
type Policy struct {
	Class Class
	Scope Scope
	// Retention is how long a completed execution replays.
	Retention time.Duration
	// Replay says whether delivered executions are replayed.
	Replay Replay
	// AttachWindow is how long a caller waits on an in-flight execution
	// before it is told the execution is still in progress.
	AttachWindow time.Duration
	// Ignore lists argument paths (dot-separated object members, as in
	// "trace.id") dropped before fingerprinting: they do not change the
	// effect.
	Ignore []string
	// Defaults materialises the inputSchema's top-level property defaults
	// before fingerprinting, so {} and {"region":"us-east-1"} match when
	// us-east-1 is the default.
	Defaults bool
	// OnUnknown says what a call matching an unknown execution gets.
	OnUnknown OnUnknown
	// Recover names the status tool for OnUnknown Recover.
	Recover *RecoverRule
	// ForwardKey sends the execution id upstream in the call's _meta.
	ForwardKey bool
	// Retry, when set, re-sends a call whose result the rule marks
	// transient (or that never left), with backoff.
	Retry *RetryRule
	// AlreadyDone lists results that, on a re-send of the same execution,
	// mean the effect already happened (a delete of something gone): the
	// execution then completes as a success.
	AlreadyDone []ResultMatch
	// Journal says how the call's arguments and its result appear in the
	// activity journal.
	Journal JournalRule
	// Approval says whether a person approves a new execution before it
	// is sent; Approver who, and ApprovalTimeout how long the execution
	// waits for the decision before it is refused.
	Approval        Approval
	Approver        Approver
	ApprovalTimeout time.Duration

	// Source says where the class came from, for logs and `policy show`.
	Source string
	// Written reports whether a rule of the policy file covers the tool,
	// by its name or a glob: its contract is written down.
	Written bool
	// Explicit reports whether the policy file names the tool exactly.
	Explicit bool
	// NoEffect, if not nil, says that the rule naming the tool exactly
	// sets keys its class ignores: keys that need a record, which a
	// read_only tool never has, or the replay of an idempotent tool.
	// Whoever wrote them believes they count.
	NoEffect *NoEffect
}

// NoEffect names the keys of a policy file's rule that have no effect on
// the tool it names, being of Class: read_only, or idempotent, from the
// server's annotations (a rule that sets class idempotent and replay is
// refused). A glob, or the defaults, set such keys for every tool they
// cover: they are not named here.
type NoEffect struct {
	File  string // the policy file's path
	Keys  []string
	Class Class
}

// A RetryRule says when a call is sent again, and how soon.
type RetryRule struct {
	// MaxAttempts bounds the sends of one call, the first included.
	MaxAttempts int
	// Base and Cap shape the full-jitter backoff: the wait before attempt
	// n+1 is uniform in [0, min(Cap, Base*2^n)].
	Base, Cap time.Duration
	// Transient lists the results that mean "try again later".
	Transient []ResultMatch
	// RetryAfterPath, if set, is the dot path in structuredContent of a
	// number of seconds to wait at least before the next attempt.
	RetryAfterPath string
	// Account names the upstream account whose allowance every send of
	// this tool takes from, first attempts and retries alike.
	Account string
	// Deadline is the most time a call may spend from its arrival across
	// the proxy's waits and its attempts: a wait for the account's room or
	// a backoff that would end past it is not begun, and the call ends
	// with its last real answer. An attempt already sent is never cut
	// short. Zero means DefaultDeadline; a client may shorten it per call
	// (_meta "mcp-idempotent/deadline_ms").
	Deadline time.Duration
}

// An Account is an upstream account's allowance, shared by every tool that
// names it.
type Account struct {
	Name string
	// Rate is in calls per second, Burst how many may go at once after a
	// quiet spell.
	Rate  float64
	Burst int
	// MaxConcurrency caps the calls in flight at once; 0 means no cap.
	MaxConcurrency int
	// MaxTokens and TokenRatio shape the retry budget (gRPC retry
	// throttling): retries stop while fewer than half of MaxTokens are
	// left; each failure costs 1, each success returns TokenRatio.
	MaxTokens  float64
	TokenRatio float64
}

// A ResultMatch recognises a tool result: by a regular expression on its
// text content, or by a structuredContent field's value.
type ResultMatch struct {
	// Text, if set, must match the result's text content.
	Text *regexp.Regexp
	// Path and In, if Path is set: structuredContent at Path must be one
	// of In (values as JSON text, such as 429 or "busy").
	Path string
	In   []string
	// SafeToResend declares that such a result means the upstream did
	// nothing (a vendor's 429), so even a side effect may be sent again.
	SafeToResend bool
}

// A RecoverRule says how to ask an upstream whether an execution whose
// outcome is unknown took effect.
type RecoverRule struct {
	// Tool is the status tool to call.
	Tool string
	// Arguments is the status call's arguments, a JSON object in which
	// every string "{{execution_id}}" is replaced by the execution id.
	Arguments json.RawMessage
	// DonePath is the dot path, in the status result's structuredContent,
	// of the field that says whether the action is done; DoneValues are
	// the values (as JSON text, such as "done" or true) that mean it is.
	DonePath   string
	DoneValues []string
	// NotDonePath and NotDoneValues say, the same way, that the action
	// did not happen, so that sending it again is safe. A status that
	// says neither (a job still running, a result without the field)
	// leaves the outcome unknown.
	NotDonePath   string
	NotDoneValues []string
}

// FromAnnotations returns the default policy for a tool with annotations a;
// nil means the tool is not known, which MCP treats like a tool with no
// annotations: it may have side effects.
func FromAnnotations(a *mcp.Annotations) Policy {
	p := Policy{
		Class:        SideEffect,
		Scope:        ScopeSession,
		Retention:    DefaultRetention,
		Replay:       ReplayAlways,
		AttachWindow: DefaultAttachWindow,
		Defaults:     true,
		OnUnknown:    Block,
		ForwardKey:   true,
		Journal:      JournalRule{Arguments: DefaultJournalArguments, Result: DefaultJournalResult},
		Approval:     ApprovalNone,
		Approver:     ApproverClient,
		// A field of its own: the alignment above is gofmt's.
		ApprovalTimeout: DefaultApprovalTimeout,
		Source:          "annotations (no read-only or idempotent hint)",
	}
	switch {
	case a == nil:
		p.Source = "default (tool not listed)"
	case isTrue(a.ReadOnlyHint):
		p.Class, p.Source = ReadOnly, "annotation readOnlyHint"
	case isTrue(a.IdempotentHint):
		// DESIGN section 6: an idempotent tool may be re-sent when its
		// outcome is unknown.
		p.Class, p.Source, p.OnUnknown = Idempotent, "annotation idempotentHint", Retry
	}
	return p
}

func isTrue(b *bool) bool { return b != nil && *b }
