package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The _meta keys the proxy puts on a replayed result (DESIGN.md section 5).
const (
	metaReplayed  = "mcp-idempotent/replayed"
	metaExecution = "mcp-idempotent/execution"
)

// chargeArgs are the arguments of one charge_card call.
func chargeArgs(card string, amount float64) map[string]any {
	return map[string]any{"card": card, "amount": amount}
}

// charge calls charge_card and fails the test on a protocol error or an
// error result.
func charge(t *testing.T, ctx context.Context, p *peer, card string, amount float64) *mcp.CallToolResult {
	t.Helper()
	res, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "charge_card", Arguments: chargeArgs(card, amount)})
	if err != nil {
		t.Fatalf("charge_card %s %v: %v", card, amount, err)
	}
	if res.IsError {
		t.Fatalf("charge_card %s %v: error result %s", card, amount, answer(res))
	}
	return res
}

// executions asks the server how many charges it has made. charges is
// read-only, so the proxy passes it through.
func executions(t *testing.T, ctx context.Context, p *peer) int {
	t.Helper()
	res, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "charges"})
	if err != nil {
		t.Fatalf("charges: %v", err)
	}
	var c struct {
		Total *int `json:"total"`
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &c); err != nil || c.Total == nil {
		t.Fatalf("charges: structured content %s: want {\"total\": N} (%v)", b, err)
	}
	return *c.Total
}

// answer is what a caller sees of a result, without its _meta: content,
// structured content and the error flag, as JSON for comparison and logs.
func answer(res *mcp.CallToolResult) string {
	b, err := json.Marshal(struct {
		Content           []mcp.Content `json:"content"`
		StructuredContent any           `json:"structuredContent,omitempty"`
		IsError           bool          `json:"isError,omitempty"`
	}{res.Content, res.StructuredContent, res.IsError})
	if err != nil {
		return fmt.Sprintf("<%v>", err)
	}
	return string(b)
}

// firstText is the text of res's first content block, or "".
func firstText(res *mcp.CallToolResult) string {
	if len(res.Content) == 0 {
		return ""
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); ok {
		return tc.Text
	}
	return ""
}

func replayed(res *mcp.CallToolResult) bool {
	return res.Meta[metaReplayed] == true
}

// executionID is the "id" of the execution record in res's _meta, or "".
func executionID(res *mcp.CallToolResult) string {
	exe, _ := res.Meta[metaExecution].(map[string]any)
	id, _ := exe["id"].(string)
	return id
}

func metaJSON(res *mcp.CallToolResult) string {
	b, _ := json.Marshal(res.Meta)
	return string(b)
}

// TestSequentialDuplicatesExecuteOnce is the seed benchmark: five identical
// calls, one charge, five equal answers, the last four marked as replays of
// one execution.
func TestSequentialDuplicatesExecuteOnce(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	p := connect(t, ctx, proxied(t, chargeServer()...))

	const calls = 5
	var results []*mcp.CallToolResult
	for range calls {
		results = append(results, charge(t, ctx, p, "4242", 100))
	}

	if direct {
		if got := executions(t, ctx, p); got != calls {
			t.Errorf("direct: charges = %d, want %d", got, calls)
		}
		return
	}
	if got := executions(t, ctx, p); got != 1 {
		t.Errorf("charges = %d after %d identical calls, want 1", got, calls)
	}
	if got, want := firstText(results[0]), "charged 100 to card 4242 (charge #1)"; got != want {
		t.Errorf("first answer text = %q, want %q", got, want)
	}
	if replayed(results[0]) {
		t.Errorf("first answer is marked replayed; _meta = %s", metaJSON(results[0]))
	}
	var firstID string
	for i, res := range results {
		if got, want := answer(res), answer(results[0]); got != want {
			t.Errorf("answer %d = %s, want %s (the first answer)", i+1, got, want)
		}
		if i == 0 {
			continue
		}
		if !replayed(res) {
			t.Errorf("answer %d: _meta[%q] is not true; _meta = %s", i+1, metaReplayed, metaJSON(res))
		}
		id := executionID(res)
		if !strings.HasPrefix(id, "exe_") {
			t.Errorf("answer %d: _meta[%q].id = %q, want exe_...; _meta = %s", i+1, metaExecution, id, metaJSON(res))
		}
		if firstID == "" {
			firstID = id
		} else if id != firstID {
			t.Errorf("answer %d: execution %q, want %q (one execution for all replays)", i+1, id, firstID)
		}
	}
}

