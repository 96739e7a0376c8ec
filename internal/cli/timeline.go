package cli

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// A timeline is what activity show tells of one execution: the record,
// whose members show --json has always printed and scripts read, and,
// under "timeline", one member per question an investigation asks, in
// the order it asks them.
type timeline struct {
	*record.Record
	Answers `json:"timeline"`
}

// Answers are a timeline's answers, one per question.
type Answers struct {
	Sessions   sessionsPart `json:"sessions"`
	Authorized authPart     `json:"authorization"`
	Dispatch   dispatchPart `json:"dispatch"`
	Answer     answerPart   `json:"answer"`
	Callers    callersPart  `json:"callers"`
	Later      laterPart    `json:"later"`
	// FromJournal is set when the store no longer holds the execution
	// (its retention passed), or with the memory store, which went with
	// its proxy: Record is what the journals' lines tell.
	FromJournal bool `json:"from_journal,omitempty"`
	memory      bool // the store was the memory store, gone with its proxy
	// Shadow is set for a record of a proxy in shadow mode: every call
	// went upstream as it came, and the record, as the journal, says
	// what the proxy would have done. A replay or an attach was a call
	// sent upstream again.
	Shadow bool `json:"shadow"`
}

// sessionsPart: which sessions (agent runs) sent calls that map to the
// execution. Only a journal tells; the record names one actor and scope.
type sessionsPart struct {
	Journaled bool `json:"journaled"` // a journal was given
	// Actor and Scope are printed quoted (%q), which escapes what a
	// terminal would act on: makePrintable leaves them as they are.
	Actor    string        `json:"actor" print:"quoted"`
	Scope    string        `json:"scope" print:"quoted"`
	Sessions []sessionCall `json:"sessions"`
	// Outside are the journal's lines about the execution that no
	// session made: an operator's resolution or decision, an orphan's
	// takeover by another proxy or its store's purge.
	Outside []outsideLine `json:"outside"`
}

// An outsideLine is one transition no session made, and who made it.
type outsideLine struct {
	At     time.Time       `json:"at"`
	State  string          `json:"state"`
	Writer journal.Process `json:"writer"`
	By     string          `json:"by,omitempty"`
	Note   string          `json:"note,omitempty"`
}

// A sessionCall is one session whose calls map to the execution.
type sessionCall struct {
	Session    string            `json:"session"`
	RequestIDs []json.RawMessage `json:"request_ids"`
	// Lines says what its lines about the execution were: a state, or
	// attached, in journal order.
	Lines []string `json:"lines"`
	// Client, Started, Ended and EndNote come from its session lines,
	// where a journal given has them.
	Client  *journal.SessionClient `json:"client,omitempty"`
	Started time.Time              `json:"started,omitzero"`
	Ended   time.Time              `json:"ended,omitzero"`
	EndNote string                 `json:"end_note,omitempty"`
}

// authPart: whether and when the execution was authorized.
type authPart struct {
	// Required is set when the record shows an approval asked for: it
	// awaits one, or holds its decision.
	Required bool `json:"required"`
	// Awaiting names who is asked, while the execution awaits them.
	Awaiting string `json:"awaiting,omitempty"`
	// Decision is the transition that decided it: authorized or refused.
	Decision *record.Transition `json:"decision,omitempty"`
	Note     string             `json:"note"`
}

// noApproval is what a record without a decision, and awaiting none,
// says of authorization: nothing was asked, so nothing was granted.
const noApproval = "no approval asked for: the record holds no decision"

// noDecisionJournaled is what the journals alone say of authorization,
// with no decision line and no dispatch: no line records one awaited.
const noDecisionJournaled = "the journals given tell no decision, nor whether one was asked for: no line records an approval awaited"

