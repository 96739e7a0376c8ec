package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/transport/stdio"
)

// upstreamEnd is the test's side of one upstream connection.
type upstreamEnd struct {
	*peer
	w io.Closer // closing it is this upstream exiting
}

// restartRig is a Session whose upstream can be started again: every start
// hands the test a new upstream end.
type restartRig struct {
	s       *Session
	client  *peer
	clientW io.Closer
	starts  chan *upstreamEnd
	stopped chan struct{}
	err     error
}

func pipeEnds() (proxySide *stdio.Conn, testSide *upstreamEnd) {
	ur, uw := io.Pipe() // upstream -> proxy
	qr, qw := io.Pipe() // proxy -> upstream
	proxySide = stdio.NewConn(ur, qw, 0)
	proxySide.ReportCutFrames() // as stdio.Child does
	return proxySide, &upstreamEnd{peer: newPeer(stdio.NewConn(qr, uw, 0)), w: uw}
}

func newRestartRig(t *testing.T, maxRestarts int, configure ...func(*Options)) *restartRig {
	t.Helper()
	cr, cw := io.Pipe()
	pr, pw := io.Pipe()
	r := &restartRig{client: newPeer(stdio.NewConn(pr, cw, 0)), clientW: cw, starts: make(chan *upstreamEnd, 8), stopped: make(chan struct{})}
	first, end := pipeEnds()
	r.starts <- end
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom()})
	opts := Options{
		Interceptor: in, Actor: "alice", Scope: "session:test", UpstreamID: "stdio:test", ShutdownGrace: time.Second,
		MaxRestarts: maxRestarts,
		Restart: func(context.Context) (Conn, error) {
			conn, end := pipeEnds()
			r.starts <- end
			return conn, nil
		},
	}
	for _, c := range configure {
		c(&opts)
	}
	s := New(stdio.NewConn(cr, pw, 0), first, opts)
	r.s = s
	go func() {
		r.err = s.Run(context.Background())
		pw.Close()
		close(r.stopped)
	}()
	t.Cleanup(func() {
		cw.Close()
		for {
			select {
			case end := <-r.starts:
				end.w.Close()
				continue
			case <-r.stopped:
			case <-time.After(5 * time.Second):
				t.Error("session did not stop")
			}
			return
		}
	})
	return r
}

func (r *restartRig) upstream(t *testing.T) *upstreamEnd {
	t.Helper()
	select {
	case end := <-r.starts:
		return end
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream was not started")
		return nil
	}
}

