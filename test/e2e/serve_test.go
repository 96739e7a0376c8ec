package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-idempotent/mcp-idempotent/internal/skipnote"
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

// TestServeTwoSessionsTwoUpstreams: each session a client initialises
// gets its own upstream process, so two sessions never share a ledger or
// an execution.
func TestServeTwoSessionsTwoUpstreams(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s := serveCharge(t, []string{"--log-level", "debug"})
	a := connectHTTP(t, ctx, s, s.url, "2025-11-25", nil, nil)
	b := connectHTTP(t, ctx, s, s.url, "2025-11-25", nil, nil)
	if a.ID() == "" || a.ID() == b.ID() {
		t.Fatalf("session ids %q and %q: want two distinct Mcp-Session-Ids", a.ID(), b.ID())
	}
	for name, p := range map[string]*peer{"a": a, "b": b} {
		res := charge(t, ctx, p, "4242", 100)
		// A shared upstream would count the second session's charge as #2.
		if got, want := firstText(res), "charged 100 to card 4242 (charge #1)"; got != want {
			t.Errorf("session %s: text = %q, want %q", name, got, want)
		}
		if replayed(res) {
			t.Errorf("session %s: a first call is marked replayed; _meta = %s", name, metaJSON(res))
		}
		if n := executions(t, ctx, p); n != 1 {
			t.Errorf("session %s: its upstream counts %d charges, want 1", name, n)
		}
	}
	pids := map[string]bool{}
	for _, m := range upstreamPID.FindAllStringSubmatch(s.stderr.String(), -1) {
		pids[m[1]] = true
	}
	if len(pids) != 2 {
		t.Errorf("serve started upstreams with pids %v; want two", pids)
	}
}

// upstreamPID finds the pid of each upstream child in serve's debug log.
var upstreamPID = regexp.MustCompile(`msg="upstream started" upstream=.* pid=(\d+)`)

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
	Charges          int                   `json:"charges"`
}

// tsClient starts test/npm/serve-client.mjs in mode against url. The
// script reads stdin; wait reads its answer.
func tsClient(t *testing.T, ctx context.Context, mode, url string) (stdin io.WriteCloser, wait func() *tsClientOut) {
	t.Helper()
	node, script := nodePeer(t, "serve-client.mjs")
	cmd := exec.CommandContext(ctx, node, script, mode, url)
	cmd.Dir = filepath.Dir(script)
	var stdout bytes.Buffer
	stderr := new(syncBuffer)
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	cmd.WaitDelay = 2 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", cmd, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	return stdin, func() *tsClientOut {
		t.Helper()
		if err := <-done; err != nil {
			t.Fatalf("%s: %v\nstderr:\n%s\nstdout:\n%s", cmd, err, stderr.tail(transcriptTail), stdout.String())
		}
		done <- nil
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
	stdin, wait := tsClient(t, ctx, "basic", s.url)
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

// A relay is a TCP relay between clients and serve that the test can cut,
// as a network fails: every connection it carries is closed at once. While
// it holds, new connections wait before they reach serve.
type relay struct {
	ln       net.Listener
	target   string
	toClient *syncBuffer // the SSE events serve sent clients, whole

	mu    sync.Mutex // protects the fields below
	conns map[net.Conn]bool
	hold  chan struct{} // non-nil while new connections wait; closed to let them on
	wg    sync.WaitGroup
}

// startRelay relays a loopback port to target (host:port) until the test
// ends.
func startRelay(t *testing.T, target string) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln, target: target, toClient: new(syncBuffer), conns: map[net.Conn]bool{}}
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(func() {
		ln.Close()
		r.release()
		r.cut()
		r.wg.Wait()
		if t.Failed() {
			t.Logf("bytes serve sent clients through the relay:\n%s", r.toClient.tail(transcriptTail))
		}
	})
	return r
}

func (r *relay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		r.conns[c] = true
		hold := r.hold
		r.wg.Add(1)
		r.mu.Unlock()
		go r.carry(c, hold)
	}
}

// carry relays one client connection, after waiting out a hold.
func (r *relay) carry(c net.Conn, hold chan struct{}) {
	defer r.wg.Done()
	if hold != nil {
		<-hold
	}
	up, err := net.Dial("tcp", r.target)
	if err != nil {
		c.Close()
		return
	}
	r.mu.Lock()
	if !r.conns[c] { // cut while it waited
		r.mu.Unlock()
		up.Close()
		return
	}
	r.conns[up] = true
	r.mu.Unlock()
	copied := make(chan struct{})
	go func() {
		io.Copy(up, c)
		up.(*net.TCPConn).CloseWrite()
		close(copied)
	}()
	events := &eventWriter{sink: r.toClient}
	io.Copy(io.MultiWriter(c, events), up)
	c.Close()
	<-copied
	up.Close()
}

// An eventWriter passes on what is written to it up to the end of the
// last whole SSE event (a blank line), so that the events of connections
// sharing one sink never interleave.
type eventWriter struct {
	sink    io.Writer
	pending []byte
}

