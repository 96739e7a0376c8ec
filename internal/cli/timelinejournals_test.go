package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/sqlitestore"
)

// emptyStore returns the --store URL of a SQLite store a proxy made and
// that holds no record: one that tells an execution from its journals.
func emptyStore(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "empty.db")
	s, err := sqlitestore.Open(t.Context(), path, sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	return "sqlite:" + path
}

// TestShowFromTheJournalsDecidedOnce: an operator's decision is in the
// operator's journal and in the proxy's, which journals it as it acts on
// it; told from both journals alone, the history holds it once, as the
// store's would.
func TestShowFromTheJournalsDecidedOnce(t *testing.T) {
	dir := t.TempDir()
	store := emptyStore(t)
	t0 := time.Now()
	exe := func(ms int, state string) journal.Entry {
		return journal.Entry{Time: t0.Add(time.Duration(ms) * time.Millisecond), Execution: "exe_d", Tool: "create_vm", State: state,
			Session: "session:s1", RequestID: json.RawMessage("1")}
	}
	decided := func(e journal.Entry) journal.Entry {
		e.By, e.Via, e.Note = "bob", record.ApproverOperator, "change 4711"
		return e
	}
	byOperator := decided(journal.Entry{Time: t0.Add(10 * time.Millisecond), Execution: "exe_d", Tool: "create_vm", State: "refused"})
	proxy := writeEntries(t, filepath.Join(dir, "proxy.jsonl"), []journal.Entry{exe(0, "accepted"), decided(exe(20, "refused"))})
	operator := writeEntries(t, filepath.Join(dir, "operator.jsonl"), []journal.Entry{byOperator})
	out, _, err := run(t, "activity", "show", "exe_d", "--store", store, "--journal", proxy, "--journal", operator, "--json")
	var got struct{ History []record.Transition }
	if err != nil || json.Unmarshal([]byte(out), &got) != nil {
		t.Fatalf("activity show --json = %v, %s", err, out)
	}
	var states []record.State
	for _, h := range got.History {
		states = append(states, h.State)
	}
	if !slices.Equal(states, []record.State{record.Accepted, record.Refused}) {
		t.Errorf("history told from the journals = %v; want accepted, refused: the decision once", states)
	}
}

// TestShowFromTheJournalAloneKeyed: told from the journal alone, an
// execution of a client key says it carried one, as its lines' scope
// does; and a call refused because its key named the execution is not
// one that attached to it, as the store does not count it either.
func TestShowFromTheJournalAloneKeyed(t *testing.T) {
	store := emptyStore(t)
	exe := func(state string, req int) journal.Entry {
		return journal.Entry{Time: time.Now(), Execution: "exe_k", Tool: "charge_card", State: state, Scope: "key",
			Session: "session:s1", RequestID: json.RawMessage(fmt.Sprint(req))}
	}
	refused := exe("", 5)
	refused.Event = journal.Attached
	refused.Attach = &journal.Attach{How: journal.JoinedKey, Got: journal.GotKeyRefused, Taken: true}
	replay := exe("delivered", 6)
	replay.Attach = &journal.Attach{How: journal.JoinedReplay, Got: journal.GotAnswer, Taken: true}
	j := writeEntries(t, filepath.Join(t.TempDir(), "j.jsonl"), []journal.Entry{
		exe("accepted", 4), exe("dispatched", 4), refused, exe("completed", 4), exe("delivered", 4), replay,
	})
	out, _, err := run(t, "activity", "show", "exe_k", "--store", store, "--journal", j, "--json")
	var got struct {
		Attached int
		Timeline struct {
			Later struct {
				ClientKey bool `json:"client_key"`
			} `json:"later"`
		} `json:"timeline"`
	}
	if err != nil || json.Unmarshal([]byte(out), &got) != nil || got.Attached != 1 {
		t.Errorf("activity show --json = %v, %s; want attached 1: the replay, not the call its key refused", err, out)
	}
	if !got.Timeline.Later.ClientKey {
		t.Errorf("activity show --json = %s; want timeline.later.client_key true: its lines' scope is key", out)
	}
	out, _, err = run(t, "activity", "show", "exe_k", "--store", store, "--journal", j)
	if later := sections(t, out)[headLater]; err != nil || !strings.Contains(later, "1 later call attached to it (the journals' count") {
		t.Errorf("activity show = %v; section %q:\n%s\nwant the count said to be the journals'", err, headLater, later)
	}
}

