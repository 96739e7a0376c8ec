package cli

import (
	"cmp"
	"fmt"
	"io"
	"reflect"
	"strings"
	"text/tabwriter"

	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// The headings of the timeline's sections, one per question, in order.
const (
	headSessions = "1. Which sessions sent its calls"
	headAuth     = "2. Whether it was authorized"
	headDispatch = "3. Whether it crossed the dispatch boundary"
	headAnswer   = "4. What the upstream answered"
	headCallers  = "5. Which callers got the result"
	headLater    = "6. Later calls"
)

// The notes that head the sections a record of shadow mode would
// otherwise misstate: no call was replayed or attached, each went upstream.
const (
	shadowDispatchNote = "shadow mode: these are the record's dispatches; each caller in section 5 sent its call upstream too"
	shadowCallersNote  = "shadow mode: each caller got the upstream's own answer; a replay or an attach is what the proxy would have done"
)

// printTimeline prints tl for a person: the record's fields, then one
// section per question.
func printTimeline(w io.Writer, tl *timeline) {
	makePrintable(reflect.ValueOf(tl))
	switch {
	case tl.memory:
		fmt.Fprint(w, "the memory store kept it inside the proxy's process: told from the journals alone\n\n")
	case tl.FromJournal:
		fmt.Fprint(w, "the store no longer holds it (its retention passed, or another store was given): told from the journals alone\n\n")
	}
	printFields(w, tl.Record)
	fmt.Fprintf(w, "\n%s\n", headSessions)
	printSessions(w, &tl.Sessions)
	fmt.Fprintf(w, "\n%s\n  %s\n", headAuth, tl.Authorized.Note)
	fmt.Fprintf(w, "\n%s\n", headDispatch)
	if tl.Shadow {
		fmt.Fprintln(w, "  "+shadowDispatchNote)
	}
	printDispatch(w, &tl.Dispatch, tl.FromJournal && tl.State != record.Refused)
	fmt.Fprintf(w, "\n%s\n", headAnswer)
	printAnswer(w, &tl.Answer, tl.FromJournal)
	fmt.Fprintf(w, "\n%s\n", headCallers)
	if tl.Shadow {
		fmt.Fprintln(w, "  "+shadowCallersNote)
	}
	printCallers(w, &tl.Callers)
	fmt.Fprintf(w, "\n%s\n", headLater)
	printLater(w, &tl.Later, tl.FromJournal)
}

func printSessions(w io.Writer, p *sessionsPart) {
	defer printOutside(w, p.Outside)
	switch {
	case !p.Journaled:
		fmt.Fprintf(w, "  only a journal tells (give --journal FILE); the record names actor %q, scope %q\n", p.Actor, p.Scope)
		return
	case len(p.Sessions) == 0:
		fmt.Fprintf(w, "  no session line names it in the journals given; the record names actor %q, scope %q\n", p.Actor, p.Scope)
		return
	}
	for _, s := range p.Sessions {
		ids := make([]string, len(s.RequestIDs))
		for i, id := range s.RequestIDs {
			ids[i] = printable(string(id))
		}
		if s.Session == "" {
			fmt.Fprintf(w, "  sessions not named: request %s: %s\n", strings.Join(ids, ", "), strings.Join(s.Lines, ", "))
			fmt.Fprintln(w, "    lines written before lines named their session")
			continue
		}
		fmt.Fprintf(w, "  %s: request %s: %s\n", s.Session, strings.Join(ids, ", "), strings.Join(s.Lines, ", "))
		fmt.Fprintf(w, "    client %s\n", clientText(s.Client))
		if !s.Started.IsZero() {
			fmt.Fprintf(w, "    started %s\n", stamp(s.Started))
		}
		switch {
		case !s.Ended.IsZero():
			fmt.Fprintf(w, "    ended %s (%s)\n", stamp(s.Ended), s.EndNote)
		case !s.Started.IsZero():
			// A proxy killed (kill -9, a crash) writes no end line.
			fmt.Fprintln(w, "    no line of the journals given ends it: still open, or its proxy stopped without ending it, as when killed")
		}
	}
}

// printOutside prints the transitions no session made, with who made
// them.
func printOutside(w io.Writer, lines []outsideLine) {
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(w, "  outside any session:")
	for _, l := range lines {
		who := strings.TrimSpace(fmt.Sprintf("%s pid %d", l.Writer.Host, l.Writer.PID))
		switch {
		case l.Writer == (journal.Process{}):
			who = "a process the line does not name (written before lines named it)"
		case l.Writer.Operator != "":
			who = "operator " + l.Writer.Operator + " on " + who
		case l.Writer.Owner != "":
			who = l.Writer.Owner + " on " + who
		}
		note := l.Note
		if l.By != "" {
			note = strings.TrimSuffix("by "+l.By+": "+note, ": ")
		}
		fmt.Fprintf(w, "    %s  %s, written by %s: %s\n", stamp(l.At), l.State, who, note)
	}
}

// clientText says who a session's client is, as its session line does.
func clientText(c *journal.SessionClient) string {
	if c == nil {
		return "unknown: no session_start line in the journals given"
	}
	s := strings.TrimSpace(c.Name + " " + c.Version)
	if s == "" {
		s = "(no clientInfo)"
	}
	s += " over " + c.Transport
	if c.Remote != "" {
		s += " from " + c.Remote
	}
	if p := c.Parent; p != nil {
		s += fmt.Sprintf(", parent pid %d", p.PID)
		if p.Command != "" {
			s += " (" + p.Command + ")"
		}
	}
	if c.Protocol != "" {
		s += ", protocol " + c.Protocol
	}
	return s
}

// printDispatch prints p; partial says the journals alone told it, and
// may lack the lines of its dispatches.
func printDispatch(w io.Writer, p *dispatchPart, partial bool) {
	fmt.Fprintf(w, "  accepted %s\n", stamp(p.Accepted))
	switch {
	case p.Count == 0 && partial:
		// The journal of the proxy that sent it may not be among them,
		// as when the one given only joined it.
		fmt.Fprintln(w, "  no line of the journals given tells it was dispatched: the line of its dispatch may be in a journal not given")
		return
	case p.Count == 0:
		fmt.Fprintln(w, "  never dispatched: nothing was sent upstream")
		return
	}
	fmt.Fprintf(w, "  dispatched %s:\n", count(p.Count, "time"))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for i, d := range p.Dispatches {
		by := ""
		if d.Writer != nil {
			by = strings.TrimSpace(fmt.Sprintf("by %s pid %d %s", d.Writer.Host, d.Writer.PID, d.Writer.Owner))
		}
		fmt.Fprintln(tw, row("    "+stamp(d.At), fmt.Sprintf("attempt %d", i+1), d.Note, by))
	}
	tw.Flush()
}

// printAnswer prints p; fromJournal says the journals alone told it.
func printAnswer(w io.Writer, p *answerPart, fromJournal bool) {
	for _, h := range p.Settles {
		fmt.Fprintln(w, strings.TrimRight(fmt.Sprintf("  %s %s %s", h.State, stamp(h.At), h.Note), " "))
	}
	for _, f := range p.Fenced {
		fmt.Fprintf(w, "  fenced %s by %s pid %d %s: %s\n", stamp(f.At), f.Writer.Host, f.Writer.PID, f.Writer.Owner, f.Note)
	}
	switch {
	case p.State == record.Unknown && len(p.Fenced) > 0:
		// The record could not take the answer; the journal kept it.
		fmt.Fprintln(w, "  the record says unknown; a journal keeps the answer a process got after its lease lapsed (above)")
	case p.State == "" && fromJournal:
		// Its lines in the journals given only say callers joined it.
		fmt.Fprintln(w, "  no line of the journals given tells a state of it: they tell only callers that joined it")
	case p.State.InFlight() && fromJournal:
		// The journals end there: the process may have died, or the
		// line of its answer be in a journal not given.
		fmt.Fprintf(w, "  no line of the journals given tells an answer: the last tells it %s\n", p.State)
	case p.State.InFlight():
		fmt.Fprintf(w, "  no answer yet: it is %s\n", p.State)
	case p.State == record.Unknown:
		fmt.Fprintln(w, "  nothing observed: the outcome is unknown, and the action may have happened")
	case p.State == record.Refused:
		fmt.Fprintln(w, "  nothing observed: its approval was refused, and nothing was sent upstream")
	case p.Resolved:
		fmt.Fprintf(w, "  nothing observed: an operator resolved it as %s (activity resolve)\n", p.Settles[len(p.Settles)-1].State)
	case p.Error != nil:
		fmt.Fprintf(w, "  JSON-RPC error %s\n", printable(strings.TrimSpace(string(p.Error))))
	case p.Result != "":
		fmt.Fprintf(w, "  result: %s\n", p.Result)
	}
}

func printCallers(w io.Writer, p *callersPart) {
	if !p.Journaled {
		fmt.Fprintf(w, "  only a journal tells each caller (give --journal FILE); the record counts %s attached\n", count(p.Attached, "caller"))
		if !p.Delivered.IsZero() {
			fmt.Fprintf(w, "  a transport took the result at %s\n", stamp(p.Delivered))
		}
		return
	}
	if len(p.Callers) == 0 {
		fmt.Fprintf(w, "  no caller's line in the journals given; the record counts %s attached\n", count(p.Attached, "caller"))
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range p.Callers {
		got, taken := "got "+c.Got, "taken"
		switch {
		case c.Got == notJournaled:
			// No line tells either: "not taken" would claim what is unknown.
			got, taken = "got ?", "no line says what it got, nor whether it was taken"
		case !c.Taken:
			taken = "not taken"
		}
		if c.Error != "" {
			taken += ": " + c.Error
		}
		fmt.Fprintf(tw, "  %s\t%s\trequest %s\t%s\t%s\t%s\n", stamp(c.At), cmp.Or(c.Session, "session not named"), printable(string(c.RequestID)), c.How, got, taken)
	}
	tw.Flush()
}

func printLater(w io.Writer, p *laterPart, fromJournal bool) {
	whose := "the record's count"
	if fromJournal {
		whose = "the journals' count: the lines given that say a caller joined it"
	}
	fmt.Fprintf(w, "  %s attached to it (%s)\n", count(p.Attached, "later call"), whose)
	if p.ClientKey {
		fmt.Fprintln(w, "  it carried a client key: calls with the same key match it")
	} else {
		fmt.Fprintln(w, "  no client key: calls match it on their fingerprint")
	}
	fmt.Fprintf(w, "  other executions of the same fingerprint, among %s:\n", p.Searched)
	if len(p.Related) == 0 {
		fmt.Fprintln(w, "    none")
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, o := range p.Related {
		when, key := "earlier", ""
		if o.Later {
			when = "later: a fresh execution"
		}
		if o.ClientKey {
			key = "client key"
		}
		fmt.Fprintln(tw, row("    "+o.ID, string(o.State), "accepted "+stamp(o.Accepted), when, key))
	}
	tw.Flush()
	if p.Truncated {
		fmt.Fprintf(w, "  the search stopped at %d executions: older ones may be missing\n", relatedBound)
	}
}

// row joins the cells of a tabwriter row, leaving out the empty ones at
// its end, which would pad it with spaces.
func row(cells ...string) string {
	for len(cells) > 0 && cells[len(cells)-1] == "" {
		cells = cells[:len(cells)-1]
	}
	return strings.Join(cells, "\t")
}
