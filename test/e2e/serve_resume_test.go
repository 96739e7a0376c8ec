package e2e

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

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
	primed := func() error { return nil } // the client holds an event id
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
		_, stderr, wait := tsClient(t, ctx, "resume", url)
		primed = func() error { return stderr.waitFor(ctx, "primed") }
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
	// Written to the client's connection is not yet read by it: the
	// TypeScript client, a process of its own, may not have read the
	// event when the cut resets the connection, and would then hold no
	// event id to resume from.
	if err := primed(); err != nil {
		t.Fatalf("the client never read the priming event: %v", err)
	}
	m := upstreamPID.FindStringSubmatch(s.stderr.String())
	if m == nil {
		t.Fatalf("serve logged no upstream pid")
	}
	pid, _ := strconv.Atoi(m[1])
	var once sync.Once
	answerNow := func() {
		once.Do(func() {
			if err := openGate(pid); err != nil {
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