// authorizationOf tells whether r was approved, by whom, through what
// and why, or that it awaits a decision, or that it needed none.
func authorizationOf(r *record.Record) authPart {
	for _, t := range r.History {
		if t.State != record.Authorized && t.State != record.Refused {
			continue
		}
		note := fmt.Sprintf("%s by %s through %s", t.State, orNone(t.By), t.Via)
		if t.Note != "" {
			note += ": " + t.Note
		}
		return authPart{Required: true, Decision: &t, Note: note + " (at " + stamp(t.At) + ")"}
	}
	if r.State == record.Accepted && r.Awaiting != "" {
		note := "awaiting approval from the " + map[string]string{record.ApproverOperator: "operator", record.ApproverClient: "client's user"}[r.Awaiting] +
			" since " + stamp(r.At(record.Accepted))
		if r.Orphaned(time.Now()) {
			// As activity list marks it, and approve refuses it: a
			// decision now would reach no process.
			note += ", but its proxy went away (its lease lapsed at " + stamp(r.LeaseUntil) + "): nothing would send it, and no one can decide it; the next call of it asks again"
		}
		return authPart{Required: true, Awaiting: r.Awaiting, Note: note}
	}
	return authPart{Note: noApproval}
}

// dispatchPart: whether and when it crossed the dispatch boundary.
type dispatchPart struct {
	Accepted   time.Time  `json:"accepted,omitzero"`
	Count      int        `json:"count"`
	Dispatches []dispatch `json:"dispatches"`
}

// A dispatch is one dispatched transition of the record's history.
type dispatch struct {
	At   time.Time `json:"at"`
	Note string    `json:"note,omitempty"`
	// Writer is the process the journal names for this attempt, if a
	// journal given has its line.
	Writer *journal.Process `json:"writer,omitempty"`
}

// answerPart: what the upstream answered, or that nothing was observed.
type answerPart struct {
	State record.State `json:"state"`
	// Observed is false while in flight, when the outcome is unknown,
	// when an operator resolved it, and when its approval was refused:
	// nothing was sent.
	Observed bool `json:"observed"`
	// Resolved is set when an operator resolved the execution (activity
	// resolve): its state is the operator's word, and a result the
	// operator's text.
	Resolved bool `json:"resolved,omitempty"`
	// Settles are the transitions to completed, failed or unknown.
	Settles []record.Transition `json:"settles"`
	Result  string              `json:"result,omitempty"` // a summary
	Error   json.RawMessage     `json:"error,omitempty"`  // the JSON-RPC error, as stored
	// Fenced are the answers the journals given hold that the store
	// refused: they came to a process after its lease lapsed and
	// another settled or took over the execution.
	Fenced []fencedAnswer `json:"fenced,omitempty"`
}

// A fencedAnswer is an outcome a journal line keeps that the store
// refused (journal.Fenced).
type fencedAnswer struct {
	At     time.Time       `json:"at"`
	Writer journal.Process `json:"writer"`
	Note   string          `json:"note"`
}

// callersPart: which callers got the result and which did not.
type callersPart struct {
	Journaled bool     `json:"journaled"`
	Callers   []caller `json:"callers"`
	// Attached is the record's count of callers that joined it.
	Attached int `json:"attached"`
	// Delivered is when the record says a transport first took the result.
	Delivered time.Time `json:"delivered,omitzero"`
}

// A caller is one request that started or joined the execution.
type caller struct {
	At        time.Time       `json:"at"`
	Session   string          `json:"session,omitempty"`
	RequestID json.RawMessage `json:"request_id,omitempty"`
	// How is started, or how it joined (journal.Attach.How).
	How string `json:"how"`
	// Got is what it got (journal.Attach.Got), or not_journaled for
	// the caller that started it with no line of what it got.
	Got   string `json:"got"`
	Taken bool   `json:"taken"`
	Error string `json:"error,omitempty"`
}

// laterPart: whether a later call attached to it, carried a client key,
// or started a fresh execution.
type laterPart struct {
	Attached  int  `json:"attached"`
	ClientKey bool `json:"client_key"`
	// Related are the store's other executions of the same fingerprint;
	// Searched says which executions were looked at, and Truncated that
	// the search hit its bound.
	Related   []related `json:"related"`
	Searched  string    `json:"searched"`
	Truncated bool      `json:"truncated"`
}

