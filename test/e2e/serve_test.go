package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// served is one `mcp-idempotent serve` process on a free loopback port.
type served struct {
	url    string // the MCP endpoint, as the proxy logged it
	cmd    *exec.Cmd
	stderr *syncBuffer
}

// servingURL finds the endpoint in the line serve logs once it listens.
var servingURL = regexp.MustCompile(`msg="serving MCP over Streamable HTTP" url=(\S+)`)

// startServe runs `mcp-idempotent serve --listen 127.0.0.1:0 ARGS...` and
// waits for it to say where it listens. When the test ends it is stopped
// with SIGINT, as a user stops it, and must exit 0: a race the detector
// found in it, or a shutdown that hangs, fails the test.
func startServe(t *testing.T, args ...string) *served {
	t.Helper()
	return startServeEnv(t, nil, args...)
}

// startServeEnv is startServe with env added to the proxy's environment.
func startServeEnv(t *testing.T, env []string, args ...string) *served {
	t.Helper()
	needProxy(t)
	cmd := exec.Command(proxyBin, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(append(os.Environ(), "GORACE=atexit_sleep_ms=0 halt_on_error=1"), env...)
	return startServed(t, cmd)
}

// startServed starts cmd, a serve command in some wrapping, as startServe
// does, and stops it with SIGINT when the test ends.
func startServed(t *testing.T, cmd *exec.Cmd) *served {
	t.Helper()
	s := &served{cmd: cmd, stderr: new(syncBuffer)}
	cmd.Stderr = s.stderr
	// The upstream child inherits stderr and may outlive serve for a moment.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", cmd, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(15 * time.Second): // serve gives calls under way 10s
			t.Errorf("serve did not exit within 15s of SIGINT")
			_ = cmd.Process.Kill()
			<-exited
		}
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("serve exited with status %d after SIGINT, want 0", code)
		}
		if t.Failed() {
			t.Logf("stderr of %s:\n%s", cmd, s.stderr.tail(transcriptTail))
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
	if err := s.stderr.waitFor(ctx, `msg="serving MCP over Streamable HTTP"`); err != nil {
		t.Fatalf("serve did not start listening: %v\nstderr:\n%s", err, s.stderr)
	}
	m := servingURL.FindStringSubmatch(s.stderr.String())
	if m == nil {
		t.Fatalf("serve's first line names no url:\n%s", s.stderr)
	}
	s.url = m[1]
	return s
}

// serveCharge runs serve in front of the chargeserver, with serve's flags
// and then the chargeserver's after the "--".
func serveCharge(t *testing.T, flags []string, chargeFlags ...string) *served {
	t.Helper()
	return startServe(t, append(slices.Clone(flags), append([]string{"--"}, chargeServer(chargeFlags...)...)...)...)
}

// httpClient is an http.Client of the test's own: its idle connections are
// closed when the test ends, so they do not outlive it as goroutines.
func httpClient(t *testing.T) *http.Client {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// connectHTTP connects the official go-sdk client to url over Streamable
// HTTP. version forces the protocol version it asks for ("" is the SDK's
// default, 2026-07-28 first). The session is closed when the test ends.
//
// The client's HTTP requests, their bodies and their statuses go to the
// peer's frames. mcp.LoggingTransport cannot be used here: the connection
// it wraps then never learns the negotiated version, and the client sends
// no Mcp-Protocol-Version header and opens no GET stream.
func connectHTTP(t *testing.T, ctx context.Context, s *served, url, version string, opts *mcp.ClientOptions, hc *http.Client) *peer {
	t.Helper()
	if hc == nil {
		hc = httpClient(t)
	}
	p := &peer{frames: new(syncBuffer)}
	if s != nil {
		p.stderr = s.stderr
	}
	hc = &http.Client{Transport: &recordingTransport{next: hc.Transport, log: p.frames}}
	client := mcp.NewClient(&mcp.Implementation{Name: "mcpi-e2e", Version: "0.0.1"}, opts)
	transport := &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}
	cs, err := client.Connect(ctx, transport, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connecting to %s: %v\nrequests:\n%s", url, err, p.frames.tail(transcriptTail))
	}
	p.ClientSession = cs
	t.Cleanup(func() {
		_ = cs.Close()
		if t.Failed() {
			t.Logf("requests the client of %s made:\n%s", url, p.frames.tail(transcriptTail))
		}
	})
	return p
}