func (w *eventWriter) Write(p []byte) (int, error) {
	w.pending = append(w.pending, p...)
	if i := bytes.LastIndex(w.pending, []byte("\n\n")); i >= 0 {
		w.sink.Write(w.pending[:i+2])
		w.pending = slices.Clone(w.pending[i+2:])
	}
	return len(p), nil
}

// cut closes every connection the relay carries.
func (r *relay) cut() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.conns {
		c.Close()
	}
	clear(r.conns)
}

// holdNew makes new connections wait until release.
func (r *relay) holdNew() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hold == nil {
		r.hold = make(chan struct{})
	}
}

func (r *relay) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hold != nil {
		close(r.hold)
		r.hold = nil
	}
}

// url is serve's endpoint URL u with the relay's address in its place.
func (r *relay) url(t *testing.T, u string) string {
	t.Helper()
	parsed, err := neturl.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	parsed.Host = r.ln.Addr().String()
	return parsed.String()
}

// awaitingAnswer reports whether b, the bytes of SSE streams, holds a
// stream that has its priming event (an id, no data) and no message yet:
// the stream of a call still under way, which its client can resume.
func awaitingAnswer(b string) bool {
	primed := map[string]bool{}
	for _, m := range sseEvent.FindAllStringSubmatch(b, -1) {
		if m[2] == "data:\n\n" {
			primed[m[1]] = true
		} else {
			delete(primed, m[1])
		}
	}
	return len(primed) > 0
}

// sseEvent matches the start of an event serve writes: "id: STREAM-SEQ",
// then an empty data line (priming) or "event: message".
var sseEvent = regexp.MustCompile(`(?m)^id: (\d+)-\d+\n(data:\n\n|event: message\n)`)

// TestServeResumesADroppedStream: the connection breaks while a charge is
// under way upstream. The client reconnects with GET and Last-Event-ID,
// and gets the one answer, whether it came while the client was away
// (held for it) or after it was back (on the resumed stream); the card
// was charged once and the call was not sent again. For the go-sdk client
// (protocol 2025-11-25) and the TypeScript one.
func TestServeResumesADroppedStream(t *testing.T) {
	t.Parallel()
	for _, client := range []string{"go-sdk", "typescript"} {
		for _, whileAway := range []bool{false, true} {
			name := client + "/answer after the client is back"
			if whileAway {
				name = client + "/answer while the client is away"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				testResume(t, client, whileAway)
			})
		}
	}
}

// testResume is one case of TestServeResumesADroppedStream: client is
// "go-sdk" or "typescript"; whileAway answers the call while the relay
// keeps the client from reconnecting.
func testResume(t *testing.T, client string, whileAway bool) {
	ctx := testContext(t)
	s := serveCharge(t, []string{"--log-level", "debug"}, "-gate")
	target, err := neturl.Parse(s.url)
	if err != nil {
		t.Fatal(err)
	}
	r := startRelay(t, target.Host)
	url := r.url(t, s.url)

	card := "4242"
	var call func() *mcp.CallToolResult
	var p *peer
	switch client {
	case "go-sdk":
		p = connectHTTP(t, ctx, s, url, "2025-11-25", nil, nil)
		type result struct {
			res *mcp.CallToolResult
			err error
		}
		got := make(chan result, 1)
		go func() {
			res, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "charge_card", Arguments: chargeArgs(card, 100)})
			got <- result{res, err}
		}()
		call = func() *mcp.CallToolResult {
			r := <-got
			if r.err != nil {
				t.Fatalf("charge_card across a dropped stream: %v", r.err)
			}
			return r.res
		}
	case "typescript":
		card = "5555"
		_, wait := tsClient(t, ctx, "resume", url)
		call = func() *mcp.CallToolResult {
			out := wait()
			if out.Charges != 1 {
				t.Errorf("the TypeScript client counts %d charges, want 1", out.Charges)
			}
			if len(out.ResumptionTokens) == 0 {
				t.Errorf("the TypeScript client saw no event id on the call's stream")
			}
			return out.Result
		}
	}

	// The charge has happened upstream and its answer is held back.
	if err := s.stderr.waitFor(ctx, "charge_card card="+card+" n=1: waiting for SIGUSR1"); err != nil {
		t.Fatal(err)
	}
	// The call's priming event has reached the client: without it, the
	// stream could not be resumed.
	if err := r.toClient.waitUntil(ctx, "the call's priming event", awaitingAnswer); err != nil {
		t.Fatal(err)
	}
	m := upstreamPID.FindStringSubmatch(s.stderr.String())
	if m == nil {
		t.Fatalf("serve logged no upstream pid")
	}
	pid, _ := strconv.Atoi(m[1])
	var once sync.Once
	answerNow := func() {
		once.Do(func() {
			if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil && !errors.Is(err, syscall.ESRCH) {
				t.Errorf("opening the gate of chargeserver %d: %v", pid, err)
			}
		})
	}
	// A test that fails before it opens the gate must not leave the call
	// holding up serve's shutdown.
	t.Cleanup(answerNow)

	if whileAway {
		r.holdNew()
		r.cut()
		answerNow()
		if err := s.stderr.waitFor(ctx, "state=completed"); err != nil {
			t.Fatal(err)
		}
		r.release()
	} else {
		r.cut()
		if err := s.stderr.waitFor(ctx, `msg="client resumes a stream"`); err != nil {
			t.Fatal(err)
		}
		answerNow()
	}
	res := call()
	if got, want := firstText(res), "charged 100 to card "+card+" (charge #1)"; got != want {
		t.Errorf("text = %q, want %q", got, want)
	}
	if replayed(res) {
		t.Errorf("the answer is marked replayed, want the execution's own answer; _meta = %s", metaJSON(res))
	}
	// serve logs the resumption before it writes the answer, but its
	// stderr is read on another goroutine: the line may come after it.
	if err := s.stderr.waitFor(ctx, `msg="client resumes a stream"`); err != nil {
		t.Errorf("the client did not resume with GET and Last-Event-ID: %v", err)
	}
	if strings.Contains(s.stderr.String(), "a request sent again attaches") {
		t.Errorf("the client sent the call again rather than resume its stream")
	}
	if p != nil {
		if n := executions(t, ctx, p); n != 1 {
			t.Errorf("charges = %d, want 1", n)
		}
	}
	if n := strings.Count(s.stderr.String(), "charge_card card="+card+" amount="); n != 1 {
		t.Errorf("the upstream ran charge_card %d times, want 1", n)
	}
}

