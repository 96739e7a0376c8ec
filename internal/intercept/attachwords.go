package intercept

import "github.com/mcp-idempotent/mcp-idempotent/internal/journal"

// joinHow and gotWhat are journal.Attach's How and Got as a Request keeps
// them: one byte each, in room its other small fields leave, where two
// strings took a proxy's call to the next allocation size. The zero value
// is "", not joined.
type (
	joinHow uint8
	gotWhat uint8
)

const (
	joinedReplay joinHow = iota + 1
	joinedWaited
	joinedKey
	joinedRedispatch
	joinedRecover
)

const (
	gotAnswer gotWhat = iota + 1
	gotError
	gotUnknown
	gotInProgress
	gotRefused
	gotQuestion
	gotInputRequired
	gotKeyRefused
	gotNoOutcome
)

var joinHows = [...]string{"", journal.JoinedReplay, journal.JoinedWaited, journal.JoinedKey,
	journal.JoinedRedispatch, journal.JoinedRecover}

var gotWhats = [...]string{"", journal.GotAnswer, journal.GotError, journal.GotUnknown,
	journal.GotInProgress, journal.GotRefused, journal.GotQuestion, journal.GotInputRequired,
	journal.GotKeyRefused, journal.GotNoOutcome}

func (h joinHow) String() string { return joinHows[h] }

func (g gotWhat) String() string { return gotWhats[g] }
