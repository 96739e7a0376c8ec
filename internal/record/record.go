// Package record defines the execution record, its states, and the Store
// that keeps records. It is a leaf: it imports no other internal package.
//
// One execution is one accepted attempt to perform a tool action. Its life:
//
//	accepted -> [authorized] -> dispatched -> completed -> delivered
//	   |              |              |
//	   +-> refused    +-> failed     +-> unknown  (sent; outcome not observed)
//	   +-> failed                    +-> failed   (upstream answered with a JSON-RPC error)
//
// accepted is the reservation: exactly one caller wins it for a key.
// authorized is a person's approval, for a tool that needs one; refused,
// the approval denied, timed out or impossible to ask for. dispatched is
// stored before the request goes upstream. completed holds the result.
// delivered means a caller's transport took the result.
package record

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"
)

// A State is where an execution is in its life.
type State string

// The states of an execution.
const (
	// Accepted: validated, reserved in the store, not yet sent.
	Accepted State = "accepted"
	// Dispatched: stored as sent before the bytes went upstream.
	Dispatched State = "dispatched"
	// Completed: a CallToolResult came back (isError true included) and is
	// stored; the caller has not been seen to receive it.
	Completed State = "completed"
	// Delivered: the result was written to a caller's transport.
	Delivered State = "delivered"
	// Failed: known not to have run, or the upstream refused the request
	// with a JSON-RPC error. The key may be reserved again.
	Failed State = "failed"
	// Unknown: sent, and no answer was observed. It is not failed: the
	// action may have happened.
	Unknown State = "unknown"
	// Authorized: approved, by a person the tool's policy names, and not
	// yet sent. The decision is the transition's By, Via and Note.
	Authorized State = "authorized"
	// Refused: the approval was denied, timed out, or could not be asked
	// for. Nothing was sent; calling again gets the refusal again while
	// the record is kept.
	Refused State = "refused"
)

// States lists every state: those of every execution in the order of its
// life, then the two of an approval. A store may keep a state as its
// index here, so a new state goes at the end.
var States = []State{Accepted, Dispatched, Completed, Delivered, Failed, Unknown, Authorized, Refused}

// InFlight reports whether s is a state in which an answer may still come.
func (s State) InFlight() bool { return s == Accepted || s == Authorized || s == Dispatched }

// Settled reports whether s is a state a waiter can act on.
func (s State) Settled() bool { return !s.InFlight() }

// CanTransition reports whether an execution in state from may move to to.
// Unknown may be settled later (by a re-dispatch, a status check or an
// operator), which is why it is not a dead end. Dispatched to Dispatched is
// a re-send of the same execution after a transient result. A switch, not
// a map of the states each may move to: every change a store makes asks,
// and a map hashes the state's name.
func CanTransition(from, to State) bool {
	switch from {
	case Accepted:
		return to == Authorized || to == Refused || to == Dispatched || to == Failed
	case Authorized:
		return to == Dispatched || to == Failed
	case Dispatched:
		return to == Completed || to == Failed || to == Unknown || to == Dispatched
	case Completed:
		return to == Delivered
	case Unknown:
		return to == Dispatched || to == Completed || to == Failed
	}
	return false
}

// Allowed reports whether c may move a record in state from: a move
// CanTransition allows, from c.From if c names one.
func (c *Change) Allowed(from State) bool {
	return (c.From == "" || c.From == from) && CanTransition(from, c.To)
}

// AllowedFrom reports whether c may move a record in state from, before
// its Holder is checked: Allowed, and, if c names a Holder, from a state
// in flight.
func (c *Change) AllowedFrom(from State) bool {
	return c.Allowed(from) && (c.Holder == "" || from.InFlight())
}

// AllowedFor reports whether c may move r: AllowedFrom its state, and
// Fenced for it.
func (c *Change) AllowedFor(r *Record) bool {
	return c.AllowedFrom(r.State) && c.Fenced(r)
}

// Fenced reports whether r passes c's fences, its state aside: if c
// names a Holder, r owned by it, and if it names Attempts, r sent that
// many times. A store that checked AllowedFrom already asks only this.
func (c *Change) Fenced(r *Record) bool {
	return (c.Holder == "" || r.Owner == c.Holder) && (c.Attempts == 0 || r.Attempts == c.Attempts)
}

// A Transition is one state change with its time. A decision (Authorized,
// Refused) says who made it and through which channel.
type Transition struct {
	State State     `json:"state"`
	At    time.Time `json:"at"`
	Note  string    `json:"note,omitempty"`
	By    string    `json:"by,omitempty"`
	Via   string    `json:"via,omitempty"`
}

