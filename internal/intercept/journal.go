package intercept

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// A Journal keeps the activity journal (DESIGN section 9): one entry per
// transition of an execution this process makes (accepted, dispatched,
// each further attempt, completed, failed, unknown, and delivered once
// for each caller whose transport took the result; a line for each other
// answer to a caller that joined the execution), stamped with the
// interceptor's clock when the store has taken it. An orphan that this
// process's reservation or wait settled (another process's execution
// whose lease lapsed) is journaled here too, as this process's
// transition. An operator's `activity resolve` journals its own.
//
// Record is called on the request path, after the store took the
// transition, so it must not block for long: a local file write. It may be
// called from many goroutines at once.
//
// A Record error is logged at error level and otherwise ignored: the store
// is what the proxy's decisions rest on, and the journal is the audit trail
// of them, so a journal that cannot be written (a full disk) must not lose
// a call or hold up its answer. Count the failures (metrics.CountJournal)
// and alert on them.
type Journal interface {
	Record(journal.Entry) error
}

// journalizeAccepted journals the acceptance of rec, which the store has
// already recorded as dispatched too: as the record stood when accepted,
// with note.
func (in *Interceptor) journalizeAccepted(req *Request, rec *record.Record, note string) {
	// Small enough to be inlined, as journalize.
	if in.journal != nil {
		in.writeAccepted(req, rec, note)
	}
}

// writeAccepted is journalizeAccepted with a journal.
func (in *Interceptor) writeAccepted(req *Request, rec *record.Record, note string) {
	accepted := *rec
	accepted.State, accepted.Attempts, accepted.History = record.Accepted, 0, rec.History[:1]
	in.journalize(req, &accepted, &record.Change{To: record.Accepted, Note: note})
}

// journalizeTakeover journals the orphan that rec says this process
// settled (record.Record.Orphan) in the call req made: another process's
// execution, failed if it was never sent, unknown if it was. The store
// tells only the caller that settled it, so the takeover is journaled
// once, by the process that made it.
func (in *Interceptor) journalizeTakeover(req *Request, rec *record.Record) {
	// Small enough to be inlined: most calls settle no orphan.
	if rec.Orphan != nil {
		in.writeTakeover(req, rec.Orphan)
	}
}

// writeTakeover is journalizeTakeover for o, the orphan the call settled.
func (in *Interceptor) writeTakeover(req *Request, o *record.Record) {
	if len(o.History) == 0 {
		return
	}
	in.log.Info("settled an execution whose owner went away", "execution", o.ID, "state", o.State,
		"owner", o.Owner, "request", req.Correlation)
	in.journalize(req, o, &record.Change{To: o.State, Note: o.History[len(o.History)-1].Note})
}

// JournalOrphan journals o, an orphan that the store settled while it
// purged, in this process: no call met it, so no call's line says so. It
// is this process's transition, as a takeover a call makes is; its note
// names the owner that went away.
func (in *Interceptor) JournalOrphan(o *record.Record) {
	if len(o.History) == 0 {
		return
	}
	last := o.History[len(o.History)-1]
	in.log.Info("settled an execution whose owner went away, while purging", "execution", o.ID, "state", o.State, "owner", o.Owner)
	if in.journal != nil {
		e := journal.Entry{
			Time: in.now(), Writer: journal.Process{Owner: in.owner}, Execution: o.ID, Tool: o.Tool, State: string(o.State),
			Attempt: o.Attempts, Upstream: o.Upstream, Actor: o.Actor, Scope: o.Scope, Fingerprint: o.Fingerprint,
			Note: last.Note, Shadow: in.shadow,
		}
		if err := in.journal.Record(e); err != nil {
			in.log.Error("writing the activity journal", "execution", o.ID, "state", o.State, "err", err)
		}
	}
	if in.ownOrphan(o) {
		// This process's own: its outcome, if it holds one, is recorded
		// over it, off the store's purge. Noted once the unknown is
		// journaled, so that the outcome's line comes after it.
		if k := in.own.tookOver(o.ID, o.Attempts); k != nil {
			k.wake()
		}
	}
}