// initializeBody is a 2025-11-25 initialize request, as a client POSTs it.
const initializeBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"mcpi-e2e-raw","version":"0.0.1"}}}`

// rawReply is serve's answer to one plain HTTP request.
type rawReply struct {
	status int
	header http.Header
	body   string
}

// rawRequest sends one HTTP request to url with the headers given ("Host"
// sets the Host header) and reads the whole answer.
func rawRequest(t *testing.T, ctx context.Context, hc *http.Client, method, url string, header map[string]string, body string) rawReply {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, url, err)
	}
	return rawReply{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// postHeaders are the headers of a well-formed POST, plus extra; an extra
// header with value "" is left out.
func postHeaders(extra map[string]string) map[string]string {
	h := map[string]string{
		"Content-Type":         "application/json",
		"Accept":               "application/json, text/event-stream",
		"Mcp-Protocol-Version": "2025-11-25",
	}
	for k, v := range extra {
		if v == "" {
			delete(h, k)
		} else {
			h[k] = v
		}
	}
	return h
}

// errorCode is the JSON-RPC error code in a refusal's body, or 0.
func errorCode(body string) int {
	var m struct {
		Error *struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(body), &m) != nil || m.Error == nil {
		return 0
	}
	return m.Error.Code
}

// bearer is an http.RoundTripper that presents a bearer token.
type bearer struct {
	next  http.RoundTripper
	token string
}

func (b *bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(req)
}

// TestServeBearerTokens: with --auth-token-file, a request without a
// valid token is refused 401 with a WWW-Authenticate challenge; each
// token works, and acts for its own actor. With --scope actor, a second
// session of one actor attaches to that actor's charge, while the same
// call from the other actor is its own charge; and an actor cannot use
// another's session.
func TestServeBearerTokens(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("# token actor\ntok-alice-0123456789 alice\ntok-bob-0123456789 bob\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := serveCharge(t, []string{"--auth-token-file", tokens, "--scope", "actor"})
	if !strings.Contains(s.stderr.String(), "auth=true") {
		t.Errorf("serve's first line does not say auth=true:\n%s", s.stderr)
	}
	hc := httpClient(t)

	for _, tc := range []struct {
		name, method, auth string
	}{
		{"POST without a token", http.MethodPost, ""},
		{"POST with a wrong token", http.MethodPost, "Bearer tok-mallory"},
		{"POST with a token in the wrong scheme", http.MethodPost, "Basic tok-alice-0123456789"},
		{"GET without a token", http.MethodGet, ""},
		{"DELETE without a token", http.MethodDelete, ""},
	} {
		rep := rawRequest(t, ctx, hc, tc.method, s.url, postHeaders(map[string]string{"Authorization": tc.auth}), initializeBody)
		if rep.status != http.StatusUnauthorized {
			t.Errorf("%s: status %d, want 401; body %s", tc.name, rep.status, rep.body)
		}
		if got := rep.header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
			t.Errorf("%s: WWW-Authenticate = %q, want a Bearer challenge", tc.name, got)
		}
	}
	if strings.Contains(s.stderr.String(), "tok-") {
		t.Errorf("a token appears in serve's log:\n%s", s.stderr)
	}

	as := func(token string) *http.Client {
		base := httpClient(t)
		return &http.Client{Transport: &bearer{next: base.Transport, token: token}}
	}
	alice := connectHTTP(t, ctx, s, s.url, "2025-11-25", nil, as("tok-alice-0123456789"))
	first := charge(t, ctx, alice, "4242", 100)
	if got, want := firstText(first), "charged 100 to card 4242 (charge #1)"; got != want || replayed(first) {
		t.Fatalf("alice's charge: %q (replayed %v), want %q run", got, replayed(first), want)
	}

	// alice again, in a new session with its own upstream: the same
	// intent, so it attaches.
	alice2 := connectHTTP(t, ctx, s, s.url, "2025-11-25", nil, as("tok-alice-0123456789"))
	again := charge(t, ctx, alice2, "4242", 100)
	if !replayed(again) || answer(again) != answer(first) {
		t.Errorf("alice's second session: %s (replayed %v), want alice's charge replayed: %s", answer(again), replayed(again), answer(first))
	}
	if n := executions(t, ctx, alice2); n != 0 {
		t.Errorf("alice's second upstream charged %d times, want 0", n)
	}

	// bob, the same call: another actor, another intent.
	bob := connectHTTP(t, ctx, s, s.url, "2025-11-25", nil, as("tok-bob-0123456789"))
	bobs := charge(t, ctx, bob, "4242", 100)
	if got, want := firstText(bobs), "charged 100 to card 4242 (charge #1)"; got != want || replayed(bobs) {
		t.Errorf("bob's charge: %q (replayed %v), want %q run", got, replayed(bobs), want)
	}
	if n := executions(t, ctx, alice) + executions(t, ctx, bob); n != 2 {
		t.Errorf("two actors made the identical call: %d charges, want 2", n)
	}

	// bob's token on alice's session: as unknown to bob as a session that
	// never was.
	rep := rawRequest(t, ctx, hc, http.MethodPost, s.url, postHeaders(map[string]string{
		"Authorization":  "Bearer tok-bob-0123456789",
		"Mcp-Session-Id": alice.ID(),
	}), `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"charges","arguments":{}}}`)
	if rep.status != http.StatusNotFound {
		t.Errorf("bob's token on alice's session: status %d, want 404; body %s", rep.status, rep.body)
	}

	// Host and Origin are checked before the token.
	for name, h := range map[string]map[string]string{
		"foreign Origin": {"Origin": "https://evil.example"},
		"foreign Host":   {"Host": "evil.example"},
	} {
		h["Authorization"] = "Bearer tok-alice-0123456789"
		rep := rawRequest(t, ctx, hc, http.MethodPost, s.url, postHeaders(h), initializeBody)
		if rep.status != http.StatusForbidden {
			t.Errorf("%s with a valid token: status %d, want 403; body %s", name, rep.status, rep.body)
		}
	}
}

// TestServeRefusesBadRequests: each malformed or unwelcome request gets
// its HTTP status and a JSON-RPC error body, and serve goes on serving.
func TestServeRefusesBadRequests(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s := serveCharge(t, []string{"--max-message-size", "64KiB"})
	hc := httpClient(t)
	big := `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"` + strings.Repeat("x", 65<<10) + `"}}`
	ping := `{"jsonrpc":"2.0","id":1,"method":"ping"}`

	for _, tc := range []struct {
		name   string
		header map[string]string
		body   string
		status int
		code   int // the JSON-RPC error code in the body
	}{
		{"wrong Content-Type", map[string]string{"Content-Type": "text/plain"}, initializeBody, http.StatusUnsupportedMediaType, -32600},
		{"no Accept", map[string]string{"Accept": ""}, initializeBody, http.StatusNotAcceptable, -32600},
		{"Accept without text/event-stream", map[string]string{"Accept": "application/json"}, initializeBody, http.StatusNotAcceptable, -32600},
		{"body over --max-message-size", nil, big, http.StatusRequestEntityTooLarge, -32600},
		{"not JSON", nil, `{"jsonrpc":"2.0",`, http.StatusBadRequest, -32700},
		{"unknown session", map[string]string{"Mcp-Session-Id": "0123456789abcdef0123456789abcdef"}, ping, http.StatusNotFound, -32600},
		{"unsupported protocol version", map[string]string{"Mcp-Protocol-Version": "2099-01-01"}, initializeBody, http.StatusBadRequest, -32600},
		{"foreign Origin", map[string]string{"Origin": "https://evil.example"}, initializeBody, http.StatusForbidden, -32600},
		{"foreign Host", map[string]string{"Host": "evil.example:80"}, initializeBody, http.StatusForbidden, -32600},
		{"foreign Origin named like loopback", map[string]string{"Origin": "http://localhost.evil.example"}, initializeBody, http.StatusForbidden, -32600},
		{"foreign Host named like loopback", map[string]string{"Host": "127.0.0.1.evil.example"}, initializeBody, http.StatusForbidden, -32600},
		{"no session, not initialize", map[string]string{"Mcp-Protocol-Version": ""}, ping, http.StatusBadRequest, -32600},
	} {
		rep := rawRequest(t, ctx, hc, http.MethodPost, s.url, postHeaders(tc.header), tc.body)
		if rep.status != tc.status {
			t.Errorf("%s: status %d, want %d; body %s", tc.name, rep.status, tc.status, rep.body)
		}
		if got := errorCode(rep.body); got != tc.code {
			t.Errorf("%s: body %s, want a JSON-RPC error with code %d", tc.name, rep.body, tc.code)
		}
		if rep.header.Get("Mcp-Session-Id") != "" {
			t.Errorf("%s: a refused request was given a session", tc.name)
		}
	}

	for _, tc := range []struct {
		method string
		allow  string
	}{
		{http.MethodGet, "POST"}, // no session, so no stream
		{http.MethodPut, "GET, POST, DELETE"},
	} {
		rep := rawRequest(t, ctx, hc, tc.method, s.url, postHeaders(map[string]string{"Accept": "text/event-stream"}), "")
		if rep.status != http.StatusMethodNotAllowed || rep.header.Get("Allow") != tc.allow {
			t.Errorf("%s without a session: status %d, Allow %q; want 405, Allow %q", tc.method, rep.status, rep.header.Get("Allow"), tc.allow)
		}
	}

	// A loopback page is a welcome Origin, and serve still works.
	rep := rawRequest(t, ctx, hc, http.MethodPost, s.url, postHeaders(map[string]string{"Origin": "http://localhost:3000"}), initializeBody)
	if rep.status != http.StatusOK || rep.header.Get("Mcp-Session-Id") == "" {
		t.Errorf("initialize from a loopback Origin: status %d, session %q; want 200 and a session; body %s", rep.status, rep.header.Get("Mcp-Session-Id"), rep.body)
	}
	p := connectHTTP(t, ctx, s, s.url, "2025-11-25", nil, hc)
	charge(t, ctx, p, "4242", 1)
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
		if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Errorf("opening the gate of chargeserver %d: %v", pid, err)
		}
	}
}

// TestServeStatelessDropAndRetry: in protocol 2026-07-28 a request has
// no session and its stream no event ids, so a stream that breaks cannot
// be resumed: the caller gets an error. It sends the call again, and the
// retry attaches to the charge still under way: one charge, whose answer
// the retry gets, marked as a replay.
func TestServeStatelessDropAndRetry(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s := serveCharge(t, []string{"--log-level", "debug"}, "-gate")
	target, _ := neturl.Parse(s.url)
	r := startRelay(t, target.Host)
	// The cut closes the client's idle kept-alive connections with the
	// call's stream, and net/http learns of that only when it next reads
	// one: a retry written onto such a connection first fails with EOF and
	// is not sent again (a POST is not replayable), so it never reaches
	// serve. What is under test is what serve does with a retry that
	// reaches it, so this client keeps no connection idle and sends every
	// request on a new one.
	hc := httpClient(t)
	hc.Transport.(*http.Transport).DisableKeepAlives = true
	p := connectHTTP(t, ctx, s, r.url(t, s.url), "", nil, hc)
	if v := p.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("the client speaks %s, want 2026-07-28", v)
	}
	open := gateOf(t, ctx, s)
	opened := false
	t.Cleanup(func() {
		if !opened {
			open()
		}
	})

	callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	firstErr := make(chan error, 1)
	go func() {
		_, err := p.CallTool(callCtx, &mcp.CallToolParams{Name: "charge_card", Arguments: chargeArgs("4242", 100)})
		firstErr <- err
	}()
	if err := s.stderr.waitFor(ctx, "charge_card card=4242 n=1: waiting for SIGUSR1"); err != nil {
		t.Fatal(err)
	}
	r.cut()
	err := <-firstErr
	t.Logf("the call whose stream broke: %v", err)
	if err == nil {
		t.Fatalf("the call whose stream broke got an answer; want an error")
	}

	type result struct {
		res *mcp.CallToolResult
		err error
	}
	retry := make(chan result, 1)
	go func() {
		res, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "charge_card", Arguments: chargeArgs("4242", 100)})
		retry <- result{res, err}
	}()
	if err := s.stderr.waitFor(ctx, `msg="attached to an execution under way"`); err != nil {
		t.Fatal(err)
	}
	open()
	opened = true
	got := <-retry
	if got.err != nil {
		t.Fatalf("the retry: %v", got.err)
	}
	res := got.res
	if got, want := firstText(res), "charged 100 to card 4242 (charge #1)"; got != want || !replayed(res) {
		t.Errorf("the retry got %q (replayed %v), want %q replayed", got, replayed(res), want)
	}
	if n := executions(t, ctx, p); n != 1 {
		t.Errorf("charges = %d after a dropped call and its retry, want 1", n)
	}
}

// TestServeStatelessClientsShareALane: 2026-07-28 clients of one actor
// share serve's stateless lane and its upstream, and each numbers its
// requests from 1. Two calls under way at once with the same JSON-RPC id
// must each get their own answer, under their own id.
func TestServeStatelessClientsShareALane(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s := serveCharge(t, []string{"--log-level", "debug"}, "-gate")
	a := connectHTTP(t, ctx, s, s.url, "", nil, nil)
	b := connectHTTP(t, ctx, s, s.url, "", nil, nil)
	open := gateOf(t, ctx, s)

	type result struct {
		res *mcp.CallToolResult
		err error
	}
	calls := map[string]chan result{}
	for card, p := range map[string]*peer{"1111": a, "2222": b} {
		calls[card] = make(chan result, 1)
		go func() {
			res, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "charge_card", Arguments: chargeArgs(card, 100)})
			calls[card] <- result{res, err}
		}()
	}
	for card := range calls {
		if err := s.stderr.waitFor(ctx, "charge_card card="+card+" n=1: waiting for SIGUSR1"); err != nil {
			t.Fatal(err)
		}
	}
	// A call under way holds up no other request of the lane.
	if n := executions(t, ctx, b); n != 2 {
		t.Errorf("while both calls were under way, charges = %d, want 2", n)
	}
	open()
	for card, c := range calls {
		r := <-c
		if r.err != nil {
			t.Errorf("card %s: %v", card, r.err)
			continue
		}
		if got, want := firstText(r.res), "charged 100 to card "+card+" (charge #1)"; got != want {
			t.Errorf("card %s: the answer is %q, want %q", card, got, want)
		}
	}
	// The two clients' requests carried the same ids.
	idsA := regexp.MustCompile(`"id":(\d+),"method":"tools/call"`).FindAllStringSubmatch(a.frames.String(), -1)
	idsB := regexp.MustCompile(`"id":(\d+),"method":"tools/call"`).FindAllStringSubmatch(b.frames.String(), -1)
	if len(idsA) == 0 || len(idsB) == 0 || idsA[0][1] != idsB[0][1] {
		t.Errorf("the two calls' ids were %v and %v: the test did not make them collide", idsA, idsB)
	}
	if n := executions(t, ctx, a); n != 2 {
		t.Errorf("the shared upstream counts %d charges, want 2", n)
	}
}

// sseEventRead is one SSE event as read off a stream.
type sseEventRead struct {
	id, data string
}

// readEvent reads the next event from an SSE stream.
func readEvent(r *bufio.Reader) (sseEventRead, error) {
	var ev sseEventRead
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			return ev, nil
		case strings.HasPrefix(line, "id:"):
			ev.id = strings.TrimSpace(strings.TrimPrefix(line, "id:"))
		case strings.HasPrefix(line, "data:"):
			ev.data += strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")
		}
	}
}

// rawSession is a session a test drives by hand, one HTTP request at a
// time.
type rawSession struct {
	t   *testing.T
	hc  *http.Client
	url string
	id  string
}

// openRawSession initialises a 2025-11-25 session by hand.
func openRawSession(t *testing.T, ctx context.Context, hc *http.Client, url string) *rawSession {
	t.Helper()
	return openRawSessionAfter(t, ctx, hc, url, rawRequest(t, ctx, hc, http.MethodPost, url, postHeaders(nil), initializeBody))
}

// openRawSessionWhenFree is openRawSession for a serve at its
// --max-sessions: it initialises again while it is told 503, as a client
// honouring Retry-After would (here every 50 ms).
func openRawSessionWhenFree(t *testing.T, ctx context.Context, hc *http.Client, url string) *rawSession {
	t.Helper()
	for {
		rep := rawRequest(t, ctx, hc, http.MethodPost, url, postHeaders(nil), initializeBody)
		if rep.status != http.StatusServiceUnavailable {
			return openRawSessionAfter(t, ctx, hc, url, rep)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("initialize: still 503 (%s) when the test timed out", rep.body)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// openRawSessionAfter completes the session rep, the answer to
// initialize, opened.
func openRawSessionAfter(t *testing.T, ctx context.Context, hc *http.Client, url string, rep rawReply) *rawSession {
	t.Helper()
	if rep.status != http.StatusOK || rep.header.Get("Mcp-Session-Id") == "" {
		t.Fatalf("initialize: status %d, session %q; body %s", rep.status, rep.header.Get("Mcp-Session-Id"), rep.body)
	}
	rs := &rawSession{t: t, hc: hc, url: url, id: rep.header.Get("Mcp-Session-Id")}
	if rep := rs.post(ctx, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); rep.status != http.StatusAccepted {
		t.Fatalf("notifications/initialized: status %d, want 202; body %s", rep.status, rep.body)
	}
	return rs
}

func (rs *rawSession) headers() map[string]string {
	return postHeaders(map[string]string{"Mcp-Session-Id": rs.id})
}

// post sends body in the session and reads the whole answer.
func (rs *rawSession) post(ctx context.Context, body string) rawReply {
	rs.t.Helper()
	return rawRequest(rs.t, ctx, rs.hc, http.MethodPost, rs.url, rs.headers(), body)
}

// stream sends req (POST with body, or GET) in the session and returns the
// answer with its body still open, for reading event by event.
func (rs *rawSession) stream(ctx context.Context, method, body string, extra map[string]string) *http.Response {
	rs.t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, rs.url, strings.NewReader(body))
	if err != nil {
		rs.t.Fatal(err)
	}
	for k, v := range rs.headers() {
		req.Header.Set(k, v)
	}
	for k, v := range extra {
		req.Header.Set(k, v)
	}
	resp, err := rs.hc.Do(req)
	if err != nil {
		rs.t.Fatalf("%s: %v", method, err)
	}
	return resp
}

// answerIn reads events from an SSE stream until a JSON-RPC message, and
// returns its data and the ids of the events read.
func answerIn(t *testing.T, r *bufio.Reader) (data string, ids []string) {
	t.Helper()
	for {
		ev, err := readEvent(r)
		if err != nil {
			t.Fatalf("reading the stream after events %q: %v", ids, err)
		}
		ids = append(ids, ev.id)
		if ev.data != "" {
			return ev.data, ids
		}
	}
}

// TestServeStreamsByHand drives serve's resumption with plain HTTP, as a
// client written from the spec would. A stream lost during a charge, after
// its priming event, is resumed with GET and Last-Event-ID. A request sent
// again, the same bytes under the same id, while it is under way attaches
// to the one answer, where different bytes under that id are refused. A
// session ended with DELETE is gone. Each charge runs once.
func TestServeStreamsByHand(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s := serveCharge(t, []string{"--log-level", "debug"}, "-gate")
	hc := httpClient(t)
	rs := openRawSession(t, ctx, hc, s.url)
	open := gateOf(t, ctx, s)
	t.Cleanup(open)

	// lost sends a charge and drops its stream once the upstream holds it,
	// returning the id of the stream's priming event.
	lost := func(t *testing.T, call, card string) string {
		t.Helper()
		lostCtx, lose := context.WithCancel(ctx)
		defer lose()
		resp := rs.stream(lostCtx, http.MethodPost, call, nil)
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("tools/call: status %d, Content-Type %q; want 200 and an SSE stream", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		priming, err := readEvent(bufio.NewReader(resp.Body))
		if err != nil || priming.data != "" || !regexp.MustCompile(`^\d+-\d+$`).MatchString(priming.id) {
			t.Fatalf("the stream's first event is %+v (%v); want a priming event: an id STREAM-SEQ, no data", priming, err)
		}
		if err := s.stderr.waitFor(ctx, "charge_card card="+card+" n=1: waiting for SIGUSR1"); err != nil {
			t.Fatal(err)
		}
		return priming.id
	}
	answered := func(t *testing.T, what string, body io.Reader, id, card string) {
		t.Helper()
		data, ids := answerIn(t, bufio.NewReader(body))
		want := `"text":"charged 100 to card ` + card + ` (charge #1)"`
		if !strings.Contains(data, `"id":`+id+`,`) || !strings.Contains(data, want) {
			t.Errorf("%s got %s; want id %s and %s", what, data, id, want)
		}
		t.Logf("%s got events %q", what, ids)
	}

	t.Run("resume with Last-Event-ID", func(t *testing.T) {
		last := lost(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"charge_card","arguments":{"card":"1111","amount":100}}}`, "1111")
		resumed := rs.stream(ctx, http.MethodGet, "", map[string]string{"Accept": "text/event-stream", "Last-Event-ID": last})
		defer resumed.Body.Close()
		if resumed.StatusCode != http.StatusOK {
			t.Fatalf("GET with Last-Event-ID %s: status %d, want 200", last, resumed.StatusCode)
		}
		if err := s.stderr.waitFor(ctx, `msg="client resumes a stream"`); err != nil {
			t.Fatal(err)
		}
		open()
		answered(t, "the resumed stream", resumed.Body, "7", "1111")
	})

	t.Run("the same request again", func(t *testing.T) {
		call := `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"charge_card","arguments":{"card":"2222","amount":100}}}`
		lost(t, call, "2222")
		other := strings.Replace(call, `"amount":100`, `"amount":200`, 1)
		if rep := rs.post(ctx, other); rep.status != http.StatusBadRequest {
			t.Errorf("a different request under a pending id: status %d, want 400; body %s", rep.status, rep.body)
		}
		again := rs.stream(ctx, http.MethodPost, call, nil)
		defer again.Body.Close()
		if again.StatusCode != http.StatusOK {
			t.Fatalf("the same request again: status %d, want 200", again.StatusCode)
		}
		if err := s.stderr.waitFor(ctx, `msg="a request sent again attaches to its answer"`); err != nil {
			t.Fatal(err)
		}
		open()
		answered(t, "the request sent again", again.Body, "8", "2222")
	})

	rep := rs.post(ctx, `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"charges","arguments":{}}}`)
	if !strings.Contains(rep.body, `"structuredContent":{"total":2}`) {
		t.Errorf("charges: %s; want a total of 2", rep.body)
	}
	if strings.Contains(s.stderr.String(), "amount=200") {
		t.Errorf("the refused request reached the upstream")
	}

	del := rawRequest(t, ctx, hc, http.MethodDelete, s.url, rs.headers(), "")
	if del.status != http.StatusNoContent {
		t.Errorf("DELETE: status %d, want 204; body %s", del.status, del.body)
	}
	if rep := rs.post(ctx, `{"jsonrpc":"2.0","id":10,"method":"ping"}`); rep.status != http.StatusNotFound {
		t.Errorf("a request in the deleted session: status %d, want 404; body %s", rep.status, rep.body)
	}
}