// A Record is one execution. A Record returned by a Store may be shared
// with other callers, and none of it, the Result and Error bytes
// included, may be modified (see Store).
type Record struct {
	ID          string `json:"id"`          // "exe_" + ULID
	Key         string `json:"key"`         // what calls are matched on
	Fingerprint string `json:"fingerprint"` // the intent fingerprint, hex
	Actor       string `json:"actor"`
	Scope       string `json:"scope"`
	Upstream    string `json:"upstream"`
	Tool        string `json:"tool"`

	State   State        `json:"state"`
	History []Transition `json:"history"`
	// Attempts counts dispatches.
	Attempts int `json:"attempts"`
	// Attached counts callers that joined this execution after the first.
	Attached int `json:"attached"`
	// Awaiting names who is asked to approve the execution while it is
	// Accepted (ApproverClient, ApproverOperator); "" when it needs no
	// approval, and once it has left Accepted.
	Awaiting string `json:"awaiting,omitempty"`

	// Result is the upstream's result member, as it came.
	Result json.RawMessage `json:"result,omitempty"`
	// Error is the upstream's JSON-RPC error object, as it came.
	Error json.RawMessage `json:"error,omitempty"`

	// Retention is how long a settled record stays matchable.
	Retention time.Duration `json:"retention"`
	// ExpiresAt is when a settled record stops matching; zero while in
	// flight.
	ExpiresAt time.Time `json:"expires_at,omitzero"`

	// Owner names the proxy process that runs the execution while it is
	// in flight, and LeaseUntil is when its claim lapses unless renewed.
	// A record in flight past its lease is an orphan: its owner died.
	Owner      string    `json:"owner,omitempty"`
	LeaseUntil time.Time `json:"lease_until,omitzero"`

	// Orphan is set only on a record that Reserve or Wait returns, and
	// only when that call settled an orphan (OrphanChange): it is the
	// orphan as the call left it. That is the record returned itself
	// for an orphan sent (now unknown), or the orphan that a won
	// reservation replaced (never sent, now failed). Exactly one caller
	// settles an orphan, so exactly one learns of it here, to journal
	// the takeover as its own. Never stored.
	Orphan *Record `json:"-"`
}

// Apply moves r by c at now, which CanTransition must allow: the state and
// its history entry, the attempt count, the result or error, a new owner's
// claim; a record that settles gets its expiry and loses its lease, and
// one back in flight loses its expiry. Every store applies changes with it,
// so they agree on what a change does. c is read, not kept: by pointer, as
// a Change is 200 bytes and a store applies one per transition.
func (r *Record) Apply(c *Change, now time.Time) {
	wasInFlight := r.State.InFlight()
	r.State = c.To
	r.History = append(r.History, Transition{State: c.To, At: now, Note: c.Note, By: c.By, Via: c.Via})
	if c.To != Accepted {
		r.Awaiting = ""
	}
	if c.To == Dispatched {
		r.Attempts++
	}
	if c.Result != nil {
		r.Result = c.Result
	}
	if c.Error != nil {
		r.Error = c.Error
	}
	if c.Owner != "" {
		r.Owner, r.LeaseUntil = c.Owner, c.LeaseFrom(now)
	}
	switch {
	case c.To.Settled():
		r.ExpiresAt = now.Add(r.Retention)
		r.LeaseUntil = time.Time{}
	case !wasInFlight:
		r.ExpiresAt = time.Time{} // back in flight: a re-dispatch
	}
}

// Orphaned reports whether r is in flight with a lease that lapsed
// before now: the process that ran it is gone.
func (r *Record) Orphaned(now time.Time) bool {
	return r.State.InFlight() && !r.LeaseUntil.IsZero() && now.After(r.LeaseUntil)
}

// OrphanChange is how an orphan is settled: one never sent failed (safe to
// run again, and an approval is asked for again), one sent became unknown
// (never silently re-sent).
func OrphanChange(r *Record) Change {
	switch r.State {
	case Accepted:
		return Change{To: Failed, Note: "owner " + r.Owner + " went away before sending it"}
	case Authorized:
		return Change{To: Failed, Note: "owner " + r.Owner + " went away after its approval, before sending it"}
	}
	// The dispatch is recorded before the bytes go, the first often with
	// the reservation itself: an owner gone since may not have sent them.
	return Change{To: Unknown, Note: "owner " + r.Owner + orphanSent}
}

