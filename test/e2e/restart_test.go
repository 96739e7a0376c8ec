package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A durable store keeps an execution past the proxy process that ran it.
// These tests run a proxy, let the upstream die after a payment was
// recorded but before it answered, and then ask again through a NEW proxy
// process on the same store, as a client that restarts its server does:
// what happens next is the tool's on_unknown contract.

// paySession runs one proxy process on store with a policy for pay, and
// makes one pay call.
func paySession(t *testing.T, store, ledger, policy string) (*mcp.CallToolResult, *peer) {
	t.Helper()
	ctx := testContext(t)
	flags := []string{"--store", store, "--scope", "actor", "--actor", "alice", "--max-restarts", "0"}
	if policy != "" {
		flags = append(flags, withPolicy(t, policy)...)
	}
	p := connect(t, ctx, proxiedWith(t, flags, chargeServer("-ledger", ledger)...))
	res, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "pay", Arguments: map[string]any{"card": "4242", "amount": 30}})
	if err != nil {
		t.Fatalf("pay: %v\nstderr:\n%s", err, p.stderr)
	}
	return res, p
}

func ledgerIDs(t *testing.T, ledger string) []string {
	t.Helper()
	b, err := os.ReadFile(ledger)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

func TestOnUnknownAcrossRestarts(t *testing.T) {
	if direct {
		t.Skip("needs the proxy")
	}
	for _, tt := range []struct {
		name, policy string
		// what the call through the second proxy answers, and how many
		// times the upstream ran pay in all
		wantText string
		wantRuns int
	}{
		{"block", "tools:\n  pay:\n    on_unknown: block\n", "Outcome unknown:", 1},
		{"retry", "tools:\n  pay:\n    on_unknown: retry\n", "paid 30 from card 4242 (payment #2)", 2},
		{"recover", "tools:\n  pay:\n    on_unknown: recover\n    recover:\n      tool: payment_status\n", "done", 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			store := "sqlite:" + filepath.Join(dir, "records.db")
			ledger := filepath.Join(dir, "ledger")

			first, p1 := paySession(t, store, ledger, tt.policy)
			if !first.IsError || !strings.HasPrefix(firstText(first), "Outcome unknown:") {
				t.Fatalf("the call whose upstream died got %q; want outcome unknown", firstText(first))
			}
			id := executionID(first)
			if code := exitCode(t, testContext(t), p1); code == 0 {
				t.Fatal("the proxy whose upstream died exited 0")
			}

			second, _ := paySession(t, store, ledger, tt.policy)
			if got := firstText(second); !strings.HasPrefix(got, tt.wantText) {
				t.Fatalf("after the restart the call got %q; want %q", got, tt.wantText)
			}
			ids := ledgerIDs(t, ledger)
			if len(ids) != tt.wantRuns {
				t.Fatalf("the upstream ran pay %d times (%v); want %d", len(ids), ids, tt.wantRuns)
			}
			for _, got := range ids {
				if got != id {
					t.Fatalf("the upstream saw execution %s; every dispatch must carry the first one's id %s", got, id)
				}
			}
			if got := executionID(second); tt.name != "block" && got != id {
				t.Fatalf("the answer after the restart names execution %q; want %s", got, id)
			}
		})
	}
}

// TestAnswerSurvivesARestart: a completed execution replays from a new
// proxy process.
func TestAnswerSurvivesARestart(t *testing.T) {
	if direct {
		t.Skip("needs the proxy")
	}
	store := "sqlite:" + filepath.Join(t.TempDir(), "records.db")
	var answers []string
	for i := range 2 {
		ctx := testContext(t)
		p := connect(t, ctx, proxiedWith(t, []string{"--store", store, "--scope", "actor"}, chargeServer()...))
		res := charge(t, ctx, p, "4242", 100)
		answers = append(answers, firstText(res))
		if i == 1 && !replayed(res) {
			t.Fatalf("the second process's answer %q is not a replay", firstText(res))
		}
		if n := executions(t, ctx, p); n != 1-i {
			t.Fatalf("process %d: its server ran charge_card %d times; want %d", i+1, n, 1-i)
		}
	}
	if answers[0] != answers[1] {
		t.Fatalf("answers differ across the restart: %q, %q", answers[0], answers[1])
	}
}

// TestUpstreamRestartsAndTheSessionGoesOn: the upstream dies mid-call; the
// caller is told the outcome is unknown, the proxy starts the upstream
// again, replays the handshake, and the client's session carries on.
func TestUpstreamRestartsAndTheSessionGoesOn(t *testing.T) {
	if direct {
		t.Skip("needs the proxy")
	}
	ctx := testContext(t)
	p := connect(t, ctx, proxied(t, chargeServer()...))
	res, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "charge_and_crash", Arguments: chargeArgs("4242", 100)})
	if err != nil || !strings.HasPrefix(firstText(res), "Outcome unknown:") {
		t.Fatalf("the call the upstream died in got %v, %q; want outcome unknown", err, firstText(res))
	}
	// The same call again is not re-sent: its outcome stays unknown.
	again, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "charge_and_crash", Arguments: chargeArgs("4242", 100)})
	if err != nil || !strings.HasPrefix(firstText(again), "Outcome unknown:") {
		t.Fatalf("the same call after the restart got %v, %q; want outcome unknown, not a second charge", err, firstText(again))
	}
	// Another call runs on the restarted upstream.
	if got := firstText(charge(t, ctx, p, "4242", 7)); !strings.Contains(got, "charge #1") {
		t.Fatalf("the next call got %q; want it to run on the restarted upstream", got)
	}
	if n := executions(t, ctx, p); n != 1 {
		t.Fatalf("the restarted upstream counted %d charges; want 1", n)
	}
	if !strings.Contains(p.stderr.String(), "the upstream was started again") {
		t.Errorf("the proxy did not say it restarted the upstream:\n%s", p.stderr)
	}
}

// TestCrashLoopEndsTheSession: an upstream that keeps exiting is not
// started again for ever.
func TestCrashLoopEndsTheSession(t *testing.T) {
	if direct {
		t.Skip("needs the proxy")
	}
	ctx := testContext(t)
	p := connect(t, ctx, proxiedWith(t, []string{"--max-restarts", "1"}, chargeServer()...))
	for i := range 2 {
		// Two different calls: the same one again would be answered from
		// the record (outcome unknown) and never reach the upstream. The
		// second reaches the upstream started again after the first exit.
		res, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "charge_and_crash", Arguments: chargeArgs("4242", float64(100+i))})
		if err != nil || !res.IsError || !strings.HasPrefix(firstText(res), "Outcome unknown:") {
			t.Fatalf("call %d got %v, %v; want outcome unknown: the upstream exited with it", i+1, res, err)
		}
	}
	if code := exitCode(t, ctx, p); code == 0 {
		t.Fatal("the proxy exited 0 after a crash loop")
	}
	if n := strings.Count(p.stderr.String(), "the upstream was started again"); n != 1 {
		t.Errorf("the upstream was started again %d times; want 1 (--max-restarts 1):\n%s", n, p.stderr)
	}
	if !strings.Contains(p.stderr.String(), "keeps exiting") {
		t.Fatalf("stderr does not say the upstream keeps exiting:\n%s", p.stderr)
	}
}