// recordingTransport notes each HTTP request a client makes, with the
// headers that steer a Streamable HTTP server, and its status, in log:
// "http: GET last-event-id=3-0 ... -> 200". A request sent on a kept-alive
// connection that had been idle is marked "(idle connection)": if its peer
// closed that connection meanwhile, net/http fails a POST with EOF rather
// than send it again, and the request never reached the server.
type recordingTransport struct {
	next http.RoundTripper
	log  io.Writer
}

func (rt *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "http: %s", req.Method)
	for _, h := range []string{"Mcp-Session-Id", "Mcp-Protocol-Version", "Last-Event-ID", "Accept"} {
		if v := req.Header.Get(h); v != "" {
			fmt.Fprintf(&b, " %s=%s", strings.ToLower(h), v)
		}
	}
	if req.Body != nil && req.GetBody != nil {
		if body, err := req.GetBody(); err == nil {
			b.WriteString(" ")
			io.Copy(&b, body)
			body.Close()
		}
	}
	var idle bool
	trace := &httptrace.ClientTrace{GotConn: func(c httptrace.GotConnInfo) { idle = c.WasIdle }}
	resp, err := rt.next.RoundTrip(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
	if idle {
		b.WriteString(" (idle connection)")
	}
	if err != nil {
		fmt.Fprintf(rt.log, "%s -> %v\n", b.String(), err)
		return nil, err
	}
	fmt.Fprintf(rt.log, "%s -> %d\n", b.String(), resp.StatusCode)
	return resp, nil
}

// TestServeGoSDKClient: the go-sdk client over Streamable HTTP, in each
// protocol era, makes five identical charges through serve; the card is
// charged once and the five answers are one answer, the last four marked
// as replays.
func TestServeGoSDKClient(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		version string // what the client asks for; "" is the SDK's default
		want    string // the version it ends up speaking
	}{
		{"2025-11-25", "2025-11-25", "2025-11-25"},
		{"default", "", "2026-07-28"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			s := serveCharge(t, nil)
			p := connectHTTP(t, ctx, s, s.url, tc.version, nil, nil)
			if got := p.InitializeResult().ProtocolVersion; got != tc.want {
				t.Errorf("the client speaks %s; want %s", got, tc.want)
			}
			fiveChargesOneExecution(t, ctx, p, "4242")
			// 2025-11-25 is a session, begun with initialize; 2026-07-28
			// requests stand alone, with no session.
			requests := p.frames.String()
			stateful := tc.want < "2026-07-28"
			if got := strings.Contains(requests, `"method":"initialize"`); got != stateful {
				t.Errorf("the client sent initialize: %v, want %v", got, stateful)
			}
			if got := strings.Contains(requests, "mcp-session-id="); got != stateful {
				t.Errorf("the client sent an Mcp-Session-Id: %v, want %v", got, stateful)
			}
		})
	}
}

