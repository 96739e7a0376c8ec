package cli

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/sqlitestore"
)

// investigation is a store and journals in which one execution of
// charge_card has a story to tell.
type investigation struct {
	store                string // the store's URL
	id, earlier, later   string // the execution, and two of its fingerprint
	otherAction          string // an execution of the tool with another fingerprint
	journals             []string
	s1, s2, stranger     string // sessions
	resultLen, attachedN int
}

// newInvestigation stores, in a new SQLite store: an execution that
// failed; the execution, under the same key, dispatched once, completed
// and delivered, with one caller attached; a later one of the same
// fingerprint under a client key; and one of another fingerprint. Its journal is two files: session s1
// started it and took the result; session s2 got a replay and, on a
// second request, waited and did not take what it got.
func newInvestigation(t *testing.T) *investigation {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "records.db")
	s, err := sqlitestore.Open(t.Context(), path, sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	in := &investigation{store: "sqlite:" + path, s1: "session:s1", s2: "session:s2", stranger: "session:s3"}
	reserve := func(key string, fp ...string) *record.Record {
		r := &record.Record{ID: record.NewID(time.Now()), Key: key, Fingerprint: cmp.Or(append(fp, "fp1")...), Actor: "alice",
			Scope: "session:s1", Tool: "charge_card", Retention: time.Hour}
		got, _, err := s.Reserve(t.Context(), r, record.ReserveOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	update := func(id string, c record.Change) {
		if _, err := s.Update(t.Context(), id, c); err != nil {
			t.Fatal(err)
		}
	}
	in.earlier = reserve("k").ID
	update(in.earlier, record.Change{To: record.Failed, Note: "owner proxy-0 went away before sending it"})
	in.id = reserve("k").ID
	result := json.RawMessage(`{"content":[{"type":"text","text":"charged"}],"isError":false}`)
	in.resultLen = len(result)
	update(in.id, record.Change{To: record.Dispatched, Note: "first send"})
	update(in.id, record.Change{To: record.Completed, Result: result})
	update(in.id, record.Change{To: record.Delivered})
	reserve("k") // attaches
	in.attachedN = 1
	in.later = reserve("key:other").ID
	in.otherAction = reserve("key:another", "fp2").ID
	in.journals = in.writeJournals(t, dir)
	return in
}

// writeJournals writes the two journals of newInvestigation: the session
// lines and s1's in one, s2's in the other, with times that interleave.
func (in *investigation) writeJournals(t *testing.T, dir string) []string {
	t0 := time.Now().Add(-time.Minute)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	exe := func(ms int, session, state string, req int) journal.Entry {
		return journal.Entry{Time: at(ms), Execution: in.id, Tool: "charge_card", State: state,
			Session: session, RequestID: json.RawMessage(fmt.Sprint(req))}
	}
	first := []journal.Entry{
		{Time: at(0), Session: in.s1, Event: journal.SessionStart, Client: &journal.SessionClient{Transport: "stdio",
			Name: "claude-code", Version: "2.1.3", Parent: &journal.Parent{PID: 17133, Command: "bash"}}},
		{Time: at(1), Session: in.stranger, Event: journal.SessionStart, Client: &journal.SessionClient{Transport: "stdio", Name: "stranger"}},
		exe(10, in.s1, "accepted", 7),
		func() journal.Entry { e := exe(11, in.s1, "dispatched", 7); e.Attempt = 1; return e }(),
		exe(20, in.s1, "completed", 7),
		exe(21, in.s1, "delivered", 7),
		{Time: at(22), Execution: "exe_other", Tool: "charge_card", State: "accepted", Session: in.stranger},
		{Time: at(90), Session: in.s1, Event: journal.SessionEnd, Note: "client closed"},
	}
	replay := exe(30, in.s2, "delivered", 3)
	replay.Attach = &journal.Attach{How: journal.JoinedReplay, Got: journal.GotAnswer, Taken: true}
	waited := exe(40, in.s2, "", 4)
	waited.Event = journal.Attached
	waited.Attach = &journal.Attach{How: journal.JoinedWaited, Got: journal.GotAnswer, Error: "client went away"}
	second := []journal.Entry{
		{Time: at(2), Session: in.s2, Event: journal.SessionStart, Client: &journal.SessionClient{Transport: "http",
			Name: "cursor", Version: "1.7.0", Remote: "127.0.0.1:34674"}},
		replay, waited,
	}
	// The second first: lines are merged by time, not read file by file.
	return []string{writeEntries(t, filepath.Join(dir, "b.jsonl"), second), writeEntries(t, filepath.Join(dir, "a.jsonl"), first)}
}

func writeEntries(t *testing.T, path string, es []journal.Entry) string {
	t.Helper()
	w, err := journal.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, e := range es {
		if err := w.Record(e); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// showArgs returns activity show's command line for in, with extra.
func (in *investigation) showArgs(extra ...string) []string {
	args := []string{"activity", "show", in.id, "--store", in.store}
	for _, j := range in.journals {
		args = append(args, "--journal", j)
	}
	return append(args, extra...)
}

// sections splits activity show's output at its headings, which must all
// be there, in order.
func sections(t *testing.T, out string) map[string]string {
	t.Helper()
	heads := []string{headSessions, headAuth, headDispatch, headAnswer, headCallers, headLater}
	got := make(map[string]string)
	rest := out
	for i, h := range heads {
		_, after, ok := strings.Cut(rest, "\n"+h+"\n")
		if !ok {
			t.Fatalf("activity show printed:\n%s\nwant the heading %q after %q", out, h, heads[max(i-1, 0)])
		}
		body := after
		if i+1 < len(heads) {
			body, _, _ = strings.Cut(after, "\n"+heads[i+1]+"\n")
		}
		got[h], rest = body, after
	}
	return got
}

// TestShowTellsTheStoryInOrder: activity show answers an investigation's
// questions in order, each with the facts of the store and of the
// journals read together.
func TestShowTellsTheStoryInOrder(t *testing.T) {
	in := newInvestigation(t)
	out, _, err := run(t, in.showArgs()...)
	if err != nil {
		t.Fatal(err)
	}
	sec := sections(t, out)
	tests := []struct {
		head string
		want []string // in this order
		not  []string
	}{
		{headSessions, []string{in.s1 + ": request 7: accepted, dispatched, completed, delivered",
			"claude-code 2.1.3 over stdio, parent pid 17133 (bash)", "(client closed)",
			in.s2 + ": request 3, 4: delivered (replay), attached (waited)", "cursor 1.7.0 over http from 127.0.0.1:34674",
			"no line of the journals given ends it: still open, or its proxy stopped without ending it"}, []string{in.stranger}},
		{headAuth, []string{noApproval}, nil},
		{headDispatch, []string{"dispatched 1 time", "attempt 1", "first send", "by "}, nil},
		{headAnswer, []string{"completed", fmt.Sprintf("result: %d bytes, isError false", in.resultLen)}, []string{"unknown"}},
		{headCallers, []string{in.s1, "request 7", "started", "got answer", "taken",
			in.s2, "request 3", "replay", "taken", in.s2, "request 4", "waited", "not taken: client went away"}, nil},
		{headLater, []string{"1 later call attached", "no client key", "among the store's executions of charge_card",
			in.earlier, "failed", "earlier", in.later, "later: a fresh execution", "client key"}, []string{in.otherAction}},
	}
	for _, tt := range tests {
		body := sec[tt.head]
		rest := body
		for _, w := range tt.want {
			i := strings.Index(rest, w)
			if i < 0 {
				t.Errorf("section %q:\n%s\nwant %q (after the facts before it)", tt.head, body, w)
				break
			}
			rest = rest[i+len(w):]
		}
		for _, n := range tt.not {
			if strings.Contains(body, n) {
				t.Errorf("section %q:\n%s\nwant no %q", tt.head, body, n)
			}
		}
	}
}

// TestShowJSON: --json gives the same as data, one member per question.
func TestShowJSON(t *testing.T) {
	in := newInvestigation(t)
	out, _, err := run(t, in.showArgs("--json")...)
	if err != nil {
		t.Fatal(err)
	}
	// The record's own members stay at the top, as scripts read them.
	var top struct {
		ID       string                     `json:"id"`
		State    record.State               `json:"state"`
		Timeline map[string]json.RawMessage `json:"timeline"`
	}
	if err := json.Unmarshal([]byte(out), &top); err != nil {
		t.Fatal(err)
	}
	if top.ID != in.id || top.State != record.Delivered {
		t.Errorf("activity show --json begins with id %q, state %q; want the record's own, %s and delivered:\n%s", top.ID, top.State, in.id, out)
	}
	for _, m := range []string{"sessions", "authorization", "dispatch", "answer", "callers", "later"} {
		if _, ok := top.Timeline[m]; !ok {
			t.Errorf("activity show --json has no timeline member %q:\n%s", m, out)
		}
	}
	var tl timeline
	if err := json.Unmarshal([]byte(out), &tl); err != nil {
		t.Fatal(err)
	}
	ss := tl.Sessions.Sessions
	if len(ss) != 2 || ss[0].Session != in.s1 || ss[0].Client == nil || ss[0].Client.Name != "claude-code" || ss[1].Session != in.s2 {
		t.Errorf("sessions = %+v; want s1 (claude-code), then s2", ss)
	}
	if tl.Authorized.Required || tl.Authorized.Note != noApproval {
		t.Errorf("authorization = %+v; want none required", tl.Authorized)
	}
	if tl.Dispatch.Count != 1 || len(tl.Dispatch.Dispatches) != 1 || tl.Dispatch.Dispatches[0].Note != "first send" {
		t.Errorf("dispatch = %+v; want one, its note first send", tl.Dispatch)
	}
	if !tl.Answer.Observed || tl.Answer.State != record.Delivered || !strings.HasPrefix(tl.Answer.Result, fmt.Sprint(in.resultLen)) {
		t.Errorf("answer = %+v; want an observed result of %d bytes", tl.Answer, in.resultLen)
	}
	cs := tl.Callers.Callers
	if len(cs) != 3 || cs[0].How != "started" || !cs[0].Taken || cs[1].How != journal.JoinedReplay || !cs[1].Taken ||
		cs[2].How != journal.JoinedWaited || cs[2].Taken || cs[2].Error != "client went away" {
		t.Errorf("callers = %+v; want the starter and the replay taken, then the waiter not taken", cs)
	}
	l := tl.Later
	if l.Attached != in.attachedN || l.ClientKey || len(l.Related) != 2 || l.Related[0].ID != in.earlier || l.Related[0].Later ||
		l.Related[1].ID != in.later || !l.Related[1].Later || !l.Related[1].ClientKey {
		t.Errorf("later = %+v; want %d attached, no client key, the earlier and the later execution", l, in.attachedN)
	}
}

// TestShowWithoutAJournal: without --journal, show says only a journal
// tells the sessions and callers, and gives what the record holds.
func TestShowWithoutAJournal(t *testing.T) {
	in := newInvestigation(t)
	out, _, err := run(t, "activity", "show", in.id, "--store", in.store)
	if err != nil {
		t.Fatal(err)
	}
	sec := sections(t, out)
	if s := sec[headSessions]; !strings.Contains(s, "only a journal tells") || !strings.Contains(s, `actor "alice"`) {
		t.Errorf("sessions without a journal:\n%s\nwant that only a journal tells, and the record's actor", s)
	}
	if s := sec[headCallers]; !strings.Contains(s, "1 caller attached") {
		t.Errorf("callers without a journal:\n%s\nwant the record's count", s)
	}
}

// TestShowFindsTheFingerprintPastOthers: an earlier execution of the same
// fingerprint is found however many calls of the same tool, with other
// arguments, came between.
func TestShowFindsTheFingerprintPastOthers(t *testing.T) {
	path := filepath.Join(t.TempDir(), "records.db")
	s, err := sqlitestore.Open(t.Context(), path, sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	reserve := func(key, fp string) string {
		r := &record.Record{ID: record.NewID(time.Now()), Key: key, Fingerprint: fp, Actor: "alice",
			Scope: "session:s1", Tool: "charge_card", Retention: time.Hour}
		got, _, err := s.Reserve(t.Context(), r, record.ReserveOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return got.ID
	}
	fp1 := strings.Repeat("f1", 32) // whole, as activity list --fingerprint takes it
	earlier := reserve("k", fp1)
	if _, err := s.Update(t.Context(), earlier, record.Change{To: record.Failed, Note: "refused upstream"}); err != nil {
		t.Fatal(err)
	}
	for i := range relatedBound + 1 {
		reserve(fmt.Sprint("other-", i), fmt.Sprint("fp-other-", i))
	}
	id := reserve("k", fp1)
	out, _, err := run(t, "activity", "show", id, "--store", "sqlite:"+path, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var tl timeline
	if err := json.Unmarshal([]byte(out), &tl); err != nil {
		t.Fatal(err)
	}
	if len(tl.Later.Related) != 1 || tl.Later.Related[0].ID != earlier {
		t.Errorf("%d related executions; want only %s, with %d calls of other arguments between",
			len(tl.Later.Related), earlier, relatedBound+1)
	}
	// Upper case is the same fingerprint, not one the store lacks.
	for _, fp := range []string{fp1, strings.ToUpper(fp1)} {
		out, _, err = run(t, "activity", "list", "--store", "sqlite:"+path, "--fingerprint", fp, "--json")
		if err != nil {
			t.Fatal(err)
		}
		var recs []*record.Record
		if err := json.Unmarshal([]byte(out), &recs); err != nil {
			t.Fatal(err)
		}
		if len(recs) != 2 || recs[0].ID != id || recs[1].ID != earlier {
			t.Errorf("activity list --fingerprint %s gave %d executions; want %s and %s", fp, len(recs), id, earlier)
		}
	}
}

// TestShowRefusesBadInput: an unknown execution, a journal that cannot
// be read and one that fails its chain are errors that name what is
// wrong, exit 1.
func TestShowRefusesBadInput(t *testing.T) {
	in := newInvestigation(t)
	tampered := in.journals[1]
	b, err := os.ReadFile(tampered)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	lines[2] = strings.Replace(lines[2], `"accepted"`, `"dispatched"`, 1)
	if err := os.WriteFile(tampered, []byte(strings.Join(lines, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "none.jsonl")
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"unknown execution", []string{"activity", "show", "exe_nope", "--store", in.store}, []string{"exe_nope", "no such execution", "in --store " + in.store}},
		{"unreadable journal", []string{"activity", "show", in.id, "--store", in.store, "--journal", missing}, []string{"--journal", missing}},
		{"tampered journal", []string{"activity", "show", in.id, "--store", in.store, "--journal", tampered}, []string{"--journal", tampered + ":3:", "does not verify"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := run(t, tt.args...)
			if err == nil || ExitCode(err) != 1 {
				t.Fatalf("err = %v (exit %d); want exit 1", err, ExitCode(err))
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v; want it to name %q", err, w)
				}
			}
		})
	}
}

// TestShowReadsALineOnce: a journal given twice, or beside a copy of
// itself, as a glob catching a backup gives, tells the story once.
func TestShowReadsALineOnce(t *testing.T) {
	in := newInvestigation(t)
	want, _, err := run(t, in.showArgs("--json")...)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(in.journals[0])
	if err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(t.TempDir(), "backup.jsonl")
	if err := os.WriteFile(backup, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, extra := range []string{in.journals[0], backup} {
		args := append(in.showArgs("--json"), "--journal", extra)
		got, _, err := run(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("activity show with %s given again:\n%s\nwant, as with each journal once:\n%s", extra, got, want)
		}
	}
}

// TestShowStarterWithoutALine: the caller that started an execution that
// failed has no line of what it got; show says so, and does not say its
// transport did not take it.
func TestShowStarterWithoutALine(t *testing.T) {
	dir, path, r := failedExecution(t)
	t0 := time.Now().Add(-time.Minute)
	var es []journal.Entry
	for i, state := range []string{"accepted", "dispatched", "failed"} {
		es = append(es, journal.Entry{Time: t0.Add(time.Duration(i) * time.Millisecond), Execution: r.ID, Tool: "charge_card",
			State: state, Session: "session:s1", RequestID: json.RawMessage("5")})
	}
	j := writeEntries(t, filepath.Join(dir, "j.jsonl"), es)
	out, _, err := run(t, "activity", "show", r.ID, "--store", "sqlite:"+path, "--journal", j)
	if err != nil {
		t.Fatal(err)
	}
	callers := sections(t, out)[headCallers]
	if !strings.Contains(callers, "request 5") || !strings.Contains(callers, "no line says what it got, nor whether it was taken") {
		t.Errorf("section %q:\n%s\nwant request 5's line saying no line tells what it got", headCallers, callers)
	}
	if strings.Contains(callers, "not taken") {
		t.Errorf("section %q:\n%s\nwant no %q: no line says so", headCallers, callers, "not taken")
	}
}

// failedExecution stores in a SQLite file of a new directory one
// execution of charge_card, dispatched then failed, and returns the
// directory, the file and the record.
func failedExecution(t *testing.T) (dir, path string, r *record.Record) {
	t.Helper()
	dir = t.TempDir()
	path = filepath.Join(dir, "records.db")
	s, err := sqlitestore.Open(t.Context(), path, sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, _, err = s.Reserve(t.Context(), &record.Record{ID: record.NewID(time.Now()), Key: "k", Fingerprint: "fp",
		Actor: "alice", Scope: "session:s1", Tool: "charge_card", Retention: time.Hour}, record.ReserveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []record.Change{{To: record.Dispatched}, {To: record.Failed, Error: json.RawMessage(`{"code":-32602,"message":"no"}`)}} {
		if _, err := s.Update(t.Context(), r.ID, c); err != nil {
			t.Fatal(err)
		}
	}
	return dir, path, r
}

// TestShowNamesTheZone: show and list print local times, and name their
// zone, as the journal's and the logs' are UTC.
func TestShowNamesTheZone(t *testing.T) {
	in := newInvestigation(t)
	local := time.Local
	time.Local = time.FixedZone("EST", -5*3600)
	t.Cleanup(func() { time.Local = local })
	out, _, err := run(t, in.showArgs()...)
	if err != nil {
		t.Fatal(err)
	}
	if accepted := sections(t, out)[headDispatch]; !regexp.MustCompile(`accepted \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} EST\n`).MatchString(accepted) {
		t.Errorf("section %q:\n%s\nwant the time of acceptance with its zone, EST", headDispatch, accepted)
	}
	if !regexp.MustCompile(`(?m)^replays until +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} EST$`).MatchString(out) {
		t.Errorf("activity show printed:\n%s\nwant until when it replays with its zone, EST, as the other times", out)
	}
	list, _, err := run(t, "activity", "list", "--store", in.store)
	if err != nil || !regexp.MustCompile(`\d\d:\d\d:\d\d EST `).MatchString(list) {
		t.Errorf("activity list = %v:\n%s\nwant times with their zone, EST", err, list)
	}
}

// TestShowQuotesWhatAClientSent: a client's name, or a tool name, that
// holds a line break or an escape is printed quoted: it cannot add a
// line that looks like the output's own, nor act on the terminal.
func TestShowQuotesWhatAClientSent(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "records.db")
	s, err := sqlitestore.Open(t.Context(), path, sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tool := "charge\ncard"
	r, _, err := s.Reserve(t.Context(), &record.Record{ID: record.NewID(time.Now()), Key: "k", Fingerprint: "fp",
		Actor: "alice", Scope: "session:s1", Tool: tool, Retention: time.Hour}, record.ReserveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	forged := "evil\n\n" + headAuth + "\n  authorized by bob through operator: \x1b[31mok"
	// A request id JSON may carry as it is: a right-to-left override,
	// which would turn the rest of its line around.
	const rlo = "\"a\u202eb\""
	j := writeEntries(t, filepath.Join(dir, "j.jsonl"), []journal.Entry{
		{Time: time.Now().Add(-time.Minute), Session: "session:s1", Event: journal.SessionStart,
			Client: &journal.SessionClient{Transport: "stdio", Name: forged}},
		{Time: time.Now().Add(-time.Minute), Execution: r.ID, Tool: tool, State: "accepted", Session: "session:s1",
			RequestID: json.RawMessage(rlo)},
	})
	store := "sqlite:" + path
	out, _, err := run(t, "activity", "show", r.ID, "--store", store, "--journal", j)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "\u202e") || !strings.Contains(out, strconv.Quote(rlo)) {
		t.Errorf("activity show:\n%s\nwant the request id %s quoted", out, strconv.Quote(rlo))
	}
	if n := strings.Count(out, "\n"+headAuth+"\n"); n != 1 || strings.Contains(out, "\x1b") || !strings.Contains(out, "client "+strconv.Quote(forged)) {
		t.Errorf("activity show:\n%s\nwant the client's name quoted, one heading %q (not %d), and no escape", out, headAuth, n)
	}
	list, _, err := run(t, "activity", "list", "--store", store)
	if err != nil || !strings.Contains(list, strconv.Quote(tool)) {
		t.Errorf("activity list = %v:\n%s\nwant the tool's name quoted, %s", err, list, strconv.Quote(tool))
	}
}

// TestShowKeepsAJournalsOrder: a line's time is taken before it waits its
// turn to be written, so a journal's lines may be out of time order by a
// little; show keeps each journal's order, which is the store's, and
// merges journals by time around it.
func TestShowKeepsAJournalsOrder(t *testing.T) {
	in := newInvestigation(t)
	t0 := time.Now().Add(-time.Minute)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var es []journal.Entry
	for _, l := range []struct {
		ms    int
		state string
	}{{10, "accepted"}, {11, "dispatched"}, {20, "completed"}, {19, "delivered"}} {
		es = append(es, journal.Entry{Time: at(l.ms), Execution: in.id, Tool: "charge_card", State: l.state,
			Session: in.s1, RequestID: json.RawMessage("7")})
	}
	j := writeEntries(t, filepath.Join(t.TempDir(), "j.jsonl"), es)
	op := writeEntries(t, filepath.Join(t.TempDir(), "op.jsonl"), []journal.Entry{
		{Time: at(15), Execution: in.id, Tool: "charge_card", State: "authorized", By: "bob"}})
	out, _, err := run(t, "activity", "show", in.id, "--store", in.store, "--journal", j, "--journal", op)
	if err != nil {
		t.Fatal(err)
	}
	if s := sections(t, out)[headSessions]; !strings.Contains(s, in.s1+": request 7: accepted, dispatched, completed, delivered\n") ||
		!strings.Contains(s, "authorized, written by") {
		t.Errorf("section %q:\n%s\nwant the journal's order: accepted, dispatched, completed, delivered; and the other journal's line", headSessions, s)
	}
}

// TestShowReadsOlderLines: lines written before lines named their writer,
// session and request id apart, and how a caller joined, are told as
// what they are: a call's lines, from a session they do not name, and
// not transitions no session made, by a process "pid 0".
func TestShowReadsOlderLines(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "records.db")
	s, err := sqlitestore.Open(t.Context(), path, sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := s.Reserve(t.Context(), &record.Record{ID: record.NewID(time.Now()), Key: "k", Fingerprint: "fp",
		Actor: "alice", Scope: "session:s1", Tool: "charge_card", Retention: time.Hour}, record.ReserveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []record.Change{{To: record.Dispatched}, {To: record.Completed, Result: json.RawMessage(`{"content":[]}`)}, {To: record.Delivered}} {
		if _, err := s.Update(t.Context(), r.ID, c); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	var lines []string
	for i, l := range []struct{ state, req string }{
		{"accepted", "7"}, {"dispatched", "7"}, {"completed", "7"}, {"delivered", "7"}, {"delivered", `"b"`},
	} {
		req, _ := json.Marshal(l.req)
		lines = append(lines, fmt.Sprintf(`"time":"%s","execution":"%s","tool":"charge_card","state":"%s","attempt":1,"request":%s}`,
			time.Now().Add(time.Duration(i-60)*time.Second).UTC().Format(time.RFC3339Nano), r.ID, l.state, req))
	}
	lines = append(lines, fmt.Sprintf(`"time":"%s","execution":"%s","tool":"charge_card","state":"unknown","note":"owner went away"}`,
		time.Now().Add(-time.Second).UTC().Format(time.RFC3339Nano), r.ID))
	j := filepath.Join(dir, "old.jsonl")
	writeChained(t, j, lines)
	out, _, err := run(t, "activity", "show", r.ID, "--store", "sqlite:"+path, "--journal", j)
	if err != nil {
		t.Fatal(err)
	}
	sec := sections(t, out)
	if s := sec[headSessions]; strings.Contains(s, "accepted, written by") || !strings.Contains(s, `request 7, "b": accepted, dispatched, completed, delivered, delivered`) {
		t.Errorf("section %q:\n%s\nwant requests 7 and \"b\" in a session not named, not outside any session", headSessions, s)
	}
	if s := sec[headSessions]; !strings.Contains(s, "unknown, written by a process the line does not name") {
		t.Errorf("section %q:\n%s\nwant the line of no request outside any session, its writer not named", headSessions, s)
	}
	if s := sec[headDispatch]; strings.Contains(s, "pid 0") {
		t.Errorf("section %q:\n%s\nwant no writer \"pid 0\": the line names none", headDispatch, s)
	}
	callers := sec[headCallers]
	for _, want := range []*regexp.Regexp{regexp.MustCompile(`request 7 +started +got answer`), regexp.MustCompile(`request "b" +joined +got answer`)} {
		if !want.MatchString(callers) {
			t.Errorf("section %q:\n%s\nwant a line matching %s", headCallers, callers, want)
		}
	}
}

// writeChained writes a journal of lines given without their prev, as
// an older version wrote them, chaining each to the one before.
func writeChained(t *testing.T, path string, bodies []string) {
	t.Helper()
	var b strings.Builder
	prev := journal.Genesis
	for _, body := range bodies {
		line := `{"prev":"` + prev + `",` + body
		sum := sha256.Sum256([]byte(line))
		prev = hex.EncodeToString(sum[:])
		b.WriteString(line + "\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestShowSaysShadow: the record of a proxy in shadow mode is marked as
// activity list marks it, and the timeline says that its callers' calls
// all went upstream, rather than tell a replay that never was.
func TestShowSaysShadow(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "records.db")
	s, err := sqlitestore.Open(t.Context(), path, sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := s.Reserve(t.Context(), &record.Record{ID: record.NewID(time.Now()), Key: "k", Fingerprint: "fp", Owner: "shadow-proxy-1",
		Actor: "alice", Scope: "session:s1", Tool: "charge_card", Retention: time.Hour}, record.ReserveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []record.Change{{To: record.Dispatched}, {To: record.Completed, Result: json.RawMessage(`{"content":[]}`)}} {
		if _, err := s.Update(t.Context(), r.ID, c); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	out, _, err := run(t, "activity", "show", r.ID, "--store", "sqlite:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^state +completed \(shadow\)$`).MatchString(out) {
		t.Errorf("activity show printed:\n%s\nwant the state marked (shadow)", out)
	}
	sec := sections(t, out)
	for _, h := range []string{headDispatch, headCallers} {
		if !strings.Contains(sec[h], "shadow mode:") {
			t.Errorf("section %q:\n%s\nwant it to say shadow mode sent every call upstream", h, sec[h])
		}
	}
	out, _, err = run(t, "activity", "show", r.ID, "--store", "sqlite:"+path, "--json")
	var tl struct {
		Timeline struct{ Shadow bool } `json:"timeline"`
	}
	if err != nil || json.Unmarshal([]byte(out), &tl) != nil || !tl.Timeline.Shadow {
		t.Errorf("activity show --json = %v, %s; want timeline.shadow true", err, out)
	}
}

// TestShowFromTheJournalAlone: an execution the store no longer holds,
// past its retention, is told from the journals that name it, saying so;
// one that neither holds is still an error.
func TestShowFromTheJournalAlone(t *testing.T) {
	in := newInvestigation(t)
	in.store = emptyStore(t)
	out, _, err := run(t, in.showArgs()...)
	if err != nil {
		t.Fatalf("activity show of an execution only the journals hold: %v", err)
	}
	if !strings.HasPrefix(out, "the store no longer holds it") || !strings.Contains(out, "state             delivered") {
		t.Errorf("activity show printed:\n%s\nwant it to say the store no longer holds it, and the state the journal tells", out)
	}
	sec := sections(t, out)
	if !strings.Contains(sec[headSessions], in.s1+": request 7: accepted, dispatched, completed, delivered") ||
		!strings.Contains(sec[headDispatch], "dispatched 1 time") || !strings.Contains(sec[headCallers], "replay") {
		t.Errorf("activity show printed:\n%s\nwant the journal's story of it", out)
	}
	// The journal of a proxy that died with it dispatched: no answer
	// is known, which is not "no answer yet".
	cut := filepath.Join(t.TempDir(), "cut.jsonl")
	writeEntries(t, cut, []journal.Entry{{Time: time.Now(), Execution: "exe_cut", Tool: "charge_card", State: "dispatched", Attempt: 1}})
	out, _, err = run(t, "activity", "show", "exe_cut", "--store", in.store, "--journal", cut)
	if a := sections(t, out)[headAnswer]; err != nil || strings.Contains(a, "no answer yet") || !strings.Contains(a, "no line of the journals given tells an answer") {
		t.Errorf("activity show of a dispatch the journal tells no answer of = %v; section %q:\n%s\nwant it to say no line tells an answer", err, headAnswer, a)
	}
	if _, _, err := run(t, "activity", "show", "exe_none", "--store", in.store, "--journal", in.journals[0]); err == nil ||
		!strings.Contains(err.Error(), "no line of the journals given names it") {
		t.Errorf("activity show of an id no one holds = %v; want an error saying no journal line names it", err)
	}
	if _, _, err := run(t, "activity", "show", in.id, "--store", in.store); err == nil {
		t.Errorf("activity show without a journal, of an id the store does not hold, succeeded")
	}
}

// TestShowOlderStarterWithoutALine: a caller that started an execution
// on an older journal's lines, which name its request only in request,
// and got no delivered line, is still told by its request id.
func TestShowOlderStarterWithoutALine(t *testing.T) {
	dir, path, r := failedExecution(t)
	var lines []string
	for i, state := range []string{"accepted", "dispatched", "failed"} {
		lines = append(lines, fmt.Sprintf(`"time":"%s","execution":"%s","tool":"charge_card","state":"%s","attempt":1,"request":"7"}`,
			time.Now().Add(time.Duration(i-60)*time.Second).UTC().Format(time.RFC3339Nano), r.ID, state))
	}
	j := filepath.Join(dir, "old.jsonl")
	writeChained(t, j, lines)
	out, _, err := run(t, "activity", "show", r.ID, "--store", "sqlite:"+path, "--journal", j)
	if err != nil {
		t.Fatal(err)
	}
	if callers := sections(t, out)[headCallers]; !regexp.MustCompile(`request 7 +started`).MatchString(callers) {
		t.Errorf("section %q:\n%s\nwant the starter as request 7", headCallers, callers)
	}
	out, _, err = run(t, "activity", "show", r.ID, "--store", "sqlite:"+path, "--journal", j, "--json")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`"request_id": *7\b`).MatchString(out) {
		t.Errorf("--json:\n%s\nwant the starter's request_id 7", out)
	}
}

// TestShowRefusedAnswer: an execution whose approval was refused was
// never sent: section 4 says so rather than stay empty, and --json
// does not claim an answer was observed.
func TestShowRefusedAnswer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "records.db")
	s, err := sqlitestore.Open(t.Context(), path, sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := s.Reserve(t.Context(), &record.Record{ID: record.NewID(time.Now()), Key: "k", Fingerprint: "fp",
		Actor: "alice", Scope: "session:s1", Tool: "create_vm", Retention: time.Hour}, record.ReserveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(t.Context(), r.ID, record.Change{To: record.Refused, By: "bob", Via: record.ApproverOperator, Note: "no"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	out, _, err := run(t, "activity", "show", r.ID, "--store", "sqlite:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if a := sections(t, out)[headAnswer]; !strings.Contains(a, "nothing was sent upstream") {
		t.Errorf("section %q:\n%s\nwant it to say nothing was sent", headAnswer, a)
	}
	out, _, err = run(t, "activity", "show", r.ID, "--store", "sqlite:"+path, "--json")
	var tl struct {
		Timeline struct {
			Answer struct{ Observed bool } `json:"answer"`
		} `json:"timeline"`
	}
	if err != nil || json.Unmarshal([]byte(out), &tl) != nil || tl.Timeline.Answer.Observed {
		t.Errorf("activity show --json = %v, %s; want timeline.answer.observed false", err, out)
	}
}
