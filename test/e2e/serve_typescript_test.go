package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-idempotent/mcp-idempotent/internal/skipnote"
)

// nodePeer returns node and the path of file under test/npm. It skips the
// test when either is missing, or fails it under MCPI_REQUIRE_SERVICES=1.
func nodePeer(t *testing.T, file ...string) (node, path string) {
	t.Helper()
	missing := func(why string) {
		t.Helper()
		skipnote.Unavailable(t, "npm peer", why+"; run: (cd test/npm && npm ci)")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node not found in PATH")
	}
	sdk := filepath.Join(moduleRoot, "test", "npm", "node_modules", "@modelcontextprotocol", "sdk", "package.json")
	if _, err := os.Stat(sdk); err != nil {
		missing("@modelcontextprotocol/sdk is not installed (" + err.Error() + ")")
	}
	path = filepath.Join(append([]string{moduleRoot, "test", "npm"}, file...)...)
	if _, err := os.Stat(path); err != nil {
		missing(err.Error())
	}
	return node, path
}

// tsClientOut is what serve-client.mjs prints.
type tsClientOut struct {
	TransportErrors  []string              `json:"transportErrors"`
	ProtocolVersion  string                `json:"protocolVersion"`
	SessionID        string                `json:"sessionId"`
	Tools            []string              `json:"tools"`
	FirstCall        string                `json:"firstCall"`
	Retries          []*mcp.CallToolResult `json:"retries"`
	Result           *mcp.CallToolResult   `json:"result"`
	ResumptionTokens []string              `json:"resumptionTokens"`
	KeepAlives       int                   `json:"keepAlives"`
	Charges          int                   `json:"charges"`
}

// tsClient starts test/npm/serve-client.mjs in mode against url. The
// script reads stdin, and says on stderr how far it is; wait reads its
// answer.
func tsClient(t *testing.T, ctx context.Context, mode, url string) (stdin io.WriteCloser, stderr *syncBuffer, wait func() *tsClientOut) {
	t.Helper()
	node, script := nodePeer(t, "serve-client.mjs")
	cmd := exec.CommandContext(ctx, node, script, mode, url)
	cmd.Dir = filepath.Dir(script)
	var stdout bytes.Buffer
	stderr = new(syncBuffer)
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	cmd.WaitDelay = 2 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", cmd, err)
	}
	// exited is closed once the script has exited, and waitErr is then
	// how: both the cleanup and wait read it, in either order, any
	// number of times.
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	return stdin, stderr, func() *tsClientOut {
		t.Helper()
		<-exited
		if waitErr != nil {
			t.Fatalf("%s: %v\nstderr:\n%s\nstdout:\n%s", cmd, waitErr, stderr.tail(transcriptTail), stdout.String())
		}
		var out tsClientOut
		if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
			t.Fatalf("%s printed %q: %v\nstderr:\n%s", cmd, stdout.String(), err, stderr.tail(transcriptTail))
		}
		t.Logf("the TypeScript client saw: protocol %s, transport errors %q", out.ProtocolVersion, out.TransportErrors)
		return &out
	}
}