// TestSequentialDuplicatesWithoutProxy is the control for the test above:
// the same calls, straight to the server, charge five times. If this fails,
// the counting, not the proxy, is broken.
func TestSequentialDuplicatesWithoutProxy(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	p := connect(t, ctx, unproxied(chargeServer()...))

	const calls = 5
	for i := range calls {
		res := charge(t, ctx, p, "4242", 100)
		if got, want := firstText(res), fmt.Sprintf("charged 100 to card 4242 (charge #%d)", i+1); got != want {
			t.Errorf("answer %d text = %q, want %q", i+1, got, want)
		}
		if replayed(res) || executionID(res) != "" {
			t.Errorf("answer %d: _meta = %s, want no mcp-idempotent keys from a bare server", i+1, metaJSON(res))
		}
	}
	if got := executions(t, ctx, p); got != calls {
		t.Errorf("charges = %d, want %d", got, calls)
	}
}

// TestConcurrentDuplicatesExecuteOnce sends 100 identical calls at once
// while the first is still running: they join one execution.
func TestConcurrentDuplicatesExecuteOnce(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	p := connect(t, ctx, proxied(t, chargeServer("-delay", "300ms")...))

	const calls = 100
	results := make([]*mcp.CallToolResult, calls)
	errs := make([]error, calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			results[i], errs[i] = p.CallTool(ctx, &mcp.CallToolParams{Name: "charge_card", Arguments: chargeArgs("4242", 100)})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}

	want := 1
	if direct {
		want = calls
	}
	if got := executions(t, ctx, p); got != want {
		t.Errorf("charges = %d after %d concurrent identical calls, want %d", got, calls, want)
	}
	if direct {
		return
	}
	nReplayed := 0
	for i, res := range results {
		if got, want := answer(res), answer(results[0]); got != want {
			t.Errorf("answer %d = %s, want %s (answer 0)", i, got, want)
		}
		if replayed(res) {
			nReplayed++
		}
	}
	// One caller's answer is the live one; every other caller attached to
	// its execution and is told so.
	if nReplayed != calls-1 {
		t.Errorf("%d of %d answers marked replayed; want %d", nReplayed, calls, calls-1)
	}
}

// TestDistinctArgumentsExecuteSeparately: calls that differ in an argument
// are different intents, and each one runs.
func TestDistinctArgumentsExecuteSeparately(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	p := connect(t, ctx, proxied(t, chargeServer()...))

	amounts := []float64{100, 200, 300}
	for i, amount := range amounts {
		res := charge(t, ctx, p, "4242", amount)
		if got, want := firstText(res), fmt.Sprintf("charged %v to card 4242 (charge #%d)", amount, i+1); got != want {
			t.Errorf("amount %v: text = %q, want %q", amount, got, want)
		}
		if replayed(res) {
			t.Errorf("amount %v: marked replayed; _meta = %s", amount, metaJSON(res))
		}
	}
	if got := executions(t, ctx, p); got != len(amounts) {
		t.Errorf("charges = %d, want %d", got, len(amounts))
	}
}

// TestCrashAfterDispatchIsOutcomeUnknown: the upstream charges and dies
// before answering. The caller must learn that the outcome is unknown (not
// a bare error that invites a blind retry), and the proxy, having lost its
// upstream, exits non-zero.
func TestCrashAfterDispatchIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	cmd := proxied(t, chargeServer()...)
	if !direct {
		// Without restarts, the upstream's exit ends the session.
		cmd = proxiedWith(t, []string{"--max-restarts", "0"}, chargeServer()...)
	}
	p := connect(t, ctx, cmd)

	res, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "charge_and_crash", Arguments: chargeArgs("4242", 100)})
	if direct {
		// A bare server just goes away: the client sees a closed connection.
		if err == nil {
			t.Errorf("direct: charge_and_crash = %s, want a connection error", answer(res))
		}
		if code := exitCode(t, ctx, p); code != 3 {
			t.Errorf("direct: chargeserver exit status = %d, want 3", code)
		}
		return
	}
	if err != nil {
		t.Fatalf("charge_and_crash: %v; want a CallToolResult saying the outcome is unknown", err)
	}
	if !res.IsError {
		t.Errorf("charge_and_crash: isError = false, want true; answer = %s", answer(res))
	}
	text := firstText(res)
	if !strings.HasPrefix(text, "Outcome unknown:") || !strings.Contains(text, "exe_") {
		t.Errorf("charge_and_crash: first text = %q, want it to begin with %q and name the execution (exe_...)", text, "Outcome unknown:")
	}
	code := exitCode(t, ctx, p)
	if code == 0 {
		t.Errorf("proxy exit status = 0 after its upstream died, want non-zero")
	}
	t.Logf("answer: %s; proxy exit status %d", text, code)
}