const orphanSent = " went away after recording its dispatch, before any answer: it may or may not have sent it"

// SettledAsOrphan reports whether r is unknown because its owner went
// away with it dispatched (OrphanChange), rather than by the word of the
// process that sent it: no caller was told of that outcome yet.
func (r *Record) SettledAsOrphan() bool {
	if r.State != Unknown || len(r.History) == 0 {
		return false
	}
	last := r.History[len(r.History)-1]
	return last.State == Unknown && last.Note == "owner "+r.Owner+orphanSent
}

// WithOrphan returns r, or a copy of it whose Orphan is orphan if that
// is set: a store's own record is shared, and never carries one.
func (r *Record) WithOrphan(orphan *Record) *Record {
	if orphan == nil {
		return r
	}
	c := r.Clone()
	c.Orphan = orphan
	return c
}

// ShowOrphanAsItself returns r with its Orphan, when r is the orphan
// this call settled (a waiter's), shown as r is: with the attaches r
// shows, not yet written among them.
func ShowOrphanAsItself(r *Record) *Record {
	if r.Orphan == nil || r.Orphan.ID != r.ID || r.Orphan.Attached == r.Attached {
		return r
	}
	o := r.Clone()
	o.Orphan = nil
	return r.WithOrphan(o)
}

// At returns when r last entered s, or the zero time.
func (r *Record) At(s State) time.Time {
	for i := len(r.History) - 1; i >= 0; i-- {
		if r.History[i].State == s {
			return r.History[i].At
		}
	}
	return time.Time{}
}

// Clone returns a copy of r. The copy shares the Result and Error bytes
// and the History entries, none of which is ever modified once written (a
// store only appends to History); its History is clipped, so appending to
// the copy's never writes into the original's.
func (r *Record) Clone() *Record {
	c := *r
	c.History = slices.Clip(r.History)
	return &c
}

// A Change moves a record to a new state.
type Change struct {
	To State
	// From, when set, makes the change conditional: it applies only to a
	// record in that state, and any other is ErrConflict. Two callers that
	// both claim an unknown execution for a re-dispatch (Unknown to
	// Dispatched) then cannot both win: the second finds it Dispatched,
	// which may otherwise move to Dispatched again.
	From State
	Note string
	// By and Via, for a decision (Authorized, Refused), name who made it
	// and through which channel (ApproverClient, ApproverOperator, ...).
	// An operator's resolution of an unknown execution names the
	// operator and ApproverOperator too.
	By  string
	Via string
	// Result and Error are stored with the change when non-nil.
	Result json.RawMessage
	Error  json.RawMessage
	// Owner and LeaseUntil, when set, claim the record for a process: a
	// re-dispatch by another proxy than the one that first ran it.
	Owner      string
	LeaseUntil time.Time
	// Lease, with Owner, starts the claim's lease when the store writes
	// it, in place of LeaseUntil: as ReserveOptions.Lease does.
	Lease time.Duration
	// Holder, when set, fences the change: it applies only to a record
	// in flight that Holder still owns, and any other is ErrConflict. A
	// send's outcome carries the owner that sent it, so that once its
	// lease lapsed and another process took the execution over (settled
	// it as an orphan, or claimed it again), the outcome is refused.
	Holder string
	// Attempts, when not 0, applies the change only to a record sent
	// that many times, and any other is ErrConflict: a claim decided
	// from a copy read a while ago (a re-dispatch of an unknown
	// execution, after a wait) is refused if the execution was sent
	// again meanwhile.
	Attempts int
}

// LeaseFrom returns when a claim by c, written at now, lapses:
// c.LeaseUntil unless c.Lease is set.
func (c *Change) LeaseFrom(now time.Time) time.Time {
	if c.Lease > 0 {
		return now.Add(c.Lease)
	}
	return c.LeaseUntil
}

// ReserveOptions says which settled records a reservation may replace.
type ReserveOptions struct {
	// Replace lists states, besides Failed, in which a record holding the
	// key is superseded by the new one rather than matched. A tool that
	// coalesces only in-flight calls replaces Completed and Delivered.
	// Only a record of the same action (an equal Fingerprint) is ever
	// superseded before it expires: under a client's key, a record of
	// another action is matched, and the caller refuses the reuse.
	Replace []State
	// Dispatch asks that a won reservation be recorded as dispatched at
	// once, accepted and dispatched at the same time, for a caller that
	// sends it without waiting: one change fewer to store. A store may
	// leave it accepted instead; the caller then records the dispatch
	// itself, so it must look at the state it gets back.
	Dispatch bool
	// Lease, when set, starts the new record's lease when the store
	// writes it: LeaseUntil is then the store's now plus Lease, whatever r
	// held. A reservation that waited its turn under load does not land
	// with its lease already run out, to be taken for a dead process's.
	Lease time.Duration
	// Unheld says that a read the caller made just before found no record
	// holding the key (Replayer): a store may go straight to the write
	// that claims it, which finds any holder that came since.
	Unheld bool
}

