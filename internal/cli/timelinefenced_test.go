package cli

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/sqlitestore"
)

// TestShowTellsAFencedAnswer: an execution another proxy settled unknown
// while its own proxy was paused past its lease; that proxy's send was
// answered after, and the store refused the answer. The record says
// unknown; show, given that proxy's journal, says an answer came, by whom,
// rather than that nothing was observed.
func TestShowTellsAFencedAnswer(t *testing.T) {
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
	for _, c := range []record.Change{{To: record.Dispatched}, {To: record.Unknown, Note: "owner proxy-slow went away"}} {
		if _, err := s.Update(t.Context(), r.ID, c); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	t0 := time.Now().Add(-time.Minute)
	slow := journal.Process{Host: "app1", PID: 42, Owner: "proxy-slow"}
	es := []journal.Entry{
		{Time: t0, Writer: slow, Execution: r.ID, Tool: "charge_card", State: "accepted", Session: "session:s1", RequestID: json.RawMessage("5")},
		{Time: t0.Add(time.Millisecond), Writer: slow, Execution: r.ID, Tool: "charge_card", State: "dispatched", Attempt: 1, Session: "session:s1", RequestID: json.RawMessage("5")},
		{Time: t0.Add(time.Second), Writer: slow, Execution: r.ID, Tool: "charge_card", Event: journal.Fenced, Attempt: 1, Session: "session:s1", RequestID: json.RawMessage("5"),
			Note: "the store refused this outcome (completed): the lease of this process lapsed"},
	}
	j := writeEntries(t, filepath.Join(dir, "j.jsonl"), es)
	out, _, err := run(t, "activity", "show", r.ID, "--store", "sqlite:"+path, "--journal", j)
	if err != nil {
		t.Fatal(err)
	}
	answer := sections(t, out)[headAnswer]
	if !strings.Contains(answer, "app1 pid 42 proxy-slow: the store refused this outcome (completed)") || strings.Contains(answer, "nothing observed") {
		t.Errorf("section %q:\n%s\nwant the refused completion, by proxy-slow, and no %q", headAnswer, answer, "nothing observed")
	}
	out, _, err = run(t, "activity", "show", r.ID, "--store", "sqlite:"+path, "--journal", j, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var show struct {
		Timeline struct {
			Answer struct {
				Fenced []struct {
					Writer journal.Process `json:"writer"`
				} `json:"fenced"`
			} `json:"answer"`
		} `json:"timeline"`
	}
	if err := json.Unmarshal([]byte(out), &show); err != nil || len(show.Timeline.Answer.Fenced) != 1 || show.Timeline.Answer.Fenced[0].Writer != slow {
		t.Errorf("show --json: %v\n%s\nwant one fenced answer, by proxy-slow", err, out)
	}
}
