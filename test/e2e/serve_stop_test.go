package e2e

import (
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestServeSecondSignalStopsNow: serve told to stop waits for a call
// under way (up to the grace) and says so; a second signal ends that wait,
// and the call is answered at once, as a stdio proxy told to stop answers
// it.
func TestServeSecondSignalStopsNow(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s := serveCharge(t, []string{"--log-level", "debug"}, "-gate")
	p := connectHTTP(t, ctx, s, s.url, "", nil, nil)
	called := make(chan error, 1)
	go func() {
		_, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "charge_card", Arguments: chargeArgs("4242", 100)})
		called <- err
	}()
	if err := s.stderr.waitFor(ctx, "charge_card card=4242 n=1: waiting for SIGUSR1"); err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := s.stderr.waitFor(ctx, "signal again to stop them now"); err != nil {
		t.Fatalf("serve did not say it waits for the call under way: %v", err)
	}
	if err := s.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := s.stderr.waitFor(ctx, "told to stop; calls still under way are answered now"); err != nil {
		t.Fatalf("a second signal did not end the wait: %v", err)
	}
	<-called // answered (outcome unknown) or cut off as serve exits
	if out := s.stderr.String(); strings.Contains(out, "requests still under way at shutdown") {
		t.Errorf("serve waited out the grace after a second signal:\n%s", out)
	}
}