// waitForwarded waits until n requests of the client's wait on the
// upstream. A write of the client's returns once the proxy has read it,
// which may be before the proxy has handled it.
func (r *restartRig) waitForwarded(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; {
		r.s.mu.Lock()
		got := len(r.s.forwarded)
		r.s.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests wait on the upstream; want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// initialize makes the client's 2025-06-18 handshake with up, the
// upstream running, without notifications/initialized.
func (r *restartRig) initialize(t *testing.T, up *upstreamEnd) {
	t.Helper()
	r.initializeAt(t, up, "2025-06-18")
}

// initializeAt is initialize in protocol version.
func (r *restartRig) initializeAt(t *testing.T, up *upstreamEnd, version string) {
	t.Helper()
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+version+`","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`)
	up.next(t, "upstream")
	up.send(t, `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"`+version+`","capabilities":{},"serverInfo":{"name":"s","version":"1"}}}`)
	r.client.next(t, "client")
}

// exitAndRestart makes up exit and returns the upstream started in its
// place, once the client's initialize is replayed to it (not answered).
func (r *restartRig) exitAndRestart(t *testing.T, up *upstreamEnd) *upstreamEnd {
	t.Helper()
	up.w.Close()
	next := r.upstream(t)
	if got := next.next(t, "restarted upstream"); !strings.Contains(got, `"method":"initialize"`) {
		t.Fatalf("the restarted upstream got %s; want the client's initialize replayed", got)
	}
	return next
}

func TestRestartReplaysTheHandshake(t *testing.T) {
	r := newRestartRig(t, 5)
	up := r.upstream(t)
	const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"roots":{}},"clientInfo":{"name":"c","version":"1"}}}`
	r.client.send(t, initialize)
	up.next(t, "upstream")
	up.send(t, `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"s","version":"1"}}}`)
	r.client.next(t, "client")
	r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	up.next(t, "upstream")

	up.w.Close() // the upstream exits between calls
	up2 := r.upstream(t)
	got := up2.next(t, "restarted upstream")
	want := `{"jsonrpc":"2.0","id":"mcp-idempotent:1","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"roots":{}},"clientInfo":{"name":"c","version":"1"}}}`
	if got != want {
		t.Fatalf("the restarted upstream got %s; want the client's initialize replayed:\n%s", got, want)
	}
	up2.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"s","version":"1"}}}`)
	if got := up2.next(t, "restarted upstream"); got != `{"jsonrpc":"2.0","method":"notifications/initialized"}` {
		t.Fatalf("after initialize the restarted upstream got %s; want notifications/initialized", got)
	}
	// The client never saw any of it, and its session carries on.
	r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	if got := up2.next(t, "restarted upstream"); got != `{"jsonrpc":"2.0","id":2,"method":"ping"}` {
		t.Fatalf("the client's next request reached the restarted upstream as %s", got)
	}
	up2.send(t, `{"jsonrpc":"2.0","id":2,"result":{}}`)
	if got := r.client.next(t, "client"); got != `{"jsonrpc":"2.0","id":2,"result":{}}` {
		t.Fatalf("the client got %s; want the ping's answer (and nothing of the replayed handshake)", got)
	}
}

// TestRestartAfterAFailedHandshake: an initialize the upstream exited
// without answering, or answered with an error, is not replayed on the
// upstream started next. The client was told it failed and initializes
// again; a server given the failed one already would refuse that (the
// go-sdk's: "duplicate initialize received").
func TestRestartAfterAFailedHandshake(t *testing.T) {
	const initialize = `{"jsonrpc":"2.0","id":%d,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`
	for _, tc := range []struct {
		name string
		fail func(t *testing.T, up *upstreamEnd)
	}{
		{"exited", func(t *testing.T, up *upstreamEnd) {}},
		{"refused", func(t *testing.T, up *upstreamEnd) {
			up.send(t, `{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"not now"}}`)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRestartRig(t, 5)
			up := r.upstream(t)
			r.client.send(t, fmt.Sprintf(initialize, 1))
			up.next(t, "upstream")
			tc.fail(t, up)
			up.w.Close()
			if got := r.client.next(t, "client"); !strings.Contains(got, `"error"`) {
				t.Fatalf("the client got %s; want an error for its initialize", got)
			}
			up2 := r.upstream(t)
			r.client.send(t, fmt.Sprintf(initialize, 2))
			if got := up2.next(t, "restarted upstream"); got != fmt.Sprintf(initialize, 2) {
				t.Fatalf("the restarted upstream got %s first; want the client's second initialize, and no replay of the failed one", got)
			}
			up2.send(t, `{"jsonrpc":"2.0","id":2,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"s","version":"1"}}}`)
			r.client.next(t, "client")
		})
	}
}

// TestCancelledWhileTheUpstreamRestarts: a call the proxy sends itself (a
// read-only tool with a retry rule) that its caller cancels while it waits
// for the upstream to be started again is never sent: nothing of it
// reaches the new upstream.
func TestCancelledWhileTheUpstreamRestarts(t *testing.T) {
	r := newRestartRig(t, 5, func(o *Options) {
		o.Resolve = func(tool string, ann *mcp.Annotations) policy.Policy {
			p := policy.FromAnnotations(ann)
			p.Retry = &policy.RetryRule{MaxAttempts: 2, Base: time.Millisecond, Cap: time.Millisecond}
			return p
		}
	})
	up := r.upstream(t)
	r.initialize(t, up)
	up2 := r.exitAndRestart(t, up)
	// Meanwhile a call comes and is cancelled, before the handshake is done.
	r.client.send(t, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"quote","arguments":{}}}`)
	r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}`)
	time.Sleep(50 * time.Millisecond) // the call waits for the upstream
	up2.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"s","version":"1"}}}`)
	r.client.send(t, `{"jsonrpc":"2.0","id":6,"method":"ping"}`)
	for {
		got := up2.next(t, "restarted upstream")
		if got == `{"jsonrpc":"2.0","id":6,"method":"ping"}` {
			return
		}
		if strings.Contains(got, `"quote"`) || strings.Contains(got, `"tools/list"`) {
			t.Fatalf("the restarted upstream got %s, sent for a call cancelled before it could go", got)
		}
	}
}