// TestShowWarnsOfATornLine: a journal whose last line is torn, as a crash
// mid-write leaves it, is read without that line, and show says so on
// stderr rather than tell the execution as if the line were never
// written. A whole journal gets no warning.
func TestShowWarnsOfATornLine(t *testing.T) {
	dir := t.TempDir()
	store := emptyStore(t)
	exe := func(state string) journal.Entry {
		return journal.Entry{Time: time.Now(), Execution: "exe_t", Tool: "charge_card", State: state,
			Session: "session:s1", RequestID: json.RawMessage("1")}
	}
	j := writeEntries(t, filepath.Join(dir, "j.jsonl"), []journal.Entry{exe("accepted"), exe("dispatched")})
	_, stderr, err := run(t, "activity", "show", "exe_t", "--store", store, "--journal", j)
	if err != nil || stderr != "" {
		t.Fatalf("activity show of a whole journal = %v, stderr %q; want no warning", err, stderr)
	}
	f, err := os.OpenFile(j, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"prev":"`) // a write cut short
	f.Close()
	out, stderr, err := run(t, "activity", "show", "exe_t", "--store", store, "--journal", j, "--json")
	if err != nil || !json.Valid([]byte(out)) {
		t.Fatalf("activity show of a journal with a torn last line = %v, %s; want the timeline of the lines before it", err, out)
	}
	if want := j + ": warning: its last line is torn"; !strings.Contains(stderr, want) {
		t.Errorf("activity show stderr = %q; want %q", stderr, want)
	}
}

// TestShowMemoryStoreFromTheJournals: the memory store's records go with
// its proxy, and its journal is then all that tells of an execution:
// show tells it from the journals, saying so, and finds no other
// executions of it, where no store is left to look in.
func TestShowMemoryStoreFromTheJournals(t *testing.T) {
	in := newInvestigation(t)
	in.store = "memory"
	out, _, err := run(t, in.showArgs()...)
	if err != nil {
		t.Fatalf("activity show --store memory with the journals: %v", err)
	}
	if !strings.HasPrefix(out, "the memory store kept it inside the proxy's process: told from the journals alone") ||
		!strings.Contains(out, "state             delivered") {
		t.Errorf("activity show printed:\n%s\nwant it told from the journals, saying the memory store kept it", out)
	}
	sec := sections(t, out)
	if !strings.Contains(sec[headSessions], in.s1+": request 7: accepted, dispatched, completed, delivered") ||
		!strings.Contains(sec[headLater], "nothing: the memory store kept them inside the proxy's process") {
		t.Errorf("activity show printed:\n%s\nwant the journal's story, and no store searched", out)
	}
	if _, _, err := run(t, "activity", "show", "exe_none", "--store", "memory", "--journal", in.journals[0]); err == nil ||
		!strings.Contains(err.Error(), "no line of the journals given names it") {
		t.Errorf("activity show --store memory of an id no journal names = %v; want an error saying so", err)
	}
	for _, args := range [][]string{
		{"activity", "show", in.id, "--store", "memory"},
		{"activity", "list", "--store", "memory"},
	} {
		if _, _, err := run(t, args...); err == nil || !strings.Contains(err.Error(), "the memory store lives inside a proxy process") {
			t.Errorf("%v = %v; want a usage error naming the memory store", args, err)
		}
	}
}

// TestShowFromAJournalThatOnlyJoined: told from the journal of a proxy
// that only joined an execution (its starter's journal not given), the
// timeline says the journals given do not tell its dispatch or answer,
// not that it was never sent upstream: a caller got its answer.
func TestShowFromAJournalThatOnlyJoined(t *testing.T) {
	joined := journal.Entry{Time: time.Now(), Execution: "exe_j", Tool: "charge_card", Event: journal.Attached,
		Session: "session:s2", RequestID: json.RawMessage("7"),
		Attach: &journal.Attach{How: journal.JoinedReplay, Got: journal.GotAnswer, Taken: true}}
	j := writeEntries(t, filepath.Join(t.TempDir(), "j.jsonl"), []journal.Entry{joined})
	for _, store := range []string{emptyStore(t), "memory"} {
		out, _, err := run(t, "activity", "show", "exe_j", "--store", store, "--journal", j)
		if err != nil {
			t.Fatalf("activity show --store %s: %v", store, err)
		}
		sec := sections(t, out)
		if d := sec[headDispatch]; strings.Contains(d, "never dispatched") || !strings.Contains(d, "no line of the journals given tells it was dispatched") {
			t.Errorf("--store %s: section %q:\n%s\nwant it to say the journals given do not tell it", store, headDispatch, d)
		}
		if a := sec[headAnswer]; !strings.Contains(a, "no line of the journals given tells a state of it") {
			t.Errorf("--store %s: section %q:\n%s\nwant it to say the journals given tell no state", store, headAnswer, a)
		}
	}
	// A refusal is never sent upstream, whoever's journal tells it.
	refused := filepath.Join(t.TempDir(), "refused.jsonl")
	writeEntries(t, refused, []journal.Entry{
		{Time: time.Now(), Execution: "exe_r", Tool: "charge_card", State: "accepted"},
		{Time: time.Now(), Execution: "exe_r", Tool: "charge_card", State: "refused", By: "bob", Via: record.ApproverOperator},
	})
	out, _, err := run(t, "activity", "show", "exe_r", "--store", "memory", "--journal", refused)
	if d := sections(t, out)[headDispatch]; err != nil || !strings.Contains(d, "never dispatched") {
		t.Errorf("activity show of a refused execution = %v; section %q:\n%s\nwant never dispatched", err, headDispatch, d)
	}
}

// TestShowReadsTheJournalItChecked: a journal file replaced after show
// checked it, as a rotation does, is not read in its place: the lines
// told are those that verified.
func TestShowReadsTheJournalItChecked(t *testing.T) {
	dir := t.TempDir()
	exe := func(tool, state string) journal.Entry {
		return journal.Entry{Time: time.Now(), Execution: "exe_c", Tool: tool, State: state}
	}
	path := writeEntries(t, filepath.Join(dir, "j.jsonl"), []journal.Entry{exe("charge_card", "accepted"), exe("charge_card", "dispatched")})
	other := writeEntries(t, filepath.Join(dir, "other.jsonl"), []journal.Entry{exe("refund_card", "accepted"), exe("refund_card", "dispatched")})
	journalChecked = func(p string) {
		if p == path {
			os.Rename(other, path)
		}
	}
	t.Cleanup(func() { journalChecked = func(string) {} })
	out, _, err := run(t, "activity", "show", "exe_c", "--store", "memory", "--journal", path)
	if err != nil || !strings.Contains(out, "tool              charge_card") {
		t.Errorf("activity show of a journal replaced after its check = %v:\n%s\nwant the lines checked: tool charge_card", err, out)
	}
}

// TestShowFromTheJournalsAwaiting: an execution the journals given tell
// only as accepted may await an approval, which no line records: the
// timeline says the journals do not tell, not that none was asked for.
func TestShowFromTheJournalsAwaiting(t *testing.T) {
	j := writeEntries(t, filepath.Join(t.TempDir(), "j.jsonl"), []journal.Entry{
		{Time: time.Now(), Execution: "exe_w", Tool: "delete_repo", State: "accepted", Session: "session:s1", RequestID: json.RawMessage("1")},
	})
	out, _, err := run(t, "activity", "show", "exe_w", "--store", "memory", "--journal", j)
	if a := sections(t, out)[headAuth]; err != nil || strings.Contains(a, "no approval asked for") || !strings.Contains(a, "nor whether one was asked for") {
		t.Errorf("activity show of an execution the journal tells only accepted = %v; section %q:\n%s\nwant it to say the journals do not tell", err, headAuth, a)
	}
}
