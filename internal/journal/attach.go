package journal

// Attached is the Event of a line that records what a caller that joined
// an execution got, when the answer was not its result delivered (which
// the delivered line records, with Entry.Attach).
const Attached = "attached"

// How a caller joined an execution (Attach.How).
const (
	JoinedReplay = "replay" // it was settled when the call came
	JoinedWaited = "waited" // it was under way: the caller waited for it
	// JoinedKey: its client key named the execution, but its action
	// was another, so it was refused.
	JoinedKey = "key"
	// JoinedRedispatch and JoinedRecover: it found the outcome unknown,
	// and sent the execution again (on_unknown: retry), or asked the
	// status tool whether it took effect (on_unknown: recover).
	JoinedRedispatch = "redispatch"
	JoinedRecover    = "recover"
)

// What a caller that joined an execution got (Attach.Got).
const (
	GotAnswer     = "answer"      // the execution's result
	GotError      = "error"       // the execution's error: it failed
	GotUnknown    = "unknown"     // outcome unknown
	GotInProgress = "in_progress" // still in progress: the wait ended first
	GotRefused    = "refused"     // the refusal of its approval
	GotQuestion   = "question"    // the approval's question again (2026-07-28), its user not yet asked
	// GotInputRequired: the round's input_required result (2026-07-28
	// multi-round request): the tool's question to the client's user.
	GotInputRequired = "input_required"
	GotKeyRefused    = "key_refused" // an error: its client key was used for another action
	// GotNoOutcome: an error of the proxy's, without the outcome: the
	// store could not give it (the record was gone or unreadable) or
	// take it.
	GotNoOutcome = "no_outcome"
)

// An Attach records one caller that joined an execution: how, what it
// got, and whether its transport took it.
type Attach struct {
	How string `json:"how"`
	Got string `json:"got"`
	// Taken says whether the caller's transport took the answer; Error
	// says why not.
	Taken bool   `json:"taken"`
	Error string `json:"error,omitempty"`
}