// TestServeProgressReachesItsCaller: two clients, each calling with the
// same progress token (each client picks its own tokens, and they
// collide), must each be told of their own call's progress only. In
// 2025-11-25 each has its own session; in 2026-07-28 they share serve's
// stateless lane and its upstream.
func TestServeProgressReachesItsCaller(t *testing.T) {
	t.Parallel()
	for _, version := range []string{"2025-11-25", ""} {
		name := version
		if name == "" {
			name = "2026-07-28"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			s := serveCharge(t, []string{"--log-level", "debug"}, "-gate")
			type client struct {
				p        *peer
				progress chan string
				done     chan error
			}
			clients := map[string]*client{}
			for _, card := range []string{"1111", "2222"} {
				c := &client{progress: make(chan string, 8), done: make(chan error, 1)}
				c.p = connectHTTP(t, ctx, s, s.url, version, &mcp.ClientOptions{
					ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
						c.progress <- req.Params.Message
					},
				}, nil)
				clients[card] = c
			}
			var opens []func()
			for card, c := range clients {
				params := &mcp.CallToolParams{Name: "charge_card", Arguments: chargeArgs(card, 100)}
				params.SetProgressToken("progress-1")
				go func() {
					_, err := c.p.CallTool(ctx, params)
					c.done <- err
				}()
				if err := s.stderr.waitFor(ctx, "charge_card card="+card+" n=1: waiting for SIGUSR1"); err != nil {
					t.Fatal(err)
				}
			}
			// One gate per upstream: two in 2025-11-25, one in 2026-07-28.
			pids := map[string]bool{}
			for _, m := range upstreamPID.FindAllStringSubmatch(s.stderr.String(), -1) {
				if !pids[m[1]] {
					pids[m[1]] = true
					pid, _ := strconv.Atoi(m[1])
					opens = append(opens, func() { syscall.Kill(pid, syscall.SIGUSR1) })
				}
			}
			for _, open := range opens {
				open()
			}
			for card, c := range clients {
				if err := <-c.done; err != nil {
					t.Errorf("card %s: %v", card, err)
					continue
				}
				select {
				case msg := <-c.progress:
					if want := "charged card " + card; msg != want {
						t.Errorf("the client charging card %s was told %q, want %q", card, msg, want)
					}
				case <-time.After(5 * time.Second):
					t.Errorf("the client charging card %s was told of no progress within 5s of its answer", card)
				}
				select {
				case msg := <-c.progress:
					t.Errorf("the client charging card %s was also told %q", card, msg)
				default:
				}
			}
		})
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

