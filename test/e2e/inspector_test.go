package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"testing"
	"time"
)

// The MCP Inspector's command line (@modelcontextprotocol/inspector --cli,
// pinned in test/npm) as a client of the proxy: one process, one session,
// one request, as a user scripts it.

// inspector runs the Inspector's command line with args and returns what
// it printed, failing t if it exits with an error.
func inspector(t *testing.T, ctx context.Context, args ...string) []byte {
	t.Helper()
	node, entry := nodePeer(t, "node_modules", "@modelcontextprotocol", "inspector", "clients", "launcher", "build", "index.js")
	cmd := exec.CommandContext(ctx, node, append([]string{entry, "--cli"}, args...)...)
	// It keeps a catalog and a store under the home directory.
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "GORACE=atexit_sleep_ms=0 halt_on_error=1")
	var stderr syncBuffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("inspector --cli %q: %v\nstdout:\n%s\nstderr:\n%s", args, err, out, &stderr)
	}
	return out
}

func TestInspectorListsAsDirectly(t *testing.T) {
	t.Parallel()
	needProxy(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, method := range []string{"tools/list", "prompts/list", "resources/list"} {
		direct := inspector(t, ctx, append([]string{"--method", method, "--"}, everythingServer(t)...)...)
		proxied := inspector(t, ctx, append([]string{"--method", method, "--", proxyBin, "--"}, everythingServer(t)...)...)
		if string(proxied) != string(direct) {
			t.Errorf("%s differs through the proxy:\nproxied: %s\ndirect:  %s", method, proxied, direct)
		}
	}
}

func TestInspectorRetryWithKeyReplays(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// One server for every session, which counts the charges of all.
	s := startServe(t, "--upstream", httpChargeServer(t))

	// Two runs with one key: the second is a retry of the first from a
	// new session, as a script that lost the answer runs it again.
	charge := func() (res struct {
		Meta    map[string]any `json:"_meta"`
		Content []struct{ Text string }
	}) {
		out := inspector(t, ctx, s.url, "--method", "tools/call", "--tool-name", "charge_card",
			"--tool-arg", "amount=500", "--tool-arg", "card=visa-1", "--tool-metadata", "idempotencyKey=order-1")
		if err := json.Unmarshal(out, &res); err != nil || len(res.Content) != 1 {
			t.Fatalf("charge_card printed %s (%v); want a result with one text", out, err)
		}
		return res
	}
	first, again := charge(), charge()
	if first.Meta["mcp-idempotent/replayed"] != nil {
		t.Errorf("the first call is marked a replay: %v", first.Meta)
	}
	if again.Meta["mcp-idempotent/replayed"] != true {
		t.Errorf("the retry is not marked a replay: %v", again.Meta)
	}
	if again.Content[0].Text != first.Content[0].Text {
		t.Errorf("the retry got %q; the first call %q", again.Content[0].Text, first.Content[0].Text)
	}

	var count struct{ StructuredContent struct{ Total int } }
	out := inspector(t, ctx, s.url, "--method", "tools/call", "--tool-name", "charges")
	if err := json.Unmarshal(out, &count); err != nil || count.StructuredContent.Total != 1 {
		t.Errorf("charges printed %s (%v); want a total of 1", out, err)
	}
}
