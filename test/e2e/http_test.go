package e2e

import (
	"bufio"
	"os/exec"
	"strings"
	"testing"
)

// httpChargeServer starts the charge server on Streamable HTTP and returns
// its URL.
func httpChargeServer(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(chargeBin, "-http", "127.0.0.1:0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("the HTTP charge server did not say where it listens: %v", err)
	}
	return strings.TrimSpace(line)
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
