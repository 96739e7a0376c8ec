package e2e

import (
	"bufio"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// httpChargeServer starts the charge server on Streamable HTTP and returns
// its URL.
func httpChargeServer(t *testing.T) string {
	t.Helper()
	url, _ := httpChargeServerAt(t, "127.0.0.1:0")
	return url
}

// httpChargeServerAt starts the charge server on Streamable HTTP at addr,
// and returns its URL and a function that stops it.
func httpChargeServerAt(t *testing.T, addr string) (string, func()) {
	t.Helper()
	cmd := exec.Command(chargeBin, "-http", addr)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stop := func() {
		cmd.Process.Kill()
		cmd.Wait()
	}
	t.Cleanup(stop)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the HTTP charge server did not say where it listens: %v", err)
	}
	return strings.TrimSpace(line), stop
}

// TestHTTPUpstream: the proxy in front of a Streamable HTTP server (the
// go-sdk's), driven over stdio by the go-sdk client: retries run once.
func TestHTTPUpstream(t *testing.T) {
	if direct {
		t.Skip("needs the proxy")
	}
	url := httpChargeServer(t)
	ctx := testContext(t)
	p := connect(t, ctx, proxiedWith(t, []string{"--upstream", url, "--upstream-header", "Authorization: Bearer t0ken"}))
	var first string
	for i := range 5 {
		res := charge(t, ctx, p, "4242", 100)
		if i == 0 {
			first = firstText(res)
		} else if firstText(res) != first || !replayed(res) {
			t.Fatalf("call %d got %q (replayed %v); want the first answer %q replayed", i+1, firstText(res), replayed(res), first)
		}
	}
	if n := executions(t, ctx, p); n != 1 {
		t.Fatalf("the HTTP upstream ran charge_card %d times for 5 identical calls; want 1", n)
	}
	if strings.Contains(p.stderr.String(), "t0ken") {
		t.Fatal("the credential appeared in the proxy's log")
	}
}

// TestHTTPSessionExpiry: the upstream server restarts and forgets the
// session. The proxy's next request gets 404; the proxy starts a new
// session, replaying the client's handshake, and the client carries on
// without reconnecting.
func TestHTTPSessionExpiry(t *testing.T) {
	if direct {
		t.Skip("needs the proxy")
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	url, stop := httpChargeServerAt(t, addr)
	ctx := testContext(t)
	p := connect(t, ctx, proxiedWith(t, []string{"--upstream", url}))
	charge(t, ctx, p, "4242", 1)

	stop()
	httpChargeServerAt(t, addr) // a new server: the old session is unknown to it
	// The first request after the restart meets the 404; it did not run.
	if _, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "charge_card", Arguments: chargeArgs("4242", 2)}); err == nil || !strings.Contains(err.Error(), "session expired") {
		t.Fatalf("the call that met the expired session got %v; want an error saying the session expired", err)
	}
	if err := p.stderr.waitFor(ctx, "the upstream was started again"); err != nil {
		t.Fatalf("the proxy did not start a new session: %v", err)
	}
	if got := firstText(charge(t, ctx, p, "4242", 3)); !strings.Contains(got, "charge #1") {
		t.Fatalf("the next call got %q; want it to run in the new session", got)
	}
}