// A related execution has the same fingerprint.
type related struct {
	ID        string       `json:"id"`
	State     record.State `json:"state"`
	Accepted  time.Time    `json:"accepted"`
	ClientKey bool         `json:"client_key"`
	Later     bool         `json:"later"` // accepted after this one
}

// relatedBound is how many executions of the same fingerprint activity
// show reads at most.
const relatedBound = 1000

// show prints the timeline of execution a.pos[0]; with a nil store (the
// memory store, gone with its proxy), from the journals alone.
func (a *activityArgs) show(ctx context.Context, store record.Store, stdout, stderr io.Writer) error {
	id := a.pos[0]
	r, err := (*record.Record)(nil), fmt.Errorf("%s: %w", id, record.ErrNotFound)
	if store != nil {
		r, err = store.Get(ctx, id)
	}
	// A record past its retention is gone from the store, and its
	// journal lines are then all that tells of it.
	gone := errors.Is(err, record.ErrNotFound) && len(a.journals) > 0
	switch {
	case errors.Is(err, record.ErrNotFound) && !gone:
		// The store names the id; say which store was asked.
		return fmt.Errorf("%w in --store %s", err, storeShown(a.store))
	case err != nil && !gone:
		return err
	}
	lines, torn, jerr := readJournals(a.journals, id)
	if jerr != nil {
		return jerr
	}
	for _, path := range torn {
		// Left out without a word, a line cut short by a crash would
		// pass for one never written.
		fmt.Fprintf(stderr, "%s: warning: its last line is torn (it does not end in a newline) and was left out: a proxy is writing it, or its write was cut short, as by a crash or a full disk (audit verify %s names it)\n", escapeControls(path), escapeControls(path))
	}
	if gone {
		if r = recordOfJournal(id, lines); r == nil && store == nil {
			return fmt.Errorf("%w: no line of the journals given names it", err)
		} else if r == nil {
			return fmt.Errorf("%w in --store %s, and no line of the journals given names it", err, storeShown(a.store))
		}
	}
	tl := &timeline{Record: r}
	tl.memory = store == nil
	tl.FromJournal = gone
	tl.Shadow = intercept.ShadowOwner(r.Owner)
	tl.Sessions = sessionsOf(r, lines, len(a.journals) > 0)
	tl.Authorized = authorizationOf(r)
	tl.Dispatch = dispatchesOf(r, lines)
	if gone && tl.Authorized.Decision == nil && tl.Dispatch.Count == 0 && (r.State == "" || r.State == record.Accepted) {
		// No line records an approval awaited: one told from the
		// journals before its dispatch may await one all the same.
		tl.Authorized.Note = noDecisionJournaled
	}
	tl.Answer = answerOf(r)
	for _, e := range lines {
		if e.Execution == r.ID && e.Event == journal.Fenced {
			tl.Answer.Fenced = append(tl.Answer.Fenced, fencedAnswer{At: e.Time, Writer: e.Writer, Note: e.Note})
		}
	}
	tl.Callers = callersOf(r, lines, len(a.journals) > 0)
	if tl.Later, err = laterOf(ctx, store, r); err != nil {
		return err
	}
	if a.json {
		if err := notJSON(r); err != nil {
			return err
		}
		return writeJSON(stdout, tl)
	}
	printTimeline(stdout, tl)
	return nil
}

