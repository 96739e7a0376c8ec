package cli

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
)

// TestShowKeepsOnlyTheExecutionsLines: activity show reads a journal of
// many executions keeping only the lines it tells, so that a journal of
// a year, millions of lines, does not have to fit in memory.
func TestShowKeepsOnlyTheExecutionsLines(t *testing.T) {
	t0 := time.Now().Add(-time.Hour)
	es := []journal.Entry{{Time: t0, Session: "session:s1", Event: journal.SessionStart}}
	for i := range 500 {
		es = append(es, journal.Entry{Time: t0.Add(time.Duration(i) * time.Millisecond), Execution: fmt.Sprintf("exe_%d", i),
			Tool: "charge_card", State: "accepted", Session: "session:s1"})
	}
	es = append(es, journal.Entry{Time: t0.Add(time.Second), Session: "session:s1", Event: journal.SessionEnd})
	path := writeEntries(t, filepath.Join(t.TempDir(), "j.jsonl"), es)
	seen := make(map[[sha256.Size]byte]bool)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, _, err := readEntries(f, path, len(es), "exe_7", map[string]bool{"session:s1": true}, seen)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[1].Execution != "exe_7" || len(seen) != 3 {
		t.Errorf("readEntries kept %d entries (%d in seen); want 3: exe_7's line and the session's two", len(got), len(seen))
	}
}

// TestShowKeepsOnlyItsSessionsLines: of a journal of many sessions, as
// a busy proxy's is, activity show keeps the session lines of the
// session that sent the execution's call, not those of every client.
func TestShowKeepsOnlyItsSessionsLines(t *testing.T) {
	t0 := time.Now().Add(-time.Hour)
	var es []journal.Entry
	for i := range 200 {
		s := fmt.Sprintf("session:s%d", i)
		at := t0.Add(time.Duration(i) * time.Millisecond)
		es = append(es, journal.Entry{Time: at, Session: s, Event: journal.SessionStart},
			journal.Entry{Time: at, Execution: fmt.Sprintf("exe_%d", i), Tool: "charge_card", State: "accepted", Session: s},
			journal.Entry{Time: at, Session: s, Event: journal.SessionEnd})
	}
	path := writeEntries(t, filepath.Join(t.TempDir(), "j.jsonl"), es)
	got, torn, err := readJournals([]string{path}, "exe_7")
	if err != nil || len(torn) > 0 {
		t.Fatalf("readJournals = %v, torn %v", err, torn)
	}
	if len(got) != 3 || got[1].Execution != "exe_7" || got[0].Session != "session:s7" || got[2].Session != "session:s7" {
		t.Errorf("readJournals kept %d lines; want 3: exe_7's line and its session's two", len(got))
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := make(map[[sha256.Size]byte]bool)
	kept, _, err := readEntries(f, path, len(es), "exe_7", map[string]bool{"session:s7": true}, seen)
	if err != nil || len(kept) != 3 {
		t.Errorf("readEntries kept %d lines (%v); want 3, not the session lines of the %d sessions that did not send exe_7", len(kept), err, len(es)/3-1)
	}
}

// TestShowDoesNotKeepATornTail: a journal whose torn tail is tens of
// megabytes, as zeros a machine crash leaves, is read by activity show
// without that tail held in memory, and the tail is still found torn.
func TestShowDoesNotKeepATornTail(t *testing.T) {
	t0 := time.Now().Add(-time.Hour)
	es := []journal.Entry{{Time: t0, Execution: "exe_7", Tool: "charge_card", State: "accepted"}}
	path := writeEntries(t, filepath.Join(t.TempDir(), "j.jsonl"), es)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	const tornSize = 64 << 20
	if err := os.Truncate(path, fi.Size()+tornSize); err != nil { // sparse: no disk taken
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []journal.Entry
	var torn bool
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got, torn, err = readEntries(f, path, len(es), "exe_7", nil, make(map[[sha256.Size]byte]bool))
	runtime.ReadMemStats(&after)
	if err != nil || len(got) != 1 || !torn {
		t.Errorf("readEntries = %d lines, torn %v, %v; want 1, torn", len(got), torn, err)
	}
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > tornSize/4 {
		t.Errorf("readEntries allocated %d MB for a torn tail of %d MB; want it not kept", allocated>>20, tornSize>>20)
	}
}
