package cli

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// instantServer answers every tools/call at once, and the handshake.
var instantServer = []string{"/bin/sh", "-c", `while IFS= read -r l; do
id=$(printf '%s' "$l" | sed 's/.*"id":\([^,}]*\).*/\1/')
case "$l" in
*'"tools/call"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"charged"}]}}\n' "$id";;
*'"tools/list"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[]}}\n' "$id";;
*'"id":'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"sh","version":"1"}}}\n' "$id";;
esac; done`}

// TestSQLiteReplayFromARead: with the SQLite store, a call made again is
// answered from a read of the store alone (docs/stores.md): the proxy's
// metrics count one reservation for the two calls, and a read for each.
func TestSQLiteReplayFromARead(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr := freeAddr(t)
	store := "sqlite:" + filepath.Join(t.TempDir(), "records.db")

	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	var stderr bytes.Buffer
	errc := make(chan error, 1)
	go func() {
		args := append([]string{"--log-level", "error", "--store", store, "--metrics", addr, "--"}, instantServer...)
		errc <- Run(ctx, args, stdinR, stdoutW, &stderr)
		stdoutW.Close()
	}()
	out := bufio.NewReader(stdoutR)
	roundTrip := func(frame string) string {
		t.Helper()
		if _, err := io.WriteString(stdinW, frame+"\n"); err != nil {
			t.Fatal(err)
		}
		line, err := out.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the answer to %s: %v; stderr: %s", frame, err, stderr.String())
		}
		return line
	}
	roundTrip(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	call := `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":5}}}`
	first := roundTrip(strings.Replace(call, "%d", "1", 1))
	// The delivery is recorded after the answer: until then a call made
	// again records it, a write, and goes to a worker.
	for !strings.Contains(scrapeMetrics(t, addr), `mcp_idempotent_transitions_total{state="delivered",tool="unlisted"} 1`) {
		if ctx.Err() != nil {
			t.Fatal("the first call's delivery was never recorded")
		}
		time.Sleep(10 * time.Millisecond)
	}
	again := roundTrip(strings.Replace(call, "%d", "2", 1))
	if !strings.Contains(first, `"charged"`) || !strings.Contains(again, `"charged"`) || !strings.Contains(again, `"mcp-idempotent/replayed":true`) {
		t.Fatalf("answers:\n%s%s; want the result, then it replayed", first, again)
	}

	body := scrapeMetrics(t, addr)
	for _, want := range []string{
		`mcp_idempotent_store_seconds_count{op="replay"} 2` + "\n",
		`mcp_idempotent_store_seconds_count{op="reserve"} 1` + "\n",
		`decision="replayed"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the metrics lack %s:\n%s", want, grepLines(body, "mcp_idempotent_"))
		}
	}
	stdinW.Close()
	if err := <-errc; err != nil {
		t.Fatalf("Run: %v; stderr: %s", err, stderr.String())
	}
}

// freeAddr returns a loopback address no one listens on, for a server
// the test must know the address of.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// scrapeMetrics returns what the proxy serves at addr/metrics.
func scrapeMetrics(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			b.WriteString(line)
		}
	}
	return b.String()
}