// recordOfJournal is what the journal lines tell of execution id, for
// one the store no longer holds: its identity, its transitions, who ran
// it, and how many callers joined it. It is nil if no line names id.
func recordOfJournal(id string, lines []journal.Entry) *record.Record {
	var r *record.Record
	for _, e := range lines {
		if e.Execution != id {
			continue
		}
		if r == nil {
			r = &record.Record{ID: id}
		}
		r.Tool, r.Actor, r.Scope = cmp.Or(r.Tool, e.Tool), cmp.Or(r.Actor, e.Actor), cmp.Or(r.Scope, e.Scope)
		r.Upstream, r.Fingerprint = cmp.Or(r.Upstream, e.Upstream), cmp.Or(r.Fingerprint, e.Fingerprint)
		r.Attempts = max(r.Attempts, e.Attempt)
		if e.Attach != nil && e.Attach.How != journal.JoinedKey {
			// A call refused for its client key did not join it: the
			// store counts it nowhere.
			r.Attached++
		}
		st := record.State(e.State)
		if st == "" || st == record.Delivered && !r.At(record.Delivered).IsZero() {
			continue // an attach, or a delivery after the first: not a transition
		}
		if (st == record.Authorized || st == record.Refused) && !r.At(st).IsZero() {
			// An operator's decision is journaled by activity approve
			// or deny and again by the proxy that acts on it: the
			// store took it once.
			continue
		}
		if st == record.Dispatched && r.Owner == "" {
			r.Owner = e.Writer.Owner
		}
		r.State = st
		r.History = append(r.History, record.Transition{State: st, At: e.Time, Note: e.Note, By: e.By, Via: e.Via})
	}
	return r
}

// readJournals checks the chain of each journal file and returns the
// lines of all of them that name execution id, and the session lines of
// the sessions those name, merged by time. A proxy may be writing a
// file: its torn last line, being written, is left out, and the file
// named in torn. A line in more than one file (a journal given twice,
// or a copy of it beside it) is read once: each line holds the hash of
// the one before it, so two journals share a line only if one is a
// copy of the other.
//
// Each file is read twice: first for the sessions that name id, then for
// the lines kept. A session's start comes before its calls, so one pass
// would keep the lines of every session, as many as a busy proxy's
// journal holds clients, to find the few it needs.
func readJournals(paths []string, id string) (_ []journal.Entry, torn []string, _ error) {
	files := make([]*checkedJournal, 0, len(paths))
	defer func() {
		for _, j := range files {
			j.f.Close()
		}
	}()
	named := make(map[string]bool)
	for _, path := range paths {
		j, err := openCheckedJournal(path)
		if err != nil {
			return nil, nil, fmt.Errorf("--journal: %w", err)
		}
		files = append(files, j)
		if err := j.sessionsNaming(id, named); err != nil {
			return nil, nil, fmt.Errorf("--journal: %w", err)
		}
	}
	delete(named, "") // lines that name no session
	entries := make([][]journal.Entry, len(files))
	seen := make(map[[sha256.Size]byte]bool)
	for i, j := range files {
		if _, err := j.f.Seek(0, io.SeekStart); err != nil {
			return nil, nil, fmt.Errorf("--journal: reading journal %s: %w", j.path, err)
		}
		es, tornTail, err := readEntries(j.f, j.path, j.lines, id, named, seen)
		if err != nil {
			return nil, nil, fmt.Errorf("--journal: %w", err)
		}
		if tornTail {
			torn = append(torn, j.path)
		}
		entries[i] = es
	}
	return mergeByTime(entries), torn, nil
}

// mergeByTime merges the lines of several journals by time, keeping each
// journal's own order: a line's time is taken before the line waits its
// turn to be written, so two lines of one journal may be out of time
// order by a little, and the file's order is the one the store took.
func mergeByTime(files [][]journal.Entry) []journal.Entry {
	var out []journal.Entry
	for {
		next := -1
		for i, es := range files {
			if len(es) > 0 && (next < 0 || es[0].Time.Before(files[next][0].Time)) {
				next = i
			}
		}
		if next < 0 {
			return out
		}
		out = append(out, files[next][0])
		files[next] = files[next][1:]
	}
}

// journalChecked is called between the check of a journal and its
// read; tests replace the file there.
var journalChecked = func(path string) {}

// A checkedJournal is a journal file whose first lines verified. It is
// read from the file checked: one renamed over it meanwhile, as a
// rotation does, holds lines that did not verify.
type checkedJournal struct {
	path  string
	f     *os.File
	lines int // lines that verify
}