// TestServeTypeScriptClient: the official TypeScript client lists the
// tools through serve, gives up on a charge once the server has made it
// (its answer is lost to the caller), and retries it twice: the first
// retry attaches to the charge under way, the second comes after it
// ended; both get the one charge's answer, marked as replays.
func TestServeTypeScriptClient(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s := serveCharge(t, []string{"--log-level", "debug"}, "-gate")
	stdin, _, wait := tsClient(t, ctx, "basic", s.url)
	if err := s.stderr.waitFor(ctx, "charge_card card=5555 n=1: waiting for SIGUSR1"); err != nil {
		t.Fatal(err)
	}
	open := gateOf(t, ctx, s)
	t.Cleanup(open)
	io.WriteString(stdin, "give up\n")
	stdin.Close()
	// serve has seen the client give up (notifications/cancelled), and the
	// first retry has attached to the charge the upstream still holds.
	for _, line := range []string{"client cancelled a tools/call; detaching it", `msg="attached to an execution under way"`} {
		if err := s.stderr.waitFor(ctx, line); err != nil {
			t.Fatal(err)
		}
	}
	open()
	out := wait()

	if out.SessionID == "" {
		t.Errorf("the TypeScript client got no Mcp-Session-Id")
	}
	if !slices.Contains(out.Tools, "charge_card") || !slices.Contains(out.Tools, "charges") {
		t.Errorf("tools/list = %q, want charge_card and charges among them", out.Tools)
	}
	if !strings.Contains(out.FirstCall, "gave up") {
		t.Errorf("the first call ended with %q, want the client's abort", out.FirstCall)
	}
	if len(out.Retries) != 2 {
		t.Fatalf("%d retries answered, want 2", len(out.Retries))
	}
	for i, res := range out.Retries {
		if got, want := firstText(res), "charged 100 to card 5555 (charge #1)"; got != want {
			t.Errorf("retry %d: text = %q, want %q (the first call's charge)", i+1, got, want)
		}
		if !replayed(res) || !strings.HasPrefix(executionID(res), "exe_") {
			t.Errorf("retry %d: want it marked replayed with an execution id; _meta = %s", i+1, metaJSON(res))
		}
	}
	if out.Charges != 1 {
		t.Errorf("charges = %d after a call and two retries, want 1", out.Charges)
	}
}

// everythingHTTP starts @modelcontextprotocol/server-everything in
// streamableHttp mode, on a free loopback port, and returns its MCP
// endpoint. The server listens on every interface by itself;
// loopback-listen.mjs keeps it on 127.0.0.1 and prints the port it got.
func everythingHTTP(t *testing.T) string {
	t.Helper()
	node, preload := nodePeer(t, "loopback-listen.mjs")
	_, entry := nodePeer(t, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	cmd := exec.Command(node, "--import", preload, entry, "streamableHttp")
	cmd.Env = append(os.Environ(), "PORT=0")
	stderr, stdout := new(syncBuffer), new(syncBuffer)
	cmd.Stderr, cmd.Stdout = stderr, stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", cmd, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("server-everything's stderr:\n%s\nstdout:\n%s", stderr.tail(transcriptTail), stdout.tail(transcriptTail))
		}
	})
	// A start waits for the process to listen: on a loaded machine node
	// took more than 15 s to load a server's modules. The wait ends at
	// once if the process exits.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		select {
		case <-exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := stderr.waitFor(ctx, "mcpi-e2e: listening on "); err != nil {
		t.Fatalf("server-everything did not start listening: %v\nstderr:\n%s", err, stderr)
	}
	m := regexp.MustCompile(`mcpi-e2e: listening on (\S+)`).FindStringSubmatch(stderr.String())
	return m[1] + "/mcp"
}

// everythingClient is what a test needs to see of a client of
// server-everything: the progress it was told of, and the server's
// requests it answered.
type everythingClient struct {
	progress chan *mcp.ProgressNotificationParams
	sampled  chan *mcp.CreateMessageParams
	elicited chan *mcp.ElicitParams
}

// options are client options that answer sampling and elicitation with
// fixed answers, as a user would, and note what they were asked.
func (c *everythingClient) options() *mcp.ClientOptions {
	c.progress = make(chan *mcp.ProgressNotificationParams, 64)
	c.sampled = make(chan *mcp.CreateMessageParams, 8)
	c.elicited = make(chan *mcp.ElicitParams, 8)
	return &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			c.progress <- req.Params
		},
		CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			c.sampled <- req.Params
			return &mcp.CreateMessageResult{
				Content:    &mcp.TextContent{Text: "a sampled answer"},
				Model:      "e2e-model",
				Role:       "assistant",
				StopReason: "endTurn",
			}, nil
		},
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			c.elicited <- req.Params
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada Lovelace", "check": true, "integer": 7}}, nil
		},
	}
}