// exitCode waits for p's process to end by itself (it closes its stdout, so
// the session ends) and returns its exit status. A process that does not
// end fails the test and is then stopped by closing the session.
func exitCode(t *testing.T, ctx context.Context, p *peer) int {
	t.Helper()
	ended := make(chan struct{})
	go func() {
		_ = p.Wait()
		close(ended)
	}()
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	select {
	case <-ended:
	case <-waitCtx.Done():
		t.Errorf("%s did not exit within 10s of its upstream dying", p.cmd)
	}
	// Close reaps the process (closing stdin, then signalling if need be).
	_ = p.Close()
	<-ended
	return p.cmd.ProcessState.ExitCode()
}

// TestRetryAfterCancel: a caller gives up on a call the server has already
// received (its answer is lost to it), then retries. The retry must get the
// first execution's answer, marked as a replay, and not charge again:
// whether it arrives while that execution is still running (it attaches) or
// after it completed with no one left to deliver to ("completed, result not
// delivered", DESIGN.md section 4).
func TestRetryAfterCancel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// waitForAnswer: retry only once the server has answered the
		// cancelled call.
		waitForAnswer bool
	}{
		{"while running", false},
		{"after the answer was lost", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			p := connect(t, ctx, proxied(t, chargeServer("-delay", "500ms")...))

			firstCtx, cancelFirst := context.WithCancel(ctx)
			defer cancelFirst()
			firstErr := make(chan error, 1)
			go func() {
				_, err := p.CallTool(firstCtx, &mcp.CallToolParams{Name: "charge_card", Arguments: chargeArgs("4242", 100)})
				firstErr <- err
			}()

			// The server counts a charge before its delay, so a count of 1
			// means the call reached it and is now waiting to answer.
			waitForExecutions(t, ctx, p, 1)
			cancelFirst()
			if err := <-firstErr; !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled call: err = %v, want context.Canceled", err)
			}
			// The client sends notifications/cancelled after CallTool
			// returns; wait until it is on the wire, so the retry comes after
			// it, as it would from a caller that gave up and came back.
			if err := p.frames.waitFor(ctx, `"method":"notifications/cancelled"`); err != nil {
				t.Fatal(err)
			}
			if tc.waitForAnswer {
				// The server's log reaches us through the proxy's stderr.
				if err := p.stderr.waitFor(ctx, "n=1: answered"); err != nil {
					t.Fatal(err)
				}
			}

			res := charge(t, ctx, p, "4242", 100)
			want := 1
			if direct {
				want = 2
			}
			if got := executions(t, ctx, p); got != want {
				t.Errorf("charges = %d after a cancelled call and its retry, want %d", got, want)
			}
			if direct {
				return
			}
			if got, want := firstText(res), "charged 100 to card 4242 (charge #1)"; got != want {
				t.Errorf("retry: text = %q, want %q (the first execution's answer)", got, want)
			}
			if !replayed(res) {
				t.Errorf("retry: _meta[%q] is not true; _meta = %s", metaReplayed, metaJSON(res))
			}
			if id := executionID(res); !strings.HasPrefix(id, "exe_") {
				t.Errorf("retry: _meta[%q].id = %q, want exe_...; _meta = %s", metaExecution, id, metaJSON(res))
			}
		})
	}
}

// waitForExecutions waits until the server reports n charges. It watches
// the server's state, which has no push notification, so it asks again
// every few milliseconds until the test's context ends.
func waitForExecutions(t *testing.T, ctx context.Context, p *peer, n int) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if got := executions(t, ctx, p); got >= n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %d charges: %v", n, ctx.Err())
		case <-tick.C:
		}
	}
}