// openCheckedJournal opens and checks the journal at path.
func openCheckedJournal(path string) (*checkedJournal, error) {
	f, err := journal.OpenRead(path)
	if err != nil {
		return nil, fmt.Errorf("verifying journal: %w", err)
	}
	rep, err := checkFile(f, path, journal.CheckOptions{StopAtTorn: true})
	if err != nil {
		f.Close()
		return nil, err
	}
	journalChecked(path)
	return &checkedJournal{path: path, f: f, lines: rep.Lines}, nil
}

// sessionsNaming adds to named the sessions of j's lines that name
// execution id.
func (j *checkedJournal) sessionsNaming(id string, named map[string]bool) error {
	if _, err := j.f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("reading journal %s: %w", j.path, err)
	}
	br := bufio.NewReader(j.f)
	for i := 1; i <= j.lines; i++ {
		line, err := br.ReadBytes('\n')
		if err != nil {
			return fmt.Errorf("reading journal %s: line %d: %w", j.path, i, err)
		}
		var e struct{ Execution, Session string }
		if err := json.Unmarshal(line, &e); err != nil {
			return fmt.Errorf("%s:%d: not a journal line: %w", j.path, i, err)
		}
		if e.Execution == id {
			named[e.Session] = true
		}
	}
	return nil
}

// readEntries reads the first n lines of r, the journal at path, which
// verified, and returns as entries those that name execution id, and the
// session lines of the sessions in named, but for the lines in seen, to
// which it adds those it returns. The rest are not kept: a journal of a
// year holds millions of lines, and an execution a few. torn reports
// that the file goes on past them with a torn line: bytes with no
// newline after them. Whole lines a proxy added since the check are not
// read, and not torn.
func readEntries(r io.Reader, path string, n int, id string, named map[string]bool, seen map[[sha256.Size]byte]bool) (_ []journal.Entry, torn bool, _ error) {
	br := bufio.NewReader(r)
	var es []journal.Entry
	for i := 1; i <= n; i++ {
		line, err := br.ReadBytes('\n')
		if err != nil {
			return nil, false, fmt.Errorf("reading journal %s: line %d: %w", path, i, err)
		}
		var e journal.Entry
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, false, fmt.Errorf("%s:%d: not a journal line: %w", path, i, err)
		}
		if e.Execution != id && (e.Execution != "" || !named[e.Session] || e.Event != journal.SessionStart && e.Event != journal.SessionEnd) {
			continue
		}
		sum := sha256.Sum256(line)
		if seen[sum] {
			continue
		}
		seen[sum] = true
		es = append(es, e)
	}
	return es, tornAfter(br), nil
}

// tornAfter reports whether br holds bytes with no newline after them,
// looking no further than its first line. The bytes are not kept: the
// tail a crash left may be hundreds of megabytes.
func tornAfter(br *bufio.Reader) bool {
	some := false
	for {
		chunk, err := br.ReadSlice('\n')
		some = some || len(chunk) > 0
		if !errors.Is(err, bufio.ErrBufferFull) {
			return errors.Is(err, io.EOF) && some
		}
	}
}