// TestServeSessionLimits: --max-sessions refuses one session too many
// with 503 and Retry-After; --idle-timeout ends a session no request has
// touched, after which it is unknown (404) and a new one can start.
func TestServeSessionLimits(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s := serveCharge(t, []string{"--max-sessions", "1", "--idle-timeout", "1s", "--log-level", "debug"})
	hc := httpClient(t)
	first := openRawSession(t, ctx, hc, s.url)

	rep := rawRequest(t, ctx, hc, http.MethodPost, s.url, postHeaders(nil), initializeBody)
	if rep.status != http.StatusServiceUnavailable || rep.header.Get("Retry-After") == "" {
		t.Errorf("a second session over --max-sessions 1: status %d, Retry-After %q; want 503 with Retry-After; body %s", rep.status, rep.header.Get("Retry-After"), rep.body)
	}

	if err := s.stderr.waitFor(ctx, `msg="session ended after sitting idle" session=`+first.id); err != nil {
		t.Fatal(err)
	}
	if rep := first.post(ctx, `{"jsonrpc":"2.0","id":2,"method":"ping"}`); rep.status != http.StatusNotFound {
		t.Errorf("a request in the session that sat idle: status %d, want 404; body %s", rep.status, rep.body)
	}
	// The ended session counts until its upstream has stopped: a client
	// told 503 comes back after Retry-After.
	second := openRawSessionWhenFree(t, ctx, hc, s.url)
	if rep := second.post(ctx, `{"jsonrpc":"2.0","id":2,"method":"ping"}`); rep.status != http.StatusOK {
		t.Errorf("ping in a new session once the idle one ended: status %d, want 200; body %s", rep.status, rep.body)
	}
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

// TestServeCancelledCallLetsTheSessionIdle: a client that gives up on a
// call (notifications/cancelled) is owed no answer; its session must still
// end once idle, and its upstream with it, rather than wait forever for an
// answer that never comes.
func TestServeCancelledCallLetsTheSessionIdle(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s := serveCharge(t, []string{"--idle-timeout", "1s", "--log-level", "debug"}, "-gate")
	hc := httpClient(t)
	rs := openRawSession(t, ctx, hc, s.url)
	open := gateOf(t, ctx, s)
	t.Cleanup(open)

	callCtx, hangUp := context.WithCancel(ctx)
	defer hangUp()
	resp := rs.stream(callCtx, http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"card":"4242","amount":100}}}`, nil)
	defer resp.Body.Close()
	if err := s.stderr.waitFor(ctx, "charge_card card=4242 n=1: waiting for SIGUSR1"); err != nil {
		t.Fatal(err)
	}
	if rep := rs.post(ctx, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"gave up"}}`); rep.status != http.StatusAccepted {
		t.Fatalf("notifications/cancelled: status %d, want 202; body %s", rep.status, rep.body)
	}
	if err := s.stderr.waitFor(ctx, "client cancelled a tools/call; detaching it"); err != nil {
		t.Fatal(err)
	}
	hangUp()
	open()
	if err := s.stderr.waitFor(ctx, "state=completed"); err != nil {
		t.Fatal(err)
	}
	idle, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.stderr.waitFor(idle, `msg="session ended after sitting idle" session=`+rs.id); err != nil {
		t.Fatalf("the session whose client cancelled its call did not end within 10s of --idle-timeout 1s: %v", err)
	}
}
