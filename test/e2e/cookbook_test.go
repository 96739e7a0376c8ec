package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The cookbook's recipes (docs/policy-cookbook.md) are run here as the
// page gives them, with only the tool and field names changed to the
// chargeserver's, and must behave as the text under each says.
// internal/policy's docs test checks only that they parse.

// cookbookRecipe is the yaml block under the cookbook's heading "## "+title,
// with names replaced by oldnew (pairs, as strings.NewReplacer takes).
func cookbookRecipe(t *testing.T, title string, oldnew ...string) string {
	t.Helper()
	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "policy-cookbook.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(page), "\n## "+title+"\n")
	if !ok {
		t.Fatalf("the cookbook has no section %q", title)
	}
	_, block, ok := strings.Cut(section, "```yaml\n")
	block, _, closed := strings.Cut(block, "```")
	if !ok || !closed {
		t.Fatalf("the cookbook's section %q has no yaml block", title)
	}
	return strings.NewReplacer(oldnew...).Replace(block)
}

// TestCookbookPayment: two charges that differ only in the ignored member
// are one charge, and under scope: actor a new proxy process on the
// durable store replays it.
func TestCookbookPayment(t *testing.T) {
	needProxy(t)
	recipe := cookbookRecipe(t, "A payment", "create_charge", "charge_card", "metadata.trace_id", "note")
	flags := append([]string{"--store", "sqlite:" + filepath.Join(t.TempDir(), "records.db"), "--actor", "alice"}, withPolicy(t, recipe)...)
	withNote := func(note string) *mcp.CallToolParams {
		return &mcp.CallToolParams{Name: "charge_card", Arguments: map[string]any{"card": "4242", "amount": 30, "note": note}}
	}
	ctx := testContext(t)
	p := connect(t, ctx, proxiedWith(t, flags, chargeServer()...))
	first := call(t, ctx, p, withNote("trace-1"))
	again := call(t, ctx, p, withNote("trace-2"))
	if !replayed(again) || answer(again) != answer(first) || executions(t, ctx, p) != 1 {
		t.Fatalf("a charge differing only in its trace id: replayed %v, %s after %s, %d charges; want the first replayed, one charge",
			replayed(again), answer(again), answer(first), executions(t, ctx, p))
	}
	p.Close()

	p = connect(t, ctx, proxiedWith(t, flags, chargeServer()...))
	later := call(t, ctx, p, withNote("trace-3"))
	if !replayed(later) || answer(later) != answer(first) || executions(t, ctx, p) != 0 {
		t.Fatalf("the charge through a new proxy: replayed %v, %s, %d charges there; want the first replayed, none run",
			replayed(later), answer(later), executions(t, ctx, p))
	}
}

// TestCookbookDeploy: an execution whose answer was lost is settled by
// the status tool, asked with the execution id: a "done" status completes
// it with the status result, and nothing is sent again.
func TestCookbookDeploy(t *testing.T) {
	needProxy(t)
	recipe := cookbookRecipe(t, "A deploy", "deploy_service", "pay", "get_deployment", "payment_status",
		"request_id", "execution_id", "path: state", "path: status", "[succeeded]", "[done]")
	dir := t.TempDir()
	store, ledger := "sqlite:"+filepath.Join(dir, "records.db"), filepath.Join(dir, "ledger")

	first, p := paySession(t, store, ledger, recipe)
	if !strings.HasPrefix(firstText(first), "Outcome unknown:") {
		t.Fatalf("the call whose upstream died got %q; want outcome unknown", firstText(first))
	}
	exitCode(t, testContext(t), p)
	second, _ := paySession(t, store, ledger, recipe)
	if second.IsError || executionID(second) != executionID(first) || !strings.Contains(metaJSON(second)+answer(second), `"status":"done"`) {
		t.Fatalf("the call after the status check got %s (_meta %s); want the status result, for execution %s",
			answer(second), metaJSON(second), executionID(first))
	}
	if ids := ledgerIDs(t, ledger); len(ids) != 1 {
		t.Fatalf("the upstream ran pay %d times (%v); a done status sends nothing again", len(ids), ids)
	}
}

// TestCookbookDelete: class idempotent shares nothing once a call has
// answered: a later identical call runs again, and is no replay.
func TestCookbookDelete(t *testing.T) {
	needProxy(t)
	recipe := cookbookRecipe(t, "A delete", "delete_file", "set_counter")
	ctx := testContext(t)
	p := connect(t, ctx, proxiedWith(t, withPolicy(t, recipe), chargeServer()...))
	params := &mcp.CallToolParams{Name: "set_counter", Arguments: map[string]any{"value": 7}}
	call(t, ctx, p, params)
	if again := call(t, ctx, p, params); replayed(again) || runs(t, ctx, p, "set_counter") != 2 {
		t.Fatalf("a later identical call: replayed %v, %d runs; want it run again", replayed(again), runs(t, ctx, p, "set_counter"))
	}
}