// TestExitDuringTheReplayedHandshake: an upstream that exits while its
// handshake is replayed is one more exit, counted as any other, and the
// next start goes on; the session does not wait for an answer that cannot
// come.
func TestExitDuringTheReplayedHandshake(t *testing.T) {
	r := newRestartRig(t, 5)
	up := r.upstream(t)
	r.initialize(t, up)
	up2 := r.exitAndRestart(t, up) // exits between calls
	up2.w.Close()                  // exits during the handshake

	up3 := r.upstream(t)
	got := up3.next(t, "upstream started a third time")
	if !strings.Contains(got, `"method":"initialize"`) {
		t.Fatalf("the third upstream got %s; want the replayed initialize", got)
	}
	var m struct{ ID string }
	json.Unmarshal([]byte(got), &m)
	up3.send(t, `{"jsonrpc":"2.0","id":"`+m.ID+`","result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"s","version":"1"}}}`)
	r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	if got := up3.next(t, "upstream started a third time"); got != `{"jsonrpc":"2.0","id":2,"method":"ping"}` {
		t.Fatalf("the client's next request reached the upstream as %s", got)
	}
}

func TestCrashLoopStopsRestarting(t *testing.T) {
	r := newRestartRig(t, 2)
	for range 3 { // the first start and two restarts exit at once
		r.upstream(t).w.Close()
	}
	select {
	case <-r.stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Run went on restarting a crash loop")
	}
	if !errors.Is(r.err, ErrCrashLoop) || !errors.Is(r.err, ErrUpstreamClosed) || !strings.Contains(r.err.Error(), "3 exits") {
		t.Fatalf("Run = %v; want a crash-loop error counting 3 exits", r.err)
	}
}