// journalize writes rec's move to c.To in the journal, if there is one. req is
// the caller whose call made the move. Arguments go in with the execution's
// acceptance, results and errors with the transition that stored them, each
// as the tool's policy allows.
func (in *Interceptor) journalize(req *Request, rec *record.Record, c *record.Change) {
	// Small enough to be inlined, so that a proxy without a journal
	// pays one test on every transition. c is a pointer: a Change by
	// value would be copied (200 bytes) even when nothing is journaled.
	if in.journal != nil {
		in.writeJournal(req, rec, c)
	}
}

// writeJournal is journalize with a journal.
func (in *Interceptor) writeJournal(req *Request, rec *record.Record, c *record.Change) {
	e := in.line(req, rec)
	e.State = string(c.To)
	e.Note, e.By, e.Via = c.Note, c.By, c.Via
	if req.joined != "" && c.To == record.Delivered {
		e.Attach = &journal.Attach{How: req.joinedHow.String(), Got: req.got.String(), Taken: true}
	}
	if c.To == record.Accepted {
		args := req.Call.Arguments
		if args == nil {
			args = json.RawMessage("{}")
		}
		e.Arguments = in.journalValue(req.Policy.Journal.Arguments, "arguments", args)
	}
	in.putOutcome(&e, req, c)
	if err := in.journal.Record(e); err != nil {
		in.log.Error("writing the activity journal; the call goes on", "execution", rec.ID, "state", c.To, "err", err)
	}
}

// line returns the journal line of a move of rec that req's call made,
// with what every such line says: the execution, the call, the writer.
func (in *Interceptor) line(req *Request, rec *record.Record) journal.Entry {
	return journal.Entry{
		Time:        in.now(),
		Writer:      journal.Process{Owner: in.owner}, // the journal adds host and pid
		Execution:   rec.ID,
		Tool:        rec.Tool,
		Attempt:     rec.Attempts,
		Upstream:    rec.Upstream,
		Actor:       rec.Actor,
		Scope:       rec.Scope,
		Fingerprint: rec.Fingerprint,
		Request:     req.Correlation,
		Session:     req.Origin.Session,
		RequestID:   req.ID,
		Shadow:      in.shadow,
	}
}

// putOutcome puts c's result or error in e, as req's policy allows.
func (in *Interceptor) putOutcome(e *journal.Entry, req *Request, c *record.Change) {
	rule := req.Policy.Journal.Result
	if c.Result != nil {
		e.Result = in.journalValue(rule, "result", c.Result)
	}
	if c.Error != nil {
		e.Error = in.journalValue(rule, "error", c.Error)
	}
}

// journalizeFenced journals the outcome c of rec's send that the store
// refused: the record no longer says what came back, so this line does.
func (in *Interceptor) journalizeFenced(req *Request, rec *record.Record, c *record.Change) {
	if in.journal == nil {
		return
	}
	note := fmt.Sprintf("the store refused this outcome (%s): the lease of this process lapsed, and another settled or took over the execution", c.To)
	if c.Note != "" {
		note += "; " + c.Note
	}
	e := in.line(req, rec)
	e.Event, e.Note = journal.Fenced, note
	in.putOutcome(&e, req, c)
	if err := in.journal.Record(e); err != nil {
		in.log.Error("writing the activity journal; the call goes on", "execution", rec.ID, "event", e.Event, "err", err)
	}
}

