package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/sqlitestore"
)

// awaitingExecutions stores, in a new SQLite store, an execution for each
// of approvers, accepted and awaiting it, and returns the store's URL
// and their ids.
func awaitingExecutions(t *testing.T, approvers ...string) (store string, ids []string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "records.db")
	s, err := sqlitestore.Open(t.Context(), path, sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i, who := range approvers {
		r := &record.Record{ID: record.NewID(time.Now()), Key: "k" + who + string(rune('a'+i)), Fingerprint: "f", Actor: "alice",
			Tool: "rotate_credential", Retention: time.Hour, Awaiting: who}
		if who == "gone" {
			// Awaits an operator, and its proxy died.
			r.Awaiting, r.Owner, r.LeaseUntil = record.ApproverOperator, "proxy-gone", time.Now().Add(-time.Minute)
		}
		if _, _, err := s.Reserve(t.Context(), r, record.ReserveOptions{}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	return "sqlite:" + path, ids
}

// TestApproveJournals: activity approve decides an execution that awaits
// an operator, recording who and why, lists it no more as awaiting, and
// journals the decision with its decider and channel.
func TestApproveJournals(t *testing.T) {
	store, ids := awaitingExecutions(t, record.ApproverOperator, record.ApproverClient, "")
	stdout, _, err := run(t, "activity", "list", "--store", store, "--awaiting")
	if err != nil || !strings.Contains(stdout, ids[0]) || !strings.Contains(stdout, "awaiting operator") ||
		!strings.Contains(stdout, ids[1]) || strings.Contains(stdout, ids[2]) {
		t.Fatalf("activity list --awaiting = %q, %v; want the two that await an approval, marked", stdout, err)
	}
	file := writeJournal(t, 2)
	if _, _, err := run(t, "activity", "approve", ids[0], "--store", store, "--note", "change ticket 42", "--journal", file); err != nil {
		t.Fatal(err)
	}
	stdout, _, err = run(t, "activity", "show", ids[0], "--store", store)
	if err != nil || !strings.Contains(stdout, "authorized") || !strings.Contains(stdout, "by "+osUser()+" through operator: change ticket 42") {
		t.Fatalf("activity show after the approval = %q, %v; want it authorized, by whom, through what, why", stdout, err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	ls := strings.Split(strings.TrimSpace(string(b)), "\n")
	var got journal.Entry
	if err := json.Unmarshal([]byte(ls[len(ls)-1]), &got); err != nil {
		t.Fatal(err)
	}
	if got.Execution != ids[0] || got.State != "authorized" || got.By != osUser() || got.Via != "operator" || got.Note != "change ticket 42" {
		t.Errorf("the approval's journal line is %+v; want it authorized by the operator, with the note", got)
	}
	if stdout, _, err := run(t, "audit", "verify", file); err != nil || !strings.Contains(stdout, "3 lines verify") {
		t.Errorf("audit verify after the approval = %q, %v; want 3 lines that verify", stdout, err)
	}
	// The timeline tells the decision no session made, and who made it.
	stdout, _, err = run(t, "activity", "show", ids[0], "--store", store, "--journal", file)
	if want := "authorized, written by operator " + osUser(); err != nil || !strings.Contains(stdout, "outside any session:") ||
		!strings.Contains(stdout, want) || !strings.Contains(stdout, "by "+osUser()+": change ticket 42") {
		t.Errorf("activity show --journal = %q, %v; want the approval outside any session, %q", stdout, err, want)
	}
	if stdout, _, err := run(t, "activity", "list", "--store", store, "--awaiting"); err != nil || strings.Contains(stdout, ids[0]) {
		t.Errorf("activity list --awaiting after the approval = %q, %v; want it gone", stdout, err)
	}
}

// TestDecideOnlyWhatAwaitsAnOperator: an execution decided already, one
// that awaits its client's user, and one that awaits nothing are not
// decided again, and the error says why.
func TestDecideOnlyWhatAwaitsAnOperator(t *testing.T) {
	store, ids := awaitingExecutions(t, record.ApproverOperator, record.ApproverClient, "", "gone")
	if _, _, err := run(t, "activity", "deny", ids[0], "--store", store, "--note", "not today"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ id, want string }{
		{ids[0], "was already refused by " + osUser() + " through operator"},
		{ids[1], "awaits the approval of its client's user"},
		{ids[2], "awaits no approval"},
		{ids[3], "its proxy went away"},
		{"exe_missing", "no such execution"},
	} {
		_, _, err := run(t, "activity", "approve", c.id, "--store", store)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("activity approve %s = %v; want an error saying %q", c.id, err, c.want)
		}
	}
}

// TestTimelineTellsTheDecision: the timeline's second question is
// answered from the record: the decision, who is awaited, or nothing.
func TestTimelineTellsTheDecision(t *testing.T) {
	at := time.Now()
	for _, c := range []struct {
		r    record.Record
		want string
	}{
		{record.Record{State: record.Refused, History: []record.Transition{{State: record.Accepted, At: at},
			{State: record.Refused, At: at, By: "bob", Via: record.ApproverOperator, Note: "freeze"}}}, "refused by bob through operator: freeze"},
		{record.Record{State: record.Refused, History: []record.Transition{{State: record.Refused, At: at, Via: record.ViaTimeout}}}, "refused by no one through timeout"},
		{record.Record{State: record.Accepted, Awaiting: record.ApproverOperator, History: []record.Transition{{State: record.Accepted, At: at}}}, "awaiting approval from the operator since"},
		// Its proxy went away: approve refuses it, so the timeline must
		// not leave it as one awaiting the operator's word.
		{record.Record{State: record.Accepted, Awaiting: record.ApproverOperator, LeaseUntil: at.Add(-time.Minute), History: []record.Transition{{State: record.Accepted, At: at}}},
			"awaiting approval from the operator since " + stamp(at) + ", but its proxy went away"},
		{record.Record{State: record.Delivered, History: []record.Transition{{State: record.Accepted, At: at}}}, noApproval},
	} {
		got := authorizationOf(&c.r)
		if !strings.HasPrefix(got.Note, c.want) || got.Required != (c.want != noApproval) {
			t.Errorf("authorizationOf(%s) = %+v; want a note that begins %q", c.r.State, got, c.want)
		}
	}
}

// TestOperatorChangesSigned: with --journal-key, an operator's decision
// and resolution are signed in the journal, as a proxy's lines are.
func TestOperatorChangesSigned(t *testing.T) {
	store, ids := awaitingExecutions(t, record.ApproverOperator)
	signer, verifier := keygen(t, t.TempDir(), "ops.example.com")
	file := writeJournal(t, 2)
	if _, _, err := run(t, "activity", "approve", ids[0], "--store", store, "--journal", file, "--journal-key", signer); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := run(t, "audit", "verify", "--key", verifier, file)
	if err != nil || !strings.Contains(stdout, "the newest, at line 4") || stderr != "" {
		t.Fatalf("audit verify after a signed approval: %v; stdout %q, stderr %q; want a checkpoint after the approval, no unsigned tail", err, stdout, stderr)
	}
	if _, _, err := run(t, "activity", "deny", ids[0], "--store", store, "--journal-key", signer); err == nil || !strings.Contains(err.Error(), "--journal-key") {
		t.Errorf("--journal-key without --journal = %v; want a usage error naming the flag", err)
	}
}

// TestOperatorJournalKeyIsTheJournal: a --journal-key that is the
// --journal, by a link, is refused naming both flags, and the journal
// is left as it was.
func TestOperatorJournalKeyIsTheJournal(t *testing.T) {
	store, ids := awaitingExecutions(t, record.ApproverOperator)
	file := writeJournal(t, 2)
	before, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "key")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	_, _, err = run(t, "activity", "approve", ids[0], "--store", store, "--journal", file, "--journal-key", link)
	if err == nil || ExitCode(err) != 2 || !strings.Contains(err.Error(), "same file") || !strings.Contains(err.Error(), "--journal ") {
		t.Errorf("--journal-key linked to the --journal = %v (exit %d); want a usage error saying they are the same file", err, ExitCode(err))
	}
	if after, _ := os.ReadFile(file); !bytes.Equal(after, before) {
		t.Errorf("the journal changed:\n%s\nwant it as it was:\n%s", after, before)
	}
}

// TestOperatorSignerKeyReadableByOthers: an operator's command given a
// signer key that others may read warns, as the proxy does.
func TestOperatorSignerKeyReadableByOthers(t *testing.T) {
	store, ids := awaitingExecutions(t, record.ApproverOperator)
	signer, _ := keygen(t, t.TempDir(), "ops.example.com")
	os.Chmod(signer, 0o644)
	_, stderr, err := run(t, "activity", "approve", ids[0], "--store", store, "--journal", writeJournal(t, 2), "--journal-key", signer)
	if err != nil || !strings.Contains(stderr, "readable by others than its owner") || !strings.Contains(stderr, "chmod 600") || !strings.Contains(stderr, signer) {
		t.Errorf("activity approve with a signer key of mode 0644 = %v; stderr %q; want a warning naming it", err, stderr)
	}
}

// TestRefusedChangeLeavesNoJournal: a journal file made for a change
// that is refused is not left behind, empty; one that was there stays
// as it was, with --journal-key too: nothing happened to sign for.
func TestRefusedChangeLeavesNoJournal(t *testing.T) {
	store, ids := awaitingExecutions(t, "")
	file := filepath.Join(t.TempDir(), "operator.jsonl")
	if _, _, err := run(t, "activity", "approve", ids[0], "--store", store, "--journal", file); err == nil {
		t.Fatal("approving an execution that awaits nothing succeeded")
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("after the refusal the journal file is there (%v); want none", err)
	}
	kept := writeJournal(t, 1)
	run(t, "activity", "resolve", ids[0], "--store", store, "--as", "failed", "--journal", kept)
	if _, err := os.Stat(kept); err != nil {
		t.Errorf("a journal that was there is gone after a refusal: %v", err)
	}
	before, err := os.ReadFile(kept)
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := keygen(t, t.TempDir(), "ops.example.com")
	for _, args := range [][]string{
		{"resolve", ids[0], "--as", "failed"},
		{"approve", ids[0]},
		{"deny", "exe_nope"},
	} {
		args = append(append([]string{"activity"}, args...), "--store", store, "--journal", kept, "--journal-key", signer)
		if _, _, err := run(t, args...); err == nil {
			t.Fatalf("%v succeeded; want it refused", args)
		}
		if after, _ := os.ReadFile(kept); !bytes.Equal(after, before) {
			t.Errorf("%v, refused, changed the journal:\n%s\nwant it as it was:\n%s", args, after, before)
		}
	}
}

// TestActivityEmptyID: an empty execution id is a mistake on the command
// line (exit 2) that says so, for each verb that takes one, before any
// store is read: not an execution the store lacks.
func TestActivityEmptyID(t *testing.T) {
	store, _ := awaitingExecutions(t, record.ApproverOperator)
	for _, args := range [][]string{
		{"approve", "", "--store", store},
		{"deny", "", "--store", store},
		{"show", "", "--store", store},
		{"resolve", "", "--as", "failed", "--store", store},
	} {
		_, _, err := run(t, append([]string{"activity"}, args...)...)
		if _, ok := errors.AsType[*usageError](err); !ok || !strings.Contains(err.Error(), "the execution id is empty") {
			t.Errorf("activity %s with an empty id = %v; want a usage error saying the id is empty", args[0], err)
		}
	}
}

// TestOperatorChangeOfAnUnknownID: approve, deny and resolve of an id
// the store lacks name the store read, as show does: with a Redis
// prefix, which is not checked, it is the one thing to look at.
func TestOperatorChangeOfAnUnknownID(t *testing.T) {
	store, _ := awaitingExecutions(t, record.ApproverOperator)
	for _, args := range [][]string{
		{"approve", "exe_nope", "--store", store},
		{"deny", "exe_nope", "--store", store},
		{"resolve", "exe_nope", "--as", "failed", "--store", store},
	} {
		_, _, err := run(t, append([]string{"activity"}, args...)...)
		if err == nil || !strings.Contains(err.Error(), "no such execution in --store "+store) {
			t.Errorf("activity %s of an unknown id = %v; want an error naming the store read", args[0], err)
		}
	}
}

// TestOperatorNoteTooLong: a note is kept with the record and shown to
// every caller it has, so one over record.MaxNote characters is a
// mistake on the command line, refused before the store is changed.
func TestOperatorNoteTooLong(t *testing.T) {
	store, ids := awaitingExecutions(t, record.ApproverOperator)
	long := strings.Repeat("é", record.MaxNote+1)
	for _, args := range [][]string{
		{"approve", ids[0], "--note", long, "--store", store},
		{"deny", ids[0], "--note", long, "--store", store},
		{"resolve", ids[0], "--as", "failed", "--note", long, "--store", store},
	} {
		_, _, err := run(t, append([]string{"activity"}, args...)...)
		if _, ok := errors.AsType[*usageError](err); !ok || !strings.Contains(err.Error(), "--note: 1001 characters; at most 1000") {
			t.Errorf("activity %s with a note of 1,001 characters = %v; want a usage error naming --note", args[0], err)
		}
	}
	// At the limit, it is taken.
	if _, _, err := run(t, "activity", "deny", ids[0], "--note", long[:2*record.MaxNote], "--store", store); err != nil {
		t.Errorf("activity deny with a note of 1,000 characters = %v; want it taken", err)
	}
}

// TestOperatorNoteNotUTF8: a note that is not UTF-8 (typed in a Latin-1
// terminal, say) would be kept with each such byte turned into U+FFFD,
// and shown so to every caller: it is refused, naming --note, and the
// execution still awaits its decision.
func TestOperatorNoteNotUTF8(t *testing.T) {
	store, ids := awaitingExecutions(t, record.ApproverOperator)
	for _, args := range [][]string{
		{"approve", ids[0], "--note", "ok \xe9", "--store", store},
		{"deny", ids[0], "--note", "non \xe9", "--store", store},
		{"resolve", ids[0], "--as", "failed", "--note", "\xff", "--store", store},
	} {
		_, _, err := run(t, append([]string{"activity"}, args...)...)
		if _, ok := errors.AsType[*usageError](err); !ok || !strings.Contains(err.Error(), "--note") || !strings.Contains(err.Error(), "UTF-8") {
			t.Errorf("activity %s with a note that is not UTF-8 = %v; want a usage error naming --note", args[0], err)
		}
	}
	stdout, _, err := run(t, "activity", "list", "--store", store, "--awaiting")
	if err != nil || !strings.Contains(stdout, ids[0]) {
		t.Errorf("after the refused notes, list --awaiting = %q, %v; want the execution still awaiting", stdout, err)
	}
}

// TestWritingCommandsMakeNoStore: resolve, approve and deny given a file
// that holds no store (a mistyped path to an empty file) refuse it as
// list and show do, and leave it as it was, not made a store.
func TestWritingCommandsMakeNoStore(t *testing.T) {
	file := filepath.Join(t.TempDir(), "empty.db")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"resolve", "exe_1", "--as", "failed"},
		{"approve", "exe_1"},
		{"deny", "exe_1"},
	} {
		args = append(append([]string{"activity"}, args...), "--store", "sqlite:"+file)
		_, _, err := run(t, args...)
		if err == nil || ExitCode(err) != 2 || !strings.Contains(err.Error(), "holds no mcp-idempotent store") {
			t.Errorf("%q = %v (exit %d); want a usage error saying the file holds no store", args, err, ExitCode(err))
		}
		if fi, err := os.Stat(file); err != nil {
			t.Fatal(err)
		} else if fi.Size() != 0 {
			t.Fatalf("after %q the file holds %d bytes; want it empty, as it was", args, fi.Size())
		}
	}
}