// TestBurstWhileTheUpstreamRestarts: requests read at once while the
// upstream is being started again reach the new upstream after its
// replayed handshake, in order.
func TestBurstWhileTheUpstreamRestarts(t *testing.T) {
	r := newRestartRig(t, 5)
	up := r.upstream(t)
	r.initialize(t, up)
	r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	up.next(t, "upstream")
	up.w.Close() // the upstream exits between calls
	up2 := r.upstream(t)
	if _, err := r.clientW.(io.Writer).Write([]byte(`{"jsonrpc":"2.0","id":2,"method":"ping"}` + "\n" + `{"jsonrpc":"2.0","id":3,"method":"ping"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	if got := up2.next(t, "restarted upstream"); !strings.Contains(got, `"method":"initialize"`) {
		t.Fatalf("the restarted upstream got %s; want the client's initialize replayed", got)
	}
	up2.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"s","version":"1"}}}`)
	for _, want := range []string{`"method":"notifications/initialized"`, `"id":2,"method":"ping"`, `"id":3,"method":"ping"`} {
		if got := up2.next(t, "restarted upstream"); !strings.Contains(got, want) {
			t.Fatalf("the restarted upstream got %s; want %s", got, want)
		}
	}
}

// TestBatchDuringAFailedRestart: a batch that waits for an upstream being
// started again, whose start then fails, is answered: each request is
// told it was not sent, and why the start failed.
func TestBatchDuringAFailedRestart(t *testing.T) {
	r := newRestartRig(t, 5)
	up := r.upstream(t)
	r.initializeAt(t, up, "2025-03-26") // a protocol with batches
	up2 := r.exitAndRestart(t, up)
	r.client.send(t, `[{"jsonrpc":"2.0","id":10,"method":"ping"},{"jsonrpc":"2.0","id":11,"method":"ping"}]`)
	r.waitForwarded(t, 2) // the batch is read, and waits for the upstream
	// The replayed handshake fails: the upstream cannot be used.
	up2.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","error":{"code":-32600,"message":"no"}}`)
	got := r.client.next(t, "client")
	for _, id := range []string{`"id":10`, `"id":11`} {
		if !strings.Contains(got, id) || !strings.Contains(got, `"error"`) {
			t.Fatalf("the client got %s; want an error for each request of its batch", got)
		}
	}
	if strings.Count(got, "ping was not sent; starting it again failed") != 2 {
		t.Fatalf("the client got %s; want each request told it was not sent, and why the upstream could not be started again", got)
	}
}

// TestBatchWithAMemberCancelledWhileItWaits: a batch that waited for the
// upstream, one of whose requests the client cancelled meanwhile, still
// goes with the rest; one whose requests were all answered (abandon took
// them) does not go.
func TestBatchWithAMemberCancelledWhileItWaits(t *testing.T) {
	msgs, err := jsonrpc.DecodeBatch([]byte(`[{"jsonrpc":"2.0","id":10,"method":"ping"},{"jsonrpc":"2.0","id":11,"method":"ping"}]`))
	if err != nil {
		t.Fatal(err)
	}
	s := &Session{forwarded: make(map[string]forwardedRequest)}
	for _, m := range msgs {
		s.forwarded[string(jsonrpc.IDKey(m.ID))] = forwardedRequest{id: m.ID, method: m.Method, batch: 7}
	}
	l := newLink(nil)
	delete(s.forwarded, string(jsonrpc.IDKey(msgs[0].ID))) // cancelled while it waited
	if !s.sendingLocked(msgs, 7, l) {
		t.Fatal("a batch whose first request was cancelled was not sent: its second would never be answered")
	}
	if f := s.forwarded[string(jsonrpc.IDKey(msgs[1].ID))]; f.link != l {
		t.Error("the request going was not noted as written to its link")
	}
	clear(s.forwarded) // abandon answered them
	if s.sendingLocked(msgs, 7, l) {
		t.Error("a batch whose requests were all answered was sent")
	}
}

// TestRestartAgreesOnAnotherVersion: an upstream started again (its
// command may now run a newer or older server) that answers the replayed
// initialize with a protocol version other than the session's would speak
// one protocol to a client that speaks another. The session ends instead,
// saying why, and the upstream gets nothing more.
func TestRestartAgreesOnAnotherVersion(t *testing.T) {
	r := newRestartRig(t, 5)
	up := r.upstream(t)
	r.initializeAt(t, up, "2025-11-25")
	up2 := r.exitAndRestart(t, up)
	up2.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"s","version":"2"}}}`)
	select {
	case <-r.stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("the session went on with an upstream that speaks another protocol version")
	}
	var re *RestartError
	if !errors.As(r.err, &re) || !strings.Contains(r.err.Error(), `"2025-06-18"`) || !strings.Contains(r.err.Error(), `"2025-11-25"`) {
		t.Fatalf("Run = %v; want a RestartError naming both versions", r.err)
	}
	<-up2.closed
	up2.nothingMore(t, "the session had ended")
}

// TestExitInTheMiddleOfAMessage: an upstream that exits while writing a
// message leaves its start, a line without its end, on its output. That
// is no message: the client is not handed it (a client's reader may end
// the session on a line that is not JSON), and the request it would have
// answered is told the upstream exited.
func TestExitInTheMiddleOfAMessage(t *testing.T) {
	r := newRestartRig(t, 5)
	up := r.upstream(t)
	r.initialize(t, up)
	r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"file:///a"}}`)
	up.next(t, "upstream")
	if _, err := up.w.(io.Writer).Write([]byte(`{"jsonrpc":"2.0","id":2,"result":{"contents":[{"uri":"fi`)); err != nil {
		t.Fatal(err)
	}
	up.w.Close()
	got := r.client.next(t, "client")
	if !json.Valid([]byte(got)) || !strings.Contains(got, `"id":2,"error"`) || !strings.Contains(got, "closed before answering") {
		t.Fatalf("the client got %s; want an error saying the upstream closed before answering", got)
	}
	up2 := r.exitAndRestart(t, up) // the session goes on
	up2.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"s","version":"1"}}}`)
	r.client.send(t, `{"jsonrpc":"2.0","id":3,"method":"ping"}`)
	up2.next(t, "restarted upstream")
	up2.send(t, `{"jsonrpc":"2.0","id":3,"result":{}}`)
	if got := r.client.next(t, "client"); got != `{"jsonrpc":"2.0","id":3,"result":{}}` {
		t.Fatalf("the client got %s; want the ping's answer, and nothing of the cut message", got)
	}
}

// TestClientLeavesDuringTheReplayedHandshake: a client that goes while
// the upstream started again has not answered the replayed handshake
// ends the session as a client going does, without waiting for that
// answer (up to 30 s) nor calling it a failed restart.
func TestClientLeavesDuringTheReplayedHandshake(t *testing.T) {
	r := newRestartRig(t, 5)
	up := r.upstream(t)
	r.initialize(t, up)
	up2 := r.exitAndRestart(t, up) // which never answers the handshake
	r.clientW.Close()
	select {
	case <-r.stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("the session waited on the replayed handshake after the client had gone")
	}
	if r.err != nil {
		t.Fatalf("Run = %v; want nil, as when the client goes", r.err)
	}
	<-up2.closed // the upstream was stopped
}

// TestCallWaitsThroughAFailedHandshake: a call that waits for the
// upstream being started again, which then exits during the replayed
// handshake, waits for the start after it, as a request passed on does;
// it is not told it failed while the upstream is started once more.
func TestCallWaitsThroughAFailedHandshake(t *testing.T) {
	r := newRestartRig(t, 5)
	up := r.upstream(t)
	r.initialize(t, up)
	up2 := r.exitAndRestart(t, up)
	r.client.send(t, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"quote","arguments":{}}}`)
	for { // its listing of the tools waits for the upstream
		r.s.tools.mu.Lock()
		listing := r.s.tools.inFlight != nil
		r.s.tools.mu.Unlock()
		if listing {
			break
		}
		time.Sleep(time.Millisecond)
	}
	up2.w.Close() // exits during the handshake
	up3 := r.upstream(t)
	results := map[string]string{
		"initialize": `{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"s","version":"1"}}`,
		"tools/list": `{"tools":[{"name":"quote","inputSchema":{"type":"object"}}]}`,
		"tools/call": `{"content":[{"type":"text","text":"42"}]}`,
	}
	// The listing may be made twice: the second start invalidated what
	// the first, begun before it, would learn.
	var listed bool
	for method := ""; method != "tools/call"; {
		got := up3.next(t, "upstream started a third time")
		var m struct {
			ID     json.RawMessage
			Method string
		}
		json.Unmarshal([]byte(got), &m)
		if method = m.Method; results[method] == "" {
			t.Fatalf("the third upstream got %s", got)
		}
		listed = listed || method == "tools/list"
		up3.send(t, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":`+results[method]+`}`)
	}
	if !listed {
		t.Fatal("the tools were not listed on the upstream started again: the call went by no listing")
	}
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":5,"result"`) || !strings.Contains(got, `"42"`) {
		t.Fatalf("the client got %s; want the call's result from the third upstream", got)
	}
}