// fiveChargesOneExecution makes five identical charges on p and checks
// that they ran once and every answer after the first is its replay.
func fiveChargesOneExecution(t *testing.T, ctx context.Context, p *peer, card string) {
	t.Helper()
	var first *mcp.CallToolResult
	var firstID string
	for i := range 5 {
		res := charge(t, ctx, p, card, 100)
		if i == 0 {
			first = res
			if replayed(res) {
				t.Errorf("the first answer is marked replayed; _meta = %s", metaJSON(res))
			}
			continue
		}
		if got, want := answer(res), answer(first); got != want {
			t.Errorf("answer %d = %s, want %s (the first answer)", i+1, got, want)
		}
		if !replayed(res) {
			t.Errorf("answer %d: _meta[%q] is not true; _meta = %s", i+1, metaReplayed, metaJSON(res))
		}
		if firstID == "" {
			firstID = executionID(res)
		} else if id := executionID(res); id != firstID {
			t.Errorf("answer %d: execution %q, want %q", i+1, id, firstID)
		}
	}
	if got, want := firstText(first), "charged 100 to card "+card+" (charge #1)"; got != want {
		t.Errorf("first answer text = %q, want %q", got, want)
	}
	if n := executions(t, ctx, p); n != 1 {
		t.Errorf("charges = %d after 5 identical calls, want 1", n)
	}
}

// upstreamPID finds the pid of each upstream child in serve's debug log.
var upstreamPID = regexp.MustCompile(`msg="upstream started" upstream=.* pid=(\d+)`)

// gateOf returns a function that lets the gated chargeserver behind s
// answer the calls it holds (a SIGUSR1). serve must run with --log-level debug,
// which logs the upstream's pid, and have started one upstream.
func gateOf(t *testing.T, ctx context.Context, s *served) func() {
	t.Helper()
	if err := s.stderr.waitFor(ctx, `msg="upstream started"`); err != nil {
		t.Fatal(err)
	}
	m := upstreamPID.FindStringSubmatch(s.stderr.String())
	pid, _ := strconv.Atoi(m[1])
	return func() {
		t.Helper()
		// A chargeserver that has exited holds no call.
		if err := openGate(pid); err != nil {
			t.Errorf("opening the gate of chargeserver %d: %v", pid, err)
		}
	}
}

// TestServeJSONResponse: with --json-response each POST is answered with
// one JSON body, and the go-sdk client works as well: five charges, one
// execution.
func TestServeJSONResponse(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s := serveCharge(t, []string{"--json-response"})
	hc := httpClient(t)
	rs := openRawSession(t, ctx, hc, s.url)
	rep := rs.post(ctx, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charges","arguments":{}}}`)
	if ct := rep.header.Get("Content-Type"); rep.status != http.StatusOK || ct != "application/json" || !strings.HasPrefix(rep.body, `{"jsonrpc":"2.0","id":2,"result":`) {
		t.Errorf("tools/call: status %d, Content-Type %q, body %s; want 200 and one JSON answer", rep.status, ct, rep.body)
	}
	p := connectHTTP(t, ctx, s, s.url, "2025-11-25", nil, hc)
	fiveChargesOneExecution(t, ctx, p, "4242")
}

// TestServeHTTPUpstream: serve --upstream URL in front of the chargeserver
// on Streamable HTTP, stateful (2025-11-25) or stateless (2026-07-28), and
// the go-sdk client of either era in front: the two ends settle on the
// version they would settle on with no proxy between, and five identical
// charges are one.
func TestServeHTTPUpstream(t *testing.T) {
	t.Parallel()
	for _, server := range []string{"stateful", "stateless"} {
		for _, version := range []string{"2025-11-25", ""} {
			name := server + " server/" + version
			if version == "" {
				name += "default client"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				ctx := testContext(t)
				var flags []string
				if server == "stateless" {
					flags = []string{"-stateless"}
				}
				s := startServe(t, "--upstream", httpChargeServer(t, flags...))
				p := connectHTTP(t, ctx, s, s.url, version, nil, nil)
				// Only a 2026-07-28 server lets a default client stay in
				// 2026-07-28; against any other it falls back to
				// initialize, as it would with no proxy between.
				want := "2025-11-25"
				if server == "stateless" && version == "" {
					want = "2026-07-28"
				}
				if got := p.InitializeResult().ProtocolVersion; got != want {
					t.Errorf("the client speaks %s, want %s", got, want)
				}
				fiveChargesOneExecution(t, ctx, p, "4242")
			})
		}
	}
}