// sessionsOf answers the first question from the journal lines: the
// sessions the execution's lines name, in the order they first appear,
// each joined to its own session lines.
func sessionsOf(r *record.Record, lines []journal.Entry, journaled bool) sessionsPart {
	p := sessionsPart{Journaled: journaled, Actor: r.Actor, Scope: r.Scope, Sessions: []sessionCall{}, Outside: []outsideLine{}}
	index := make(map[string]int)
	for _, e := range lines {
		if e.Execution == "" {
			continue // a session line
		}
		if e.Session == "" && e.Request == "" {
			p.Outside = append(p.Outside, outsideLine{At: e.Time, State: cmp.Or(e.State, e.Event), Writer: e.Writer, By: e.By, Note: e.Note})
			continue
		}
		// A line with a request and no session is a call's, written
		// before lines named their session: it goes under the session
		// "", rather than among the transitions no session made.
		i, ok := index[e.Session]
		if !ok {
			i = len(p.Sessions)
			index[e.Session] = i
			p.Sessions = append(p.Sessions, sessionCall{Session: e.Session, RequestIDs: []json.RawMessage{}})
		}
		s := &p.Sessions[i]
		if id := requestOf(&e); len(id) > 0 && !slices.ContainsFunc(s.RequestIDs, func(o json.RawMessage) bool { return string(o) == string(id) }) {
			s.RequestIDs = append(s.RequestIDs, id)
		}
		what := cmp.Or(e.State, e.Event)
		if e.Attach != nil {
			what += " (" + e.Attach.How + ")"
		}
		s.Lines = append(s.Lines, what)
	}
	for _, e := range lines {
		i, ok := index[e.Session]
		if !ok || e.Execution != "" {
			continue
		}
		s := &p.Sessions[i]
		switch e.Event {
		case journal.SessionStart:
			s.Client, s.Started = e.Client, e.Time
		case journal.SessionEnd:
			s.Ended, s.EndNote = e.Time, e.Note
			s.Client = cmp.Or(s.Client, e.Client)
		}
	}
	return p
}

// dispatchesOf answers the third question from the record's history,
// naming the process of each attempt where the journal does.
func dispatchesOf(r *record.Record, lines []journal.Entry) dispatchPart {
	writers := make(map[int]journal.Process)
	for _, e := range lines {
		if e.State == string(record.Dispatched) && e.Attempt > 0 && e.Writer != (journal.Process{}) {
			writers[e.Attempt] = e.Writer
		}
	}
	p := dispatchPart{Accepted: r.At(record.Accepted), Dispatches: []dispatch{}}
	for _, h := range r.History {
		if h.State != record.Dispatched {
			continue
		}
		p.Count++
		d := dispatch{At: h.At, Note: h.Note}
		if w, ok := writers[p.Count]; ok {
			d.Writer = &w
		}
		p.Dispatches = append(p.Dispatches, d)
	}
	return p
}

// answerOf answers the fourth question from the record.
func answerOf(r *record.Record) answerPart {
	p := answerPart{State: r.State, Settles: []record.Transition{}, Error: r.Error}
	for _, h := range r.History {
		if h.State == record.Completed || h.State == record.Failed || h.State == record.Unknown {
			p.Settles = append(p.Settles, h)
		}
	}
	if n := len(p.Settles); n > 0 {
		p.Resolved = p.Settles[n-1].Via == record.ApproverOperator
	}
	p.Observed = r.State.Settled() && r.State != record.Unknown && r.State != record.Refused && !p.Resolved
	if r.Result != nil {
		p.Result = resultSummary(r.Result)
	}
	return p
}

// resultSummary says how big a tool's result is and whether the tool
// said it failed, and no more: what it holds is the policy's to show.
func resultSummary(result json.RawMessage) string {
	var res struct {
		IsError bool `json:"isError"`
	}
	_ = json.Unmarshal(result, &res) // a result that is no object says isError false
	return fmt.Sprintf("%d bytes, isError %t", len(result), res.IsError)
}

// joinedUnsaid is the How of a caller that joined the execution on a
// line written before lines said how.
const joinedUnsaid = "joined"

// requestOf is the JSON-RPC id of the request behind e. A line written
// before lines named it apart has only request, the id as logs name it:
// its JSON text, but for a string's escapes.
func requestOf(e *journal.Entry) json.RawMessage {
	if len(e.RequestID) > 0 || e.Request == "" {
		return e.RequestID
	}
	if json.Valid([]byte(e.Request)) {
		return json.RawMessage(e.Request)
	}
	b, _ := json.Marshal(e.Request) // a string always encodes
	return b
}

// notJournaled is the Got of the caller that started an execution when
// no line says what it got: neither it nor whether its transport took it
// is known.
const notJournaled = "not_journaled"

