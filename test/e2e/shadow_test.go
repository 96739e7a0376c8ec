package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestShadowMode: with --shadow the upstream runs every call, retries
// among them, as with no proxy; the journal says what the proxy would have
// done (a replay's delivery is in it), each line marked shadow.
func TestShadowMode(t *testing.T) {
	ctx := testContext(t)
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	p := connect(t, ctx, proxiedWith(t, []string{"--shadow", "--journal", path}, chargeServer()...))
	first := charge(t, ctx, p, "4242", 10)
	retry := charge(t, ctx, p, "4242", 10)
	if n := executions(t, ctx, p); n != 2 {
		t.Fatalf("the server charged %d times under --shadow; want 2, as with no proxy", n)
	}
	if retry.Meta["mcp-idempotent/replayed"] != nil || answer(retry) == answer(first) {
		t.Errorf("the retry got %s (_meta %v); want the server's own second answer", answer(retry), retry.Meta)
	}
	p.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]int{}
	for line := range strings.Lines(string(data)) {
		var e struct {
			State  string `json:"state"`
			Shadow bool   `json:"shadow"`
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil || !e.Shadow {
			t.Fatalf("journal line %q (%v); want it marked shadow", line, err)
		}
		states[e.State]++
	}
	// One execution, its first caller's delivery, and the replay's.
	if states["accepted"] != 1 || states["completed"] != 1 || states["delivered"] != 2 {
		t.Errorf("journal states %v; want one execution accepted and completed, delivered twice (once as a replay)", states)
	}
}