// LeaseFrom returns when a record reserved with o and written at now
// lapses, r.LeaseUntil unless o.Lease is set.
func (o ReserveOptions) LeaseFrom(r *Record, now time.Time) time.Time {
	if o.Lease > 0 {
		return now.Add(o.Lease)
	}
	return r.LeaseUntil
}

// Who is asked to approve an execution (Record.Awaiting), and the
// channels a decision comes through (Transition.Via).
const (
	// ApproverClient: the caller's user, asked by the proxy through MCP
	// elicitation.
	ApproverClient = "client"
	// ApproverOperator: a person with access to the store, through
	// mcp-idempotent activity approve and deny.
	ApproverOperator = "operator"
	// ViaTimeout: no one decided within the approval's timeout.
	ViaTimeout = "timeout"
	// ViaSessionGrant: an earlier approval in the session covers the tool.
	ViaSessionGrant = "session-grant"
	// ViaProxy: the proxy refused, since no one could be asked.
	ViaProxy = "proxy"
)

// MaxNote bounds, in characters, the note a person gives with a decision
// (an approval, a refusal, a resolution): it is kept with the record and
// shown to every caller for as long as the record is retained.
const MaxNote = 1000

// CutNote returns note cut to MaxNote characters, saying so at its end,
// for a note that came from a client, which may send any length.
func CutNote(note string) string {
	if utf8.RuneCountInString(note) <= MaxNote {
		return note
	}
	n := 0
	for i := range note {
		if n == MaxNote {
			return fmt.Sprintf("%s… (cut: %d characters in all)", note[:i], utf8.RuneCountInString(note))
		}
		n++
	}
	return note
}

// Sentinel errors that callers branch on.
var (
	// ErrNotFound: no record has that id.
	ErrNotFound = errors.New("no such execution")
	// ErrConflict: the record is not in a state that allows the change.
	ErrConflict = errors.New("execution is not in a state that allows this change")
	// ErrUnreadable: the store holds a record it cannot read, which no
	// proxy wrote so. Calling again does not end it; fixing or deleting
	// the record does.
	ErrUnreadable = errors.New("the store holds it as no proxy writes it")
	// ErrStoreRefused: a store's server answered and refuses what its URL
	// asks (a database that does not exist, a user or password it does
	// not take). Waiting does not end it; changing the URL does.
	ErrStoreRefused = errors.New("the store's server refuses its URL")
	// ErrNotSent: an operation never reached the store's server (no
	// connection could be had or set up for it), so it wrote nothing.
	ErrNotSent = errors.New("the operation never reached the store's server")
	// ErrWritesRefused: a store's server answered and takes no writes (a
	// Redis replica or one full at its maxmemory, a PostgreSQL standby or
	// one in read-only mode). Unlike ErrStoreRefused, waiting may end it:
	// a failover, memory freed.
	ErrWritesRefused = errors.New("the store's server takes no writes")
)

// WritesRefused marks err as ErrWritesRefused, its message unchanged.
func WritesRefused(err error) error { return writesRefusedError{err} }

type writesRefusedError struct{ error }

func (e writesRefusedError) Unwrap() []error { return []error{e.error, ErrWritesRefused} }

// NotSent marks err as ErrNotSent, its message unchanged.
func NotSent(err error) error { return notSentError{err} }

type notSentError struct{ error }

func (e notSentError) Unwrap() []error { return []error{e.error, ErrNotSent} }

// StoreRefused marks err as ErrStoreRefused, its message unchanged.
func StoreRefused(err error) error { return refusedError{err} }

type refusedError struct{ error }

func (e refusedError) Unwrap() []error { return []error{e.error, ErrStoreRefused} }