// TestServeEverythingUpstream puts serve in front of server-everything on
// Streamable HTTP (serve --upstream URL), and drives it with the go-sdk
// client side by side with a client talking to server-everything
// directly: lists, tools, a prompt, a resource, the logging level,
// progress, and the server's own requests (sampling, elicitation), which
// travel back through serve to the client and their answers forward.
// What each client sees must be the same.
func TestServeEverythingUpstream(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	up := everythingHTTP(t)
	s := startServe(t, "--upstream", up)
	var pxc, barec everythingClient
	px := connectHTTP(t, ctx, s, s.url, "2025-11-25", pxc.options(), nil)
	bare := connectHTTP(t, ctx, nil, up, "2025-11-25", barec.options(), nil)

	t.Run("lists", func(t *testing.T) { testEverythingLists(t, ctx, px, bare) })
	t.Run("tool calls", func(t *testing.T) { testEverythingToolCalls(t, ctx, px, bare) })
	t.Run("prompt and resource", func(t *testing.T) { testEverythingPromptAndResource(t, ctx, px, bare) })
	t.Run("logging level", func(t *testing.T) {
		for name, p := range map[string]*peer{"directly": bare, "through serve": px} {
			if err := p.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
				t.Errorf("logging/setLevel %s: %v", name, err)
			}
		}
	})
	t.Run("progress", func(t *testing.T) {
		const steps = 3
		run := func(p *peer, c *everythingClient) (string, []string) {
			params := &mcp.CallToolParams{Name: "trigger-long-running-operation", Arguments: map[string]any{"duration": 0.3, "steps": steps}}
			params.SetProgressToken("progress-1")
			res, err := p.CallTool(ctx, params)
			if err != nil {
				t.Fatalf("trigger-long-running-operation: %v", err)
			}
			var seen []string
			for range steps {
				select {
				case n := <-c.progress:
					seen = append(seen, fmt.Sprintf("%v %v/%v", n.ProgressToken, n.Progress, n.Total))
				case <-ctx.Done():
					t.Fatalf("progress notifications: got %q, want %d", seen, steps)
				}
			}
			return answer(res), seen
		}
		wantRes, wantProgress := run(bare, &barec)
		gotRes, gotProgress := run(px, &pxc)
		if gotRes != wantRes {
			t.Errorf("result differs through serve:\nproxied: %s\ndirect:  %s", gotRes, wantRes)
		}
		if !slices.Equal(gotProgress, wantProgress) {
			t.Errorf("progress differs through serve:\nproxied: %q\ndirect:  %q", gotProgress, wantProgress)
		}
	})
	t.Run("sampling", func(t *testing.T) {
		args := map[string]any{"prompt": "say hello", "maxTokens": 20}
		run := func(p *peer, c *everythingClient) (string, *mcp.CreateMessageParams) {
			return serverAsks(t, ctx, p, "trigger-sampling-request", args, c.sampled)
		}
		wantRes, wantReq := run(bare, &barec)
		gotRes, gotReq := run(px, &pxc)
		sameJSON(t, "sampling/createMessage request", gotReq, wantReq)
		if gotRes != wantRes {
			t.Errorf("result differs through serve:\nproxied: %s\ndirect:  %s", gotRes, wantRes)
		}
		if !strings.Contains(gotRes, "e2e-model") {
			t.Errorf("the tool's answer %s does not carry the client's sampled answer", gotRes)
		}
	})
	t.Run("elicitation", func(t *testing.T) {
		run := func(p *peer, c *everythingClient) (string, *mcp.ElicitParams) {
			return serverAsks(t, ctx, p, "trigger-elicitation-request", map[string]any{}, c.elicited)
		}
		wantRes, wantReq := run(bare, &barec)
		gotRes, gotReq := run(px, &pxc)
		sameJSON(t, "elicitation/create request", gotReq, wantReq)
		if gotRes != wantRes {
			t.Errorf("result differs through serve:\nproxied: %s\ndirect:  %s", gotRes, wantRes)
		}
		if !strings.Contains(gotRes, "Ada Lovelace") {
			t.Errorf("the tool's answer %s does not carry the client's elicited content", gotRes)
		}
	})
}

// serverAsks calls tool through p and returns its answer and the request
// the server made of the client while the tool ran, which the client's
// handler sent to asked.
func serverAsks[R any](t *testing.T, ctx context.Context, p *peer, tool string, args map[string]any, asked chan R) (string, R) {
	t.Helper()
	res, err := p.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	select {
	case req := <-asked:
		return answer(res), req
	default:
		t.Fatalf("%s answered %s, but the client was never asked", tool, answer(res))
		var zero R
		return "", zero
	}
}
