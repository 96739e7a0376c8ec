package e2e

import (
	"encoding/json"
	"strings"
	"testing"
)

// dyingServer is an upstream that starts, says why it cannot serve on
// stderr, and exits 3; its last argument stands for a credential.
var dyingServer = []string{"sh", "-c", `echo "loading config" >&2; echo "fatal: MCP_TOKEN is not set" >&2; exit 3`, "sh", "--api-key=s3cret"}

// checkCause checks that the error a client got for initialize names the
// upstream's exit status and the end of its stderr, and not its
// arguments.
func checkCause(t *testing.T, msg string) {
	t.Helper()
	// "closed before answering initialize", or, once the upstream is
	// gone for good, "not running; initialize was not sent".
	for _, want := range []string{"initialize", "exited with status 3", "fatal: MCP_TOKEN is not set"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the client's error %q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, "s3cret") {
		t.Errorf("the client's error %q shows the upstream's arguments", msg)
	}
}

// TestUpstreamExitCauseReachesTheClient: a stdio client whose upstream
// exits at start learns why from the error to its initialize, not only
// that the upstream closed.
func TestUpstreamExitCauseReachesTheClient(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	cmd := proxiedWith(t, nil, dyingServer...)
	stderr := new(syncBuffer)
	cmd.Stderr = stderr
	err := connectFails(t, ctx, cmd, "a proxy whose upstream exits at start")
	checkCause(t, err.Error())
	if !strings.Contains(stderr.String(), "fatal: MCP_TOKEN is not set") {
		t.Errorf("the upstream's stderr did not reach the proxy's:\n%s", stderr)
	}
}

// TestServeUpstreamExitCauseReachesTheClient: the same through serve,
// where the client never sees the proxy's stderr.
func TestServeUpstreamExitCauseReachesTheClient(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s := startServe(t, append([]string{"--"}, dyingServer...)...)
	rep := rawRequest(t, ctx, httpClient(t), "POST", s.url, postHeaders(nil),
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"mcpi-e2e","version":"0.0.1"}}}`)
	var data string
	for line := range strings.SplitSeq(rep.body, "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			data = d
		}
	}
	var answer struct {
		Error *struct{ Message string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(data), &answer); err != nil || answer.Error == nil {
		t.Fatalf("initialize got %d %q; want an SSE event holding a JSON-RPC error", rep.status, rep.body)
	}
	checkCause(t, answer.Error.Message)
}
