package cli

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMetricsBadAddress checks that an address --metrics cannot listen on
// stops the proxy with an error naming the flag and the address, before
// the upstream starts.
func TestMetricsBadAddress(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	started := filepath.Join(t.TempDir(), "started")
	stdinR, stdinW := io.Pipe()
	defer stdinW.Close()
	var stdout, stderr bytes.Buffer
	err := Run(ctx, []string{"--metrics", "256.1.1.1:1", "--", "sh", "-c", `touch "$0"; exec cat`, started}, stdinR, &stdout, &stderr)
	if err == nil {
		t.Fatal("Run succeeded with --metrics 256.1.1.1:1")
	}
	for _, w := range []string{"--metrics", "256.1.1.1:1"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Run = %q; want it to name %s", err, w)
		}
	}
	if _, serr := os.Stat(started); serr == nil {
		t.Errorf("the upstream was started although --metrics could not listen")
	}
}

// TestMetricsServed runs the proxy with --metrics and scrapes it while the
// client is connected; once the client leaves, the address is free again.
func TestMetricsServed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := freeAddr(t)

	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	var stderr bytes.Buffer
	errc := make(chan error, 1)
	go func() {
		errc <- Run(ctx, []string{"--log-level", "error", "--metrics", addr, "--", "/bin/cat"}, stdinR, stdoutW, &stderr)
		stdoutW.Close()
	}()

	// A frame through cat and back means the upstream started, which the
	// proxy does only after it is listening on addr.
	frame := `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}`
	if _, err := io.WriteString(stdinW, frame+"\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(stdoutR).ReadString('\n'); err != nil {
		t.Fatalf("reading the proxy's output: %v", err)
	}

	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Errorf("GET /metrics: %s, %q; want 200 and the text exposition", resp.Status, resp.Header.Get("Content-Type"))
	}

	stdinW.Close()
	if err := <-errc; err != nil {
		t.Errorf("Run: %v", err)
	}
	// Run returns only after the metrics server has shut down.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Errorf("the metrics address is still taken after Run returned: %v", err)
	} else {
		ln.Close()
	}
}
