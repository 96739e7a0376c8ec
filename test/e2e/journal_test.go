package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
)

// journalLine is what the test reads of one line of the activity journal.
type journalLine struct {
	Prev      string `json:"prev"`
	Execution string `json:"execution"`
	Session   string `json:"session"`
	Tool      string `json:"tool"`
	State     string `json:"state"`
	Event     string `json:"event"` // a session's start or end
	Client    struct {
		Name     string `json:"name"`
		Protocol string `json:"protocol_version"`
	} `json:"client"`
	Arguments *struct {
		HMAC  string          `json:"hmac_sha256"`
		Clear json.RawMessage `json:"clear"`
	} `json:"arguments"`
	Result *struct {
		Redacted bool `json:"redacted"`
	} `json:"result"`
}

// TestJournalTellsOneExecution: three identical charge_card calls through
// the proxy with --journal are one execution in the journal, its
// transitions in order, with the card hashed rather than written; `audit
// verify` passes on it, `activity show` tells its session and its three
// callers from it, and `audit verify` names the line of a byte changed
// after.
func TestJournalTellsOneExecution(t *testing.T) {
	needProxy(t)
	t.Parallel()
	ctx := testContext(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.jsonl")
	store := "sqlite:" + filepath.Join(dir, "records.db")
	const card = "card-7f3a-journal"
	p := connect(t, ctx, proxiedWith(t, []string{"--journal", path, "--store", store}, chargeServer()...))
	for range 3 {
		charge(t, ctx, p, card, 100)
	}
	if got := executions(t, ctx, p); got != 1 {
		t.Fatalf("charges = %d after 3 identical calls, want 1", got)
	}
	// The delivered transition is written just after the answer is out:
	// once the proxy has exited, every line is in.
	if err := p.Close(); err != nil {
		t.Logf("closing the session: %v", err)
	}

	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte(card)) {
		t.Errorf("the journal holds the card in clear; arguments are hashed by default:\n%s", data)
	}
	var all, lines []journalLine // every line; those of the execution
	for l := range strings.Lines(string(data)) {
		var jl journalLine
		if err := json.Unmarshal([]byte(l), &jl); err != nil {
			t.Fatalf("journal line %q: %v", l, err)
		}
		all = append(all, jl)
		if jl.Event == "" {
			lines = append(lines, jl)
		}
	}
	if n := len(all); n < 2 || all[0].Event != "session_start" || all[n-1].Event != "session_end" || n != len(lines)+2 {
		t.Errorf("journal lines %+v; want the session's start first and its end last", all)
	} else if c := all[0].Client; c.Name != "mcpi-e2e" || c.Protocol != "2026-07-28" {
		// A 2026-07-28 client sends no initialize: its requests' _meta
		// name it.
		t.Errorf("session start's client %+v; want mcpi-e2e, 2026-07-28", c)
	}
	var states []string
	for _, l := range lines {
		states = append(states, l.State)
		if l.Execution != lines[0].Execution || l.Tool != "charge_card" {
			t.Errorf("line %+v is not of the one execution %s of charge_card", l, lines[0].Execution)
		}
	}
	// A replay that finds the execution completed but not yet marked
	// delivered delivers it again: one delivered line per caller, then.
	if len(states) < 4 || !slices.Equal(states[:4], []string{"accepted", "dispatched", "completed", "delivered"}) ||
		slices.ContainsFunc(states[4:], func(s string) bool { return s != "delivered" }) {
		t.Fatalf("journal states %q; want accepted, dispatched, completed, delivered", states)
	}
	if a := lines[0].Arguments; a == nil || len(a.HMAC) != 64 || a.Clear != nil {
		t.Errorf("accepted line's arguments %+v; want a hash only", a)
	}
	if r := lines[2].Result; r == nil || !r.Redacted {
		t.Errorf("completed line's result %+v; want it redacted", r)
	}

	out, stderr, code := runProxy(t, ctx, "audit", "verify", path)
	if want := path + ": " + strconv.Itoa(len(all)) + " lines verify\n"; code != 0 || out != want {
		t.Fatalf("audit verify exited %d: %q %s; want 0, %q", code, out, stderr, want)
	}
	checkTimeline(t, ctx, lines[0].Execution, store, path, all[0].Session)

	// One byte of line 3 (after the session's start and the acceptance)
	// changed after the fact.
	i := bytes.Index(data, []byte(`"state":"dispatched"`)) + len(`"state":"`)
	data[i] = 'D'
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	out, stderr, code = runProxy(t, ctx, "audit", "verify", path)
	if code != 1 || out != "" || !strings.Contains(stderr, path+":3: does not verify") || !strings.Contains(stderr, "line 3 was changed") {
		t.Fatalf("audit verify of a tampered journal exited %d: %q\n%s\nwant 1, naming line 3", code, out, stderr)
	}
}