// callersOf answers the fifth question: the journal's delivered and
// attached lines, and the caller that started the execution.
func callersOf(r *record.Record, lines []journal.Entry, journaled bool) callersPart {
	p := callersPart{Journaled: journaled, Callers: []caller{}, Attached: r.Attached, Delivered: r.At(record.Delivered)}
	var starter *journal.Entry
	starterGot := false
	for i, e := range lines {
		if e.State == string(record.Accepted) && starter == nil {
			starter = &lines[i]
		}
		if e.Execution == "" || e.State != string(record.Delivered) && e.Event != journal.Attached {
			continue
		}
		c := caller{At: e.Time, Session: e.Session, RequestID: requestOf(&e), How: "started", Got: journal.GotAnswer, Taken: true}
		switch a := e.Attach; {
		case a != nil:
			c.How, c.Got, c.Taken, c.Error = a.How, a.Got, a.Taken, a.Error
		case e.Session == "" && starter != nil && string(c.RequestID) != string(requestOf(starter)):
			// A line written before lines said how a caller joined:
			// another request's delivery joined it, somehow.
			c.How = joinedUnsaid
		default:
			starterGot = true
		}
		p.Callers = append(p.Callers, c)
	}
	if starter != nil && !starterGot {
		// The caller that started it got an error, unknown, or nothing
		// its transport took: no line says which.
		p.Callers = slices.Insert(p.Callers, 0, caller{At: starter.Time, Session: starter.Session,
			RequestID: requestOf(starter), How: "started", Got: notJournaled})
	}
	return p
}

// laterOf answers the sixth question: the record's attach count and key,
// and the store's other executions of its fingerprint within twice its
// retention either side of its acceptance.
func laterOf(ctx context.Context, store record.Store, r *record.Record) (laterPart, error) {
	// A record told from the journals alone has no key, but its scope
	// is "key" exactly when its calls carried one.
	clientKey := strings.HasPrefix(r.Key, "key:") || r.Scope == string(policy.ScopeKey)
	p := laterPart{Attached: r.Attached, ClientKey: clientKey, Related: []related{}}
	lister, ok := store.(record.Lister)
	switch {
	case store == nil:
		p.Searched = "nothing: the memory store kept them inside the proxy's process"
		return p, nil
	case !ok:
		p.Searched = "nothing: the store cannot list its executions"
		return p, nil
	}
	accepted := r.At(record.Accepted)
	f := record.Filter{Tool: r.Tool, Fingerprint: r.Fingerprint, Limit: relatedBound}
	var until time.Time
	// Twice the retention: one accepted earlier replays for its
	// retention from when it settled, and one that ran long replayed
	// until close to this one's acceptance.
	window := 2 * r.Retention
	if r.Retention > 0 && !accepted.IsZero() {
		f.Since, until = accepted.Add(-window), accepted.Add(window)
	}
	recs, err := lister.List(ctx, f)
	if err != nil {
		return p, fmt.Errorf("listing the executions of %s: %w", r.Tool, err)
	}
	p.Truncated = len(recs) == relatedBound
	p.Searched = "the store's executions of " + r.Tool
	if !f.Since.IsZero() {
		p.Searched += fmt.Sprintf(" accepted from %s to %s (twice its retention, %s, either side)",
			stamp(f.Since), stamp(until), window)
	}
	for _, o := range recs {
		at := o.At(record.Accepted)
		if o.ID == r.ID || !until.IsZero() && at.After(until) {
			continue
		}
		p.Related = append(p.Related, related{ID: o.ID, State: o.State, Accepted: at,
			ClientKey: strings.HasPrefix(o.Key, "key:"), Later: o.ID > r.ID})
	}
	slices.Reverse(p.Related) // oldest first, as the rest of the timeline
	return p, nil
}

// stamp formats a time as the timeline prints it.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	// The zone, as the journal and logs are in UTC and this is in local
	// time: an investigation lines them up.
	return t.Local().Format("2006-01-02 15:04:05.000 MST")
}
