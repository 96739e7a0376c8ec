package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestActivityTellsTheStory: after an upstream died with a payment in
// flight, the activity commands show what happened, and an operator's
// resolution is what the next caller gets.
func TestActivityTellsTheStory(t *testing.T) {
	if direct {
		t.Skip("needs the proxy")
	}
	dir := t.TempDir()
	store := "sqlite:" + filepath.Join(dir, "records.db")
	ledger := filepath.Join(dir, "ledger")
	first, p := paySession(t, store, ledger, "")
	id := executionID(first)
	exitCode(t, testContext(t), p)

	ctx := testContext(t)
	out, stderr, code := runProxy(t, ctx, "activity", "list", "--store", store, "--tool", "pay", "--since", "1h")
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "unknown") {
		t.Fatalf("activity list exited %d:\n%s%s\nwant the execution %s, unknown", code, out, stderr, id)
	}
	out, stderr, code = runProxy(t, ctx, "activity", "show", id, "--store", store, "--json")
	var rec struct {
		State   string `json:"state"`
		Tool    string `json:"tool"`
		History []struct {
			State, Note string
		} `json:"history"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &rec) != nil {
		t.Fatalf("activity show --json exited %d:\n%s%s", code, out, stderr)
	}
	var states []string
	for _, h := range rec.History {
		states = append(states, h.State)
	}
	if got := strings.Join(states, ","); got != "accepted,dispatched,unknown" || rec.Tool != "pay" {
		t.Fatalf("the story of %s is %s (%s); want accepted,dispatched,unknown of pay", id, got, rec.Tool)
	}
	if note := rec.History[2].Note; !strings.Contains(note, "exited") {
		t.Errorf("the unknown transition's note is %q; want it to say the upstream exited", note)
	}

	// A filter that matches nothing lists an empty array, for jq and the
	// like, not null.
	if out, stderr, code := runProxy(t, ctx, "activity", "list", "--store", store, "--tool", "nothing", "--json"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("activity list --json of nothing exited %d: %q%s; want []", code, out, stderr)
	}

	out, stderr, code = runProxy(t, ctx, "activity", "resolve", id, "--store", store, "--as", "completed", "--note", "the bank shows the payment")
	if code != 0 || !strings.Contains(out, "the bank shows the payment") {
		t.Fatalf("activity resolve exited %d:\n%s%s", code, out, stderr)
	}
	if _, stderr, code = runProxy(t, ctx, "activity", "resolve", id, "--store", store, "--as", "failed"); code == 0 || !strings.Contains(stderr, "only an unknown execution") {
		t.Fatalf("resolving a resolved execution exited %d: %s", code, stderr)
	}

	again, _ := paySession(t, store, ledger, "")
	if got := firstText(again); !strings.Contains(got, "resolved as done by an operator") || !replayed(again) {
		t.Fatalf("the call after the resolution got %q; want the resolution, replayed", got)
	}
	if n := len(ledgerIDs(t, ledger)); n != 1 {
		t.Fatalf("the upstream ran pay %d times; want 1", n)
	}
}
