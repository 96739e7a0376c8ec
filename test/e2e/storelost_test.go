package e2e

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-idempotent/mcp-idempotent/internal/servicetest"
)

// TestRedisLostItsDataWhileACallRan: Redis loses the proxy's keys (as a
// restart without persistence would) while a charge is under way. The
// proxy writes the execution again with its outcome, and the secret: the
// caller gets the charge, a retry replays it, so does a proxy started
// since, and the card is charged once.
func TestRedisLostItsDataWhileACallRan(t *testing.T) {
	if direct {
		t.Skip("needs the proxy")
	}
	u := serviceURL(t, "MCPI_REDIS_URL", "redis://127.0.0.1:6379/0")
	if u == "" {
		t.Skip("needs Redis")
	}
	prefix := "mcpi-e2e-lost-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	t.Cleanup(func() { servicetest.DropKeys(t, u, prefix) })
	ctx := testContext(t)
	flags := []string{"--store", withQuery(u, "prefix", prefix), "--scope", "actor", "--actor", "alice", "--log-level", "debug"}
	p := connect(t, ctx, proxiedWith(t, flags, chargeServer("-gate")...))
	if err := p.stderr.waitFor(ctx, `msg="upstream started"`); err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(upstreamPID.FindStringSubmatch(p.stderr.String())[1])

	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	first := make(chan answer, 1)
	go func() {
		res, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "charge_card", Arguments: chargeArgs("4242", 100)})
		first <- answer{res, err}
	}()
	if err := p.stderr.waitFor(ctx, "charge_card card=4242 n=1: waiting for SIGUSR1"); err != nil {
		t.Fatal(err)
	}
	servicetest.DropKeys(t, u, prefix)
	if err := openGate(pid); err != nil {
		t.Fatal(err)
	}
	a := <-first
	const want = "charged 100 to card 4242 (charge #1)"
	if a.err != nil || firstText(a.res) != want {
		t.Fatalf("the call under way as Redis lost its data got %v, %v; want %q", a.res, a.err, want)
	}
	res, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "charge_card", Arguments: chargeArgs("4242", 100)})
	if err != nil || firstText(res) != want {
		t.Fatalf("calling again got %v, %v; want %q replayed", res, err, want)
	}
	if n := executions(t, ctx, p); n != 1 {
		t.Fatalf("charge_card ran %d times; want 1", n)
	}
	// The proxy wrote the secret the store lost again: one started since
	// signs as it does, and replays the charge too.
	later := connect(t, ctx, proxiedWith(t, flags, chargeServer("-gate")...))
	res, err = later.CallTool(ctx, &mcp.CallToolParams{Name: "charge_card", Arguments: chargeArgs("4242", 100)})
	if err != nil || firstText(res) != want {
		t.Fatalf("a proxy started after the loss got %v, %v; want %q replayed", res, err, want)
	}
	if n := executions(t, ctx, later); n != 0 {
		t.Fatalf("a proxy started after the loss ran charge_card %d times; want 0", n)
	}
	if !strings.Contains(p.stderr.String(), "it is written again, with its outcome") {
		t.Errorf("the proxy did not say it wrote the lost execution again")
	}
}