// checkTimeline checks what `activity show --json` tells of execution id,
// called three times in one session: that session, with its three
// requests, and three callers, each given the answer: the one that
// started it, and two replays.
func checkTimeline(t *testing.T, ctx context.Context, id, store, journal, session string) {
	t.Helper()
	out, stderr, code := runProxy(t, ctx, "activity", "show", id, "--store", store, "--journal", journal, "--json")
	var show struct {
		Timeline struct {
			Sessions struct {
				Journaled bool `json:"journaled"`
				Sessions  []struct {
					Session    string            `json:"session"`
					RequestIDs []json.RawMessage `json:"request_ids"`
					Client     struct {
						Name string `json:"name"`
					} `json:"client"`
				} `json:"sessions"`
			} `json:"sessions"`
			Callers struct {
				Callers []struct {
					Session string `json:"session"`
					How     string `json:"how"`
					Got     string `json:"got"`
					Taken   bool   `json:"taken"`
				} `json:"callers"`
			} `json:"callers"`
		} `json:"timeline"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &show) != nil {
		t.Fatalf("activity show --journal --json exited %d:\n%s%s", code, out, stderr)
	}
	ss := show.Timeline.Sessions
	if !ss.Journaled || len(ss.Sessions) != 1 || ss.Sessions[0].Session != session ||
		len(ss.Sessions[0].RequestIDs) != 3 || ss.Sessions[0].Client.Name != "mcpi-e2e" {
		t.Errorf("the timeline's sessions %+v; want %s of mcpi-e2e, with 3 requests", ss, session)
	}
	var callers []string
	for _, c := range show.Timeline.Callers.Callers {
		if c.Session != session {
			t.Errorf("caller %+v; want it of %s", c, session)
		}
		callers = append(callers, fmt.Sprintf("%s %s taken=%v", c.How, c.Got, c.Taken))
	}
	// In the order their lines were written: the first caller's is
	// written once its delivery is stored, which, with a store that
	// waits on I/O, may come after the next call's replay.
	slices.Sort(callers)
	want := []string{"replay answer taken=true", "replay answer taken=true", "started answer taken=true"}
	if !slices.Equal(callers, want) {
		t.Errorf("the timeline's callers %q; want %q", callers, want)
	}
}

// TestJournalOrphanSettledByPurge: a proxy killed mid-call leaves an
// orphan that no call meets again; the next proxy's store settles it as
// it purges, and that proxy's journal has the line, naming the owner
// that went away.
func TestJournalOrphanSettledByPurge(t *testing.T) {
	needProxy(t)
	ctx := testContext(t)
	dir := t.TempDir()
	store := "sqlite:" + filepath.Join(dir, "records.db")
	path := filepath.Join(dir, "journal.jsonl")
	flags := []string{"--store", store, "--scope", "actor", "--actor", "alice", "--lease", "1s"}
	doomed := connect(t, ctx, proxiedWith(t, flags, chargeServer("-delay", "3s")...))
	go doomed.CallTool(ctx, &mcp.CallToolParams{Name: "charge_card", Arguments: chargeArgs("4242", 100)})
	if err := doomed.stderr.waitFor(ctx, "charge_card card=4242"); err != nil {
		t.Fatalf("the server never received the call: %v", err)
	}
	if err := doomed.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // its lease lapses
	p := connect(t, ctx, proxiedWith(t, append(flags, "--journal", path), chargeServer()...))
	// Other actions: none meets the orphan, and the store purges every
	// sixteenth reservation.
	for i := range 16 {
		charge(t, ctx, p, fmt.Sprintf("card-%d", i), 1)
	}
	p.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.Lines(string(data)) {
		var e journal.Entry
		if json.Unmarshal([]byte(l), &e) == nil && e.State == "unknown" && strings.Contains(e.Note, "went away after recording its dispatch") && e.Writer.Owner != "" {
			return
		}
	}
	t.Fatalf("the journal has no line for the orphan the purge settled:\n%s", data)
}
