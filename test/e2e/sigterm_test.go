//go:build unix

package e2e

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Both MCP SDKs stop a stdio server by closing its stdin, waiting 2 s,
// sending SIGTERM, and sending SIGKILL 2 s after that.
const (
	sdkTermAfter = 2 * time.Second
	sdkKillAfter = 2 * time.Second
)

// TestSIGTERMAfterStdinClosed: a client stops the proxy as the SDKs do,
// in front of an upstream that neither exits on stdin EOF nor on SIGTERM.
// The proxy must act on the SIGTERM at once: stop its upstream and exit
// before the SIGKILL would come, rather than be killed and leave the
// upstream running (the kernel's SIGTERM on the proxy's death is ignored
// by it too).
func TestSIGTERMAfterStdinClosed(t *testing.T) {
	needProxy(t)
	t.Parallel()
	ctx := testContext(t)
	pidFile := filepath.Join(t.TempDir(), "upstream.pid")
	// The chargeserver serves until its stdin ends; then the shell that
	// ran it, SIGTERM ignored, holds the upstream's stdout until killed.
	upstream := []string{"sh", "-c", `echo $$ > "$0"; trap '' TERM; "$@"; while :; do sleep 1; done`, pidFile, chargeBin}
	cmd := proxiedWith(t, nil, upstream...)
	stdin, stdout, stderr := startPiped(t, cmd)
	exited := make(chan time.Time, 1)
	go func() {
		_ = cmd.Wait()
		exited <- time.Now()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("stderr of %s:\n%s", cmd, stderr.tail(transcriptTail))
		}
	})

	// Closing the session closes the proxy's stdin, and only that: the
	// proxy writing to a closed stdout would be another test.
	client := mcp.NewClient(&mcp.Implementation{Name: "mcpi-e2e", Version: "0.0.1"}, nil)
	cs, err := client.Connect(ctx, &mcp.IOTransport{Reader: io.NopCloser(stdout), Writer: stdin}, nil)
	if err != nil {
		t.Fatalf("connecting: %v", err)
	}
	p := &peer{ClientSession: cs, cmd: cmd, stderr: stderr}
	charge(t, ctx, p, "4242", 100)
	pid := upstreamPid(t, pidFile)
	t.Cleanup(func() {
		// Only while pid is still that shell: its command line names
		// the test's own pid file.
		if b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline")); err == nil && strings.Contains(string(b), pidFile) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	if err := cs.Close(); err != nil {
		t.Fatalf("closing the session: %v", err)
	}

	// The SDKs' schedule, not a wait for an event: the signal must find
	// the proxy where a client's would, with the upstream not yet gone.
	select {
	case at := <-exited:
		t.Fatalf("the proxy exited %v before the SIGTERM, with an upstream that ignores stdin EOF", at)
	case <-time.After(sdkTermAfter + sdkTermAfter/4):
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	signalled := time.Now()
	var took time.Duration
	select {
	case at := <-exited:
		took = at.Sub(signalled)
	case <-time.After(10 * time.Second):
		t.Fatal("the proxy did not exit within 10 s of SIGTERM")
	}
	// The SDK's SIGKILL comes 2 s after its SIGTERM; 0.1 s is left for the
	// SDK's own timer and the kernel. The proxy takes about 0.5 s: two
	// hurried steps of 250 ms to stop its upstream.
	if limit := sdkKillAfter - 100*time.Millisecond; took >= limit {
		t.Errorf("the proxy exited %v after SIGTERM; want under %v, before the SDK's SIGKILL", took, limit)
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Errorf("the proxy was ended by %v; want it to exit by itself", ws.Signal())
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the upstream (pid %d) is still there after the proxy exited: kill -0 gave %v", pid, err)
	}
	t.Logf("the proxy exited %v after SIGTERM", took)
}

// upstreamPid reads the pid the upstream wrote to file.
func upstreamPid(t *testing.T, file string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("reading the upstream's pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		t.Fatalf("the upstream's pid file holds %q", b)
	}
	return pid
}

// TestSIGHUPStopsLikeSIGTERM: a hangup, as the terminal or ssh session
// that started the proxy sends when it closes, stops the proxy as SIGTERM
// does: the call under way is answered as unknown, not left unanswered
// by a process the signal killed outright.
func TestSIGHUPStopsLikeSIGTERM(t *testing.T) {
	needProxy(t)
	t.Parallel()
	ctx := testContext(t)
	p := connect(t, ctx, proxiedWith(t, nil, chargeServer("-delay", "30s")...))
	answered := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "charge_card", Arguments: chargeArgs("4242", 100)})
		if err != nil {
			t.Logf("charge_card: %v", err)
		}
		answered <- res
	}()
	if err := p.stderr.waitFor(ctx, "charge_card card=4242"); err != nil {
		t.Fatalf("the server never received the call: %v", err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if res := <-answered; res == nil || !strings.HasPrefix(firstText(res), "Outcome unknown:") {
		t.Errorf("the call under way at SIGHUP got %v; want an Outcome unknown result", res)
	}
	_ = p.Close()
	if ps := p.cmd.ProcessState; ps == nil {
		t.Error("the proxy had not exited after the session closed")
	} else if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Errorf("the proxy was ended by %v; want it to stop by itself", ws.Signal())
	}
}

// TestSIGINTIgnoredStaysIgnored: a shell starts a background job
// (`mcp-idempotent ... &` in a script) with SIGINT ignored, so that a
// Ctrl-C meant for the script leaves the job running. The proxy must keep
// it ignored, as it does a SIGHUP that nohup ignores, rather than stop on
// it.
func TestSIGINTIgnoredStaysIgnored(t *testing.T) {
	needProxy(t)
	t.Parallel()
	ctx := testContext(t)
	// exec: the shell's pid becomes the proxy's, with SIGINT ignored.
	cmd := exec.Command("sh", "-c", `trap '' INT; exec "$0" "$@"`, proxyBin, "--", chargeBin)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0 halt_on_error=1")
	p := connect(t, ctx, cmd)
	charge(t, ctx, p, "4242", 100)

	// Once the proxy answers, main has set up its signals: SIGINT must
	// still be ignored, not caught (Linux shows both in /proc).
	if b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "status")); err == nil {
		if ign, ok := sigMask(string(b), "SigIgn:"); !ok || ign&(1<<(int(syscall.SIGINT)-1)) == 0 {
			t.Errorf("the proxy does not ignore SIGINT, which it was started ignoring (/proc status SigIgn %x)", ign)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	charge(t, ctx, p, "4343", 100)
	if err := p.Ping(ctx, nil); err != nil {
		t.Fatalf("ping after SIGINT: %v", err)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = p.Close()
	if ps := cmd.ProcessState; ps == nil {
		t.Error("the proxy had not exited after SIGTERM and the session closed")
	} else if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Errorf("the proxy was ended by %v; want it to stop by itself", ws.Signal())
	}
}

// sigMask reads the hexadecimal signal mask on the line of status that
// starts with field.
func sigMask(status, field string) (uint64, bool) {
	for line := range strings.Lines(status) {
		if v, ok := strings.CutPrefix(line, field); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return n, err == nil
		}
	}
	return 0, false
}