// TestArgumentSpellingDoesNotMatter: key order, white space and number
// spelling do not change the intent (DESIGN.md section 3), so these are
// one charge. The arguments go on the wire exactly as written here.
func TestArgumentSpellingDoesNotMatter(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	p := connect(t, ctx, proxied(t, chargeServer()...))

	spellings := []string{
		`{"card":"4242","amount":100}`,
		`{"amount":100,"card":"4242"}`,
		`{ "card" : "4242" , "amount" : 1e2 }`,
		`{"amount":100.0,"card":"4242"}`,
	}
	var first *mcp.CallToolResult
	for _, args := range spellings {
		res, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "charge_card", Arguments: json.RawMessage(args)})
		if err != nil {
			t.Fatalf("charge_card %s: %v", args, err)
		}
		if first == nil {
			first = res
		} else if !direct && answer(res) != answer(first) {
			t.Errorf("charge_card %s = %s, want %s (the first answer)", args, answer(res), answer(first))
		}
	}
	want := 1
	if direct {
		want = len(spellings)
	}
	if got := executions(t, ctx, p); got != want {
		t.Errorf("charges = %d after %d spellings of one call, want %d", got, len(spellings), want)
	}
}

// metaKey is where a client names its own idempotency key (DESIGN.md section 3).
const metaKey = "mcp-idempotent/key"

// TestProxyExitsWhenClientCloses: closing stdin is how a stdio client ends
// the session (MCP lifecycle, stdio shutdown); the proxy must exit 0 by
// itself, before the client resorts to signals.
func TestProxyExitsWhenClientCloses(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	p := connect(t, ctx, proxied(t, chargeServer()...))
	charge(t, ctx, p, "4242", 100)

	start := time.Now()
	err := p.Close()
	if elapsed := time.Since(start); elapsed >= terminateDuration {
		t.Errorf("closing took %v: %s did not exit on stdin EOF and had to be signalled", elapsed, p.cmd)
	}
	if err != nil || p.cmd.ProcessState.ExitCode() != 0 {
		t.Errorf("%s ended with %v (%v), want exit status 0", p.cmd, p.cmd.ProcessState, err)
	}
}

// TestUpstreamThatCannotStart: the client must not be left waiting, and the
// proxy must say what failed and exit non-zero.
func TestUpstreamThatCannotStart(t *testing.T) {
	if direct {
		t.Skip("needs the proxy")
	}
	t.Parallel()
	ctx := testContext(t)
	missing := filepath.Join(t.TempDir(), "no-such-server")
	cmd := proxied(t, missing)
	stderr := new(syncBuffer)
	cmd.Stderr = stderr

	connectFails(t, ctx, cmd, "a proxy whose upstream cannot start")
	if code := cmd.ProcessState.ExitCode(); code == 0 {
		t.Errorf("proxy exit status = 0, want non-zero")
	}
	if !strings.Contains(stderr.String(), missing) {
		t.Errorf("proxy stderr does not name the upstream %s:\n%s", missing, stderr)
	}
}

// connectFails connects the go-sdk client through cmd, a proxy that is
// to refuse the session (what names it), and returns the client's error
// once the proxy has exited.
func connectFails(t *testing.T, ctx context.Context, cmd *exec.Cmd, what string) error {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "mcpi-e2e", Version: "0.0.1"}, nil)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: terminateDuration}, nil)
	if err == nil {
		_ = cs.Close()
		t.Fatalf("connecting through %s: no error", what)
	}
	// Connect has closed the transport, which waited for the process.
	if cmd.ProcessState == nil && cmd.Process != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	return err
}

// TestProxyInFrontOfProxy: one mcp-idempotent in front of another (as with
// a proxy in a client's config before a team's serve) works: each uses
// ids of its own upstream, and identical calls still charge once.
func TestProxyInFrontOfProxy(t *testing.T) {
	t.Parallel()
	if direct {
		t.Skip("needs the proxy")
	}
	ctx := testContext(t)
	p := connect(t, ctx, proxied(t, append([]string{proxyBin, "--"}, chargeServer()...)...))
	first := charge(t, ctx, p, "4242", 100)
	again := charge(t, ctx, p, "4242", 100)
	if got := executions(t, ctx, p); got != 1 {
		t.Errorf("charges = %d after two identical calls through two proxies, want 1", got)
	}
	if answer(first) != answer(again) || !replayed(again) {
		t.Errorf("second answer %s (_meta %s); want the first's, %s, replayed", answer(again), metaJSON(again), answer(first))
	}
}