// TestRestartTellsTheToolsMayHaveChanged: the upstream started again may
// list other tools (its command now runs another version, or its tools
// depend on its state). A client told at initialize that the tool list
// can change is told it may have: it lists the tools again. One not told
// so gets no such notification, which it would not expect.
func TestRestartTellsTheToolsMayHaveChanged(t *testing.T) {
	for _, tc := range []struct {
		name, capabilities string
		told               bool
	}{
		{"listChanged", `{"tools":{"listChanged":true}}`, true},
		{"no listChanged", `{"tools":{}}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRestartRig(t, 5)
			up := r.upstream(t)
			r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`)
			up.next(t, "upstream")
			up.send(t, `{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":`+tc.capabilities+`,"serverInfo":{"name":"s","version":"1"}}}`)
			r.client.next(t, "client")
			up2 := r.exitAndRestart(t, up)
			up2.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"protocolVersion":"2025-06-18","capabilities":`+tc.capabilities+`,"serverInfo":{"name":"s","version":"2"}}}`)
			r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
			up2.next(t, "restarted upstream")
			up2.send(t, `{"jsonrpc":"2.0","id":2,"result":{}}`)
			got := r.client.next(t, "client")
			if told := got == `{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`; told != tc.told {
				t.Fatalf("the client got %s first; told of a change: %v, want %v", got, told, tc.told)
			}
			if tc.told {
				got = r.client.next(t, "client")
			}
			if got != `{"jsonrpc":"2.0","id":2,"result":{}}` {
				t.Fatalf("the client got %s; want the ping's answer", got)
			}
		})
	}
}