// A Store keeps execution records. Implementations are safe for concurrent
// use, and every method honours ctx.
//
// The records a Store returns are the caller's to read, never to change: a
// store may hand one record to many callers, and keep it.
//
// Leases: a record is reserved with r.Owner and r.LeaseUntil, and its owner
// calls Renew while it runs. A record found in flight past its lease is an
// orphan, and the store settles it with OrphanChange in the same atomic
// step that found it (so exactly one caller takes an orphan over): in
// Reserve, before matching, and in Wait, which therefore returns by the
// lease's end at the latest. The call that settles it says so in the
// Orphan of the record it returns. A store may also settle orphans that
// no call meets while it purges; no caller learns of those, and a store
// that does tells of them through a hook of its own options.
type Store interface {
	// Reserve claims r.Key for the new record r, atomically: of any number
	// of concurrent calls for one key, exactly one wins. It wins when no
	// record holds the key, or the holder is expired, Failed (an orphan
	// not yet sent included), or in a state listed in opts.Replace; r is
	// then stored as Accepted and returned with won true. Otherwise the
	// holder is returned with won false, and its Attached count is raised
	// by one if it is of r's action (the same Fingerprint): a caller
	// whose client key names another action is refused, not attached. A
	// store may write the count later, in a batch; the records it returns
	// show it. r is the store's once passed: a store may keep it, and the
	// caller must not change it.
	Reserve(ctx context.Context, r *Record, opts ReserveOptions) (rec *Record, won bool, err error)

	// Update applies c to the record id and returns the result. It returns
	// ErrNotFound or ErrConflict (a move CanTransition forbids). Marking a
	// Delivered record Delivered again is a no-op, unless the change is
	// conditional (From): a delivery From Completed finds out that another
	// caller delivered the record first. A change to a settled
	// state sets ExpiresAt to now plus the record's Retention.
	Update(ctx context.Context, id string, c Change) (*Record, error)

	// Get returns the record id, or ErrNotFound.
	Get(ctx context.Context, id string) (*Record, error)

	// Wait blocks until the record id is settled (not in flight) and
	// returns it, or returns ctx's error. All waiters of one record are
	// woken by one event; a store shared across processes may also check
	// on a bounded backoff, and settles an orphan it finds.
	Wait(ctx context.Context, id string) (*Record, error)

	// Renew extends to until the lease of every record in flight that
	// owner holds.
	Renew(ctx context.Context, owner string, until time.Time) error
}

// A Filter selects records for List.
type Filter struct {
	Tool        string    // only this tool's executions, if set
	Fingerprint string    // only executions of this fingerprint, if set
	State       State     // only executions in this state, if set
	Since       time.Time // only executions accepted at or after this, if set
	// Awaiting keeps only executions in Accepted that wait for an
	// approval (Record.Awaiting set).
	Awaiting bool
	Limit    int // at most this many; 0 means 100
}

// Matches reports whether r passes f's tests on the record's fields: all
// of them but Since and Limit, which a store applies as it reads.
func (f Filter) Matches(r *Record) bool {
	awaits := r.State == Accepted && r.Awaiting != ""
	return (f.Tool == "" || r.Tool == f.Tool) &&
		(f.Fingerprint == "" || r.Fingerprint == f.Fingerprint) &&
		(f.State == "" || r.State == f.State) &&
		(!f.Awaiting || awaits)
}

// A Replayer answers a replay from a read that waits for no lock, no
// server, no connection and no write of attach counts. A store whose
// reads are of a local file (SQLite) implements it, so that its caller
// can answer a replay on the goroutine that read the call, where a write
// would go to a goroutine of its own. It answers no record whose replay
// writes: the caller writes nothing for the ones it answers.
type Replayer interface {
	// Replay returns, with ok true, the record Reserve(ctx, r, opts)
	// would return unwon if it holds r.Key Delivered, with r's
	// Fingerprint, counted as attached to as Reserve counts it: replaying
	// it writes nothing, where a Completed record's replay records its
	// delivery. Otherwise ok is false and nothing is counted; unheld is
	// true if the read found no record holding the key
	// (ReserveOptions.Unheld).
	Replay(ctx context.Context, r *Record, opts ReserveOptions) (rec *Record, unheld, ok bool)
}

// A Lister lists execution records, newest first. Stores that outlive the
// process implement it, for the activity commands.
type Lister interface {
	List(ctx context.Context, f Filter) ([]*Record, error)
}

// A Decider is a Store shared across processes, in which an execution
// that awaits an operator's approval can be decided from another
// process (mcp-idempotent activity approve, deny) and its owner woken.
type Decider interface {
	// WaitDecided blocks until the record id has left Accepted and
	// returns it, or returns ctx's error. It is woken by the store's
	// event for the change, as Wait is by a settlement, and settles an
	// orphan it finds, as Wait does.
	WaitDecided(ctx context.Context, id string) (*Record, error)
}