// journalizeAttach journals what req's caller, which joined an execution
// rather than started it, got, when it is no delivered line: err is its
// transport's refusal, if it refused the answer.
func (in *Interceptor) journalizeAttach(req *Request, err error) {
	if in.journal == nil || req.joined == "" {
		return
	}
	a := &journal.Attach{How: req.joinedHow.String(), Got: req.got.String(), Taken: err == nil}
	if err != nil {
		a.Error = err.Error()
	}
	e := journal.Entry{
		Time:      in.now(),
		Writer:    journal.Process{Owner: in.owner},
		Execution: req.joined,
		Tool:      req.Call.Name,
		Actor:     req.Origin.Actor,
		Request:   req.Correlation,
		Session:   req.Origin.Session,
		RequestID: req.ID,
		Event:     journal.Attached,
		Attach:    a,
		Shadow:    in.shadow,
	}
	if rerr := in.journal.Record(e); rerr != nil {
		in.log.Error("writing the activity journal; the call goes on", "execution", req.joined, "event", e.Event, "err", rerr)
	}
}

// JournalSession writes e, the start or end of a client session, in the
// journal, if there is one; the interceptor stamps its time and writer,
// and in shadow mode marks it so, as every line of a shadow proxy is.
func (in *Interceptor) JournalSession(e journal.Entry) {
	if in.journal == nil {
		return
	}
	e.Time = in.now()
	e.Writer = journal.Process{Owner: in.owner}
	e.Shadow = in.shadow
	if err := in.journal.Record(e); err != nil {
		in.log.Error("writing the activity journal", "session", e.Session, "event", e.Event, "err", err)
	}
}

// Journals reports whether the interceptor keeps a journal, so that a
// session gathers what its lines say only then.
func (in *Interceptor) Journals() bool { return in.journal != nil }

// journalValue shows v as mode says. A hash is the fingerprint Hasher's
// HMAC of the value in a record of its own, {"scope": "journal:" + what,
// "value": v} with the action record's other members empty, so that no
// journal hash is ever an intent fingerprint, and the hashes of arguments
// and of results never match each other. An unset mode is the default's,
// and a value that cannot be canonicalised is redacted rather than shown.
func (in *Interceptor) journalValue(mode policy.JournalMode, what string, v json.RawMessage) *journal.Value {
	switch mode {
	case policy.JournalClear:
		return &journal.Value{Clear: v}
	case policy.JournalRedact:
		return &journal.Value{Redacted: true}
	case "":
		if what == "arguments" {
			return in.journalValue(policy.DefaultJournalArguments, what, v)
		}
		return in.journalValue(policy.DefaultJournalResult, what, v)
	}
	// v is valid JSON: a call's arguments or an upstream's answer, read
	// from frames jsonrpc checked, or a result the proxy wrote itself.
	sum, err := in.hasher.SumValid(fingerprint.Action{Scope: "journal:" + what, Extra: map[string]json.RawMessage{"value": v}})
	if err != nil {
		return &journal.Value{Redacted: true}
	}
	return &journal.Value{HMAC: sum}
}

// journalGates keep the journal in the order of the store. The store wakes
// the callers attached to an execution the moment it takes the settling
// transition, before the settling caller has journaled it; a gate held
// from before that transition until its line is written holds back their
// "delivered" lines until then.
type journalGates struct {
	mu    sync.Mutex              // guards gates and each gate's held
	gates map[string]*journalGate // by execution id
}

type journalGate struct {
	held int           // holders: settlings of the execution under way
	open chan struct{} // closed when the last holder lets go
}

// hold holds the gate of execution id until the returned func is called.
func (g *journalGates) hold(id string) (release func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	gate := g.gates[id]
	if gate == nil {
		if g.gates == nil {
			g.gates = make(map[string]*journalGate)
		}
		gate = &journalGate{open: make(chan struct{})}
		g.gates[id] = gate
	}
	gate.held++
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if gate.held--; gate.held == 0 {
			close(gate.open)
			delete(g.gates, id)
		}
	}
}

// wait waits until no one holds the gate of execution id. It must not be
// called while holding one.
func (g *journalGates) wait(id string) {
	g.mu.Lock()
	gate := g.gates[id]
	g.mu.Unlock()
	if gate != nil {
		<-gate.open
	}
}
