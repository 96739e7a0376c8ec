package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/transport/stdio"
)

var update = flag.Bool("update", false, "rewrite the expected frames of testdata/*.txt from what the proxy does")

// peer is one end of a pipe pair, as seen by the test.
type peer struct {
	conn   *stdio.Conn
	frames chan []byte
	closed chan struct{}
}

func newPeer(conn *stdio.Conn) *peer {
	p := &peer{conn: conn, frames: make(chan []byte, 64), closed: make(chan struct{})}
	go func() {
		defer close(p.closed)
		for {
			f, err := conn.ReadFrame()
			if err != nil {
				return
			}
			p.frames <- f
		}
	}()
	return p
}

func (p *peer) send(t *testing.T, frame string) {
	t.Helper()
	if err := p.conn.WriteFrame([]byte(frame)); err != nil {
		t.Fatalf("sending %s: %v", frame, err)
	}
}

func (p *peer) next(t *testing.T, side string) string {
	t.Helper()
	select {
	case f := <-p.frames:
		return string(f)
	case <-p.closed:
		select { // frames read before the close come first
		case f := <-p.frames:
			return string(f)
		default:
		}
		t.Fatalf("%s: connection closed while a frame was expected", side)
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no frame within 5s", side)
	}
	return ""
}

// answerCharged answers call, a tools/call the upstream got, with a
// result saying "charged".
func (p *peer) answerCharged(t *testing.T, call string) {
	t.Helper()
	var m struct{ ID json.RawMessage }
	json.Unmarshal([]byte(call), &m)
	p.send(t, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"content":[{"type":"text","text":"charged"}]}}`)
}

// nothingMore fails t if a frame read from p waits unread: why says what
// the test expects to have ended.
func (p *peer) nothingMore(t *testing.T, why string) {
	t.Helper()
	select {
	case f := <-p.frames:
		t.Fatalf("got %s too; %s", f, why)
	default:
	}
}

// byID reads the next n frames, which may come in any order, by their id.
func (p *peer) byID(t *testing.T, n int) map[string]string {
	t.Helper()
	frames := make(map[string]string, n)
	for range n {
		f := p.next(t, "client")
		var m struct{ ID json.RawMessage }
		json.Unmarshal([]byte(f), &m)
		frames[string(m.ID)] = f
	}
	return frames
}

// rig is a Session between two test peers: the client and the upstream.
type rig struct {
	client, upstream *peer
	clientW          io.Closer     // closing it is the client going away
	upstreamW        io.Closer     // closing it is the upstream exiting
	stopped          chan struct{} // closed when Run has returned
	err              error         // what Run returned; read after stopped
	s                *Session
}

func newRig(t *testing.T, maxFrame int) *rig {
	t.Helper()
	return newRigWith(t, maxFrame, intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom()}))
}

// newRigWith is newRig with the interceptor in, which rigs may share, as
// the sessions of one serve process or of processes sharing a store do.
func newRigWith(t *testing.T, maxFrame int, in *intercept.Interceptor) *rig {
	t.Helper()
	return newRigOptions(t, maxFrame, Options{Interceptor: in})
}

// newRigOptions is newRigWith with more of the session's options: opts
// with the rig's actor, scope, upstream and grace.
func newRigOptions(t *testing.T, maxFrame int, opts Options) *rig {
	t.Helper()
	return newRigRunning(t, context.Background(), maxFrame, opts)
}

// newRigRunning is newRigOptions with the session run under ctx; its
// ShutdownGrace is a second unless opts sets one.
func newRigRunning(t *testing.T, ctx context.Context, maxFrame int, opts Options) *rig {
	t.Helper()
	return newRigUpstream(t, ctx, maxFrame, opts, func(c Conn) Conn { return c })
}

// newRigUpstream is newRigRunning with the session's upstream Conn made
// by wrap from the rig's.
func newRigUpstream(t *testing.T, ctx context.Context, maxFrame int, opts Options, wrap func(Conn) Conn) *rig {
	t.Helper()
	return newRigWriting(t, ctx, maxFrame, opts, wrap, nil, nil)
}

// newRigWriting is newRigUpstream with the proxy's writes to the client
// and to the upstream going through toClient and toUpstream, if not nil.
func newRigWriting(t *testing.T, ctx context.Context, maxFrame int, opts Options, wrap func(Conn) Conn, toClient, toUpstream func(io.WriteCloser) io.WriteCloser) *rig {
	t.Helper()
	cr, cw := io.Pipe() // client -> proxy
	pr, pw := io.Pipe() // proxy -> client
	ur, uw := io.Pipe() // upstream -> proxy
	qr, qw := io.Pipe() // proxy -> upstream
	opts.Actor, opts.Scope, opts.UpstreamID = "alice", "session:test", "stdio:test"
	if opts.ShutdownGrace == 0 {
		opts.ShutdownGrace = time.Second
	}
	var clientOut, upstreamOut io.WriteCloser = pw, qw
	if toClient != nil {
		clientOut = toClient(pw)
	}
	if toUpstream != nil {
		upstreamOut = toUpstream(qw)
	}
	s := New(stdio.NewConn(cr, clientOut, maxFrame), wrap(stdio.NewConn(ur, upstreamOut, maxFrame)), opts)
	r := &rig{
		client:    newPeer(stdio.NewConn(pr, cw, 0)),
		upstream:  newPeer(stdio.NewConn(qr, uw, 0)),
		clientW:   cw,
		upstreamW: uw,
		stopped:   make(chan struct{}),
		s:         s,
	}
	go func() {
		r.err = s.Run(ctx)
		pw.Close()
		qw.Close()
		close(r.stopped)
	}()
	t.Cleanup(func() {
		cw.Close()
		uw.Close()
		r.wait(t)
	})
	return r
}

// startCall sends frame, the session's first tools/call, answers the
// proxy's listing with no tools, and returns the call as the upstream got
// it.
func (r *rig) startCall(t *testing.T, frame string) string {
	t.Helper()
	r.client.send(t, frame)
	r.upstream.next(t, "upstream") // tools/list
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[]}}`)
	return r.upstream.next(t, "upstream")
}

// wait returns what Run returned, failing the test if it does not return.
func (r *rig) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-r.stopped:
		return r.err
	case <-time.After(5 * time.Second):
		t.Fatal("session did not stop")
		return nil
	}
}

// volatile matches what differs from run to run: execution ids, times.
var volatile = regexp.MustCompile(`exe_[0-9A-HJKMNP-TV-Z]{26}|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z`)

// delivered matches the trace of a delivery. The first answer is recorded
// as delivered just after it is written, so a retry that follows at once
// may find the execution completed or delivered: both are right.
var delivered = strings.NewReplacer(`"state":"delivered"`, `"state":"completed"`, `,"delivered":"TIME"`, ``)

func normalise(frame string) string {
	return delivered.Replace(volatile.ReplaceAllStringFunc(frame, func(s string) string {
		if strings.HasPrefix(s, "exe_") {
			return "exe_ID"
		}
		return "TIME"
	}))
}

// TestTranscripts replays testdata/*.txt. Each line is a frame:
// "client> F" the client sends F; "upstream> F" the upstream sends F;
// "client< F" the client must receive F next; "upstream< F" likewise the
// upstream. Lines starting with # are comments. With -update, the
// expected frames are rewritten from what was received.
func TestTranscripts(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.txt")
	if len(files) == 0 {
		t.Fatal("no transcripts in testdata")
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			r := newRig(t, 0)
			var out bytes.Buffer
			sc := bufio.NewScanner(bytes.NewReader(data))
			sc.Buffer(nil, 1<<20)
			for n := 1; sc.Scan(); n++ {
				line := sc.Text()
				verb, frame, ok := strings.Cut(line, " ")
				switch {
				case !ok || strings.HasPrefix(line, "#"):
				case verb == "client>":
					r.client.send(t, frame)
				case verb == "upstream>":
					r.upstream.send(t, frame)
				case verb == "client<" || verb == "upstream<":
					p := r.client
					if verb == "upstream<" {
						p = r.upstream
					}
					got := normalise(p.next(t, fmt.Sprintf("%s:%d", file, n)))
					if *update {
						line = verb + " " + got
					} else if got != frame {
						t.Errorf("%s:%d: %s\n got: %s\nwant: %s", file, n, verb, got, frame)
					}
				default:
					t.Fatalf("%s:%d: unknown verb %q", file, n, verb)
				}
				out.WriteString(line + "\n")
			}
			if *update {
				if err := os.WriteFile(file, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestUpstreamDeathAnswersEveryone(t *testing.T) {
	r := newRig(t, 0)
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///a"}}`)
	r.upstream.next(t, "upstream")
	r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":100}}}`)
	list := r.upstream.next(t, "upstream") // the proxy's own tools/list
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[{"name":"charge_card","inputSchema":{"type":"object"}}]}}`)
	if !strings.Contains(list, `"method":"tools/list"`) {
		t.Fatalf("upstream got %s; want the proxy's tools/list", list)
	}
	r.upstream.next(t, "upstream") // the tools/call: dispatched
	r.upstreamW.Close()            // the upstream dies with the call in flight

	answers := r.client.byID(t, 2)
	if a := answers["1"]; !strings.Contains(a, `"error"`) || !strings.Contains(a, "closed before answering resources/read") {
		t.Errorf("pass-through request got %s; want an error saying the upstream closed", a)
	}
	if a := answers["2"]; !strings.Contains(a, `Outcome unknown: execution exe_`) || !strings.Contains(a, `"isError":true`) {
		t.Errorf("dispatched tools/call got %s; want an outcome-unknown result", a)
	}
	if err := r.wait(t); !errors.Is(err, ErrUpstreamClosed) {
		t.Fatalf("Run = %v; want ErrUpstreamClosed", err)
	}
}

func TestRunReturnsWhenEitherSideCloses(t *testing.T) {
	r := newRig(t, 0)
	r.upstreamW.Close()
	if err := r.wait(t); !errors.Is(err, ErrUpstreamClosed) {
		t.Fatalf("upstream closed: Run = %v; want ErrUpstreamClosed", err)
	}

	r = newRig(t, 0)
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card"}}`)
	r.upstream.next(t, "upstream") // tools/list
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[]}}`)
	call := r.upstream.next(t, "upstream")
	r.clientW.Close() // the client leaves with a call in flight
	var m struct{ ID json.RawMessage }
	json.Unmarshal([]byte(call), &m)
	r.upstream.send(t, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"content":[]}}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":1`) {
		t.Fatalf("the call in flight when the client left was answered %s", got)
	}
	if err := r.wait(t); err != nil {
		t.Fatalf("client closed: Run = %v; want nil", err)
	}
}

func TestOversizedFrameIsRefusedAndTheSessionGoesOn(t *testing.T) {
	r := newRig(t, 64)
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"`+strings.Repeat("x", 100)+`"}}`)
	got := r.client.next(t, "client")
	if !strings.Contains(got, `"id":1,`) || !strings.Contains(got, `"code":-32600`) || !strings.Contains(got, "64-byte limit") {
		t.Fatalf("got %s; want an error under id 1, naming the 64-byte limit", got)
	}
	// An id past the first bytes cannot be read: JSON-RPC's null id.
	r.client.send(t, `{"jsonrpc":"2.0","method":"ping","params":{"pad":"`+strings.Repeat("x", 10000)+`"},"id":3}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":null,`) || !strings.Contains(got, "64-byte limit") {
		t.Fatalf("got %s; want an error under a null id", got)
	}
	// An answer of the client's gets no answer.
	r.client.send(t, `{"jsonrpc":"2.0","id":4,"result":{"pad":"`+strings.Repeat("x", 100)+`"}}`)
	r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	if got := r.upstream.next(t, "upstream"); got != `{"jsonrpc":"2.0","id":2,"method":"ping"}` {
		t.Fatalf("the frame after an oversized one reached upstream as %s", got)
	}
}

// TestOversizedAnswerIsAnswered: an answer from the upstream over the
// size limit is dropped, and the request it answered is answered at once:
// a tools/call with an unknown outcome (it ran; its result is lost), a
// pass-through request with an error. Neither waits for ever.
func TestOversizedAnswerIsAnswered(t *testing.T) {
	r := newRig(t, 200)
	big := `"` + strings.Repeat("x", 300) + `"`
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///a"}}`)
	r.upstream.next(t, "upstream")
	r.upstream.send(t, `{"jsonrpc":"2.0","id":1,"result":{"contents":[{"text":`+big+`}]}}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":1,"error"`) || !strings.Contains(got, "answer to resources/read was dropped") || !strings.Contains(got, "200-byte limit") {
		t.Fatalf("the pass-through request got %s; want an error naming the limit", got)
	}

	r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":1}}}`)
	r.upstream.next(t, "upstream") // tools/list
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[]}}`)
	var m struct{ ID json.RawMessage }
	json.Unmarshal([]byte(r.upstream.next(t, "upstream")), &m)
	r.upstream.send(t, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"content":[{"type":"text","text":`+big+`}]}}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":2`) || !strings.Contains(got, "Outcome unknown:") || !strings.Contains(got, "200-byte limit") {
		t.Fatalf("the tools/call got %s; want outcome unknown, naming the limit", got)
	}
	// A request from the server too large to read is only logged.
	r.upstream.send(t, `{"jsonrpc":"2.0","method":"sampling/createMessage","id":9,"params":{"p":`+big+`}}`)
	r.client.send(t, `{"jsonrpc":"2.0","id":3,"method":"ping"}`)
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"id":3`) {
		t.Fatalf("the session did not go on: upstream got %s", got)
	}
}

func TestCancellingAnInterceptedCallStaysInTheProxy(t *testing.T) {
	r := newRig(t, 0)
	r.client.send(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"charge_card","arguments":{}}}`)
	r.upstream.next(t, "upstream") // tools/list
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[]}}`)
	call := r.upstream.next(t, "upstream")
	r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`)
	r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}`)
	// The cancel is not forwarded: the next frame upstream is the notification after it.
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, "roots/list_changed") {
		t.Fatalf("upstream got %s after the cancel; an intercepted call's cancel must stay in the proxy", got)
	}
	var m struct{ ID json.RawMessage }
	json.Unmarshal([]byte(call), &m)
	r.upstream.send(t, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"content":[{"type":"text","text":"done"}]}}`)
	// The cancelled caller gets nothing; its retry gets the stored answer.
	r.client.send(t, `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"charge_card","arguments":{}}}`)
	got := r.client.next(t, "client")
	if !strings.Contains(got, `"id":8`) || !strings.Contains(got, `"mcp-idempotent/replayed":true`) || !strings.Contains(got, "done") {
		t.Fatalf("retry after cancel got %s; want the stored answer replayed under id 8", got)
	}
}

// TestUnreadableAnswer: an answer from the upstream that is not JSON but
// names one of the proxy's own requests answers that request (a tools/call
// gets outcome unknown, under the client's id) instead of reaching the
// client under the proxy's id and leaving the call waiting; one to a
// client's request passes on as it came.
func TestUnreadableAnswer(t *testing.T) {
	r := newRig(t, 0)
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card"}}`)
	r.upstream.next(t, "upstream") // tools/list
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[]}}`)
	r.upstream.next(t, "upstream") // the call
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:2","result":{"content":[}}`)
	got := r.client.next(t, "client")
	if !strings.Contains(got, `"id":1,`) || !strings.Contains(got, "Outcome unknown:") || !strings.Contains(got, "could not be read") {
		t.Fatalf("the tools/call got %s; want outcome unknown under its own id, saying the answer could not be read", got)
	}
	// Its retry is told the same, without running again.
	r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card"}}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":2,`) || !strings.Contains(got, "Outcome unknown:") {
		t.Fatalf("the retry got %s; want outcome unknown", got)
	}

	r.client.send(t, `{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"file:///a"}}`)
	r.upstream.next(t, "upstream")
	const broken = `{"jsonrpc":"2.0","id":3,"result":{"contents":[}}`
	r.upstream.send(t, broken)
	if got := r.client.next(t, "client"); got != broken {
		t.Fatalf("the pass-through request got %s; want the upstream's frame as it came", got)
	}
}

// TestAnswersBeyondTheRules: an answer with "error": null beside its
// result (JSON-RPC 1.0 style) is the result; one with both a result and
// an error is malformed, and its call's outcome unknown. Neither runs
// again when called again.
func TestAnswersBeyondTheRules(t *testing.T) {
	for _, tt := range []struct {
		name, answer, want string
	}{
		{"error null", `"result":{"content":[{"type":"text","text":"charged"}]},"error":null`, "charged"},
		{"both", `"result":{"content":[{"type":"text","text":"charged"}]},"error":{"code":-32000,"message":"no"}`, "Outcome unknown:"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, 0)
			r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card"}}`)
			r.upstream.next(t, "upstream") // tools/list
			r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[]}}`)
			r.upstream.next(t, "upstream") // the call
			r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:2",`+tt.answer+`}`)
			if got := r.client.next(t, "client"); !strings.Contains(got, `"id":1,`) || !strings.Contains(got, tt.want) {
				t.Fatalf("the call got %s; want %q", got, tt.want)
			}
			r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card"}}`)
			if got := r.client.next(t, "client"); !strings.Contains(got, `"id":2,`) || !strings.Contains(got, tt.want) {
				t.Fatalf("calling again got %s; want %q, not another run", got, tt.want)
			}
			r.client.send(t, `{"jsonrpc":"2.0","id":3,"method":"ping"}`)
			if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"method":"ping"`) {
				t.Fatalf("upstream got %s; want the ping, the tool not called again", got)
			}
		})
	}
}

// TestIDsAsJSONReadsThem: an answer whose id the upstream spelled its own
// way (an escape, 1 for 1.0) is the answer to the request with that id:
// the request is forgotten, not answered a second time when the upstream
// exits; a request still waiting then is answered under the id as the
// client spelled it; and a cancellation names its call however it spells
// the id.
func TestIDsAsJSONReadsThem(t *testing.T) {
	r := newRig(t, 0)
	r.client.send(t, `{"jsonrpc":"2.0","id":"req-é","method":"ping"}`)
	r.upstream.next(t, "upstream")
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"req-\u00e9","result":{}}`)
	r.client.next(t, "client")
	r.client.send(t, `{"jsonrpc":"2.0","id":1.0,"method":"ping"}`)
	r.upstream.next(t, "upstream")
	r.upstream.send(t, `{"jsonrpc":"2.0","id":1,"result":{}}`)
	r.client.next(t, "client")

	r.client.send(t, `{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"charge_card"}}`)
	r.upstream.next(t, "upstream") // tools/list
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[]}}`)
	r.upstream.next(t, "upstream") // the call
	r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":10.0}}`)
	r.client.send(t, `{"jsonrpc":"2.0","id":2.0,"method":"resources/read","params":{"uri":"file:///a"}}`)
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, "resources/read") {
		t.Fatalf("upstream got %s; want the read, the cancellation of call 10 kept in the proxy", got)
	}

	r.upstreamW.Close()
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":2.0,`) || !strings.Contains(got, "closed before answering resources/read") {
		t.Fatalf("client got %s; want only the read answered, under its id as sent", got)
	}
	r.wait(t)
	r.client.nothingMore(t, "the answered requests and the cancelled call get nothing more")
}

// TestTheProxysIDsStayInTheProxy: an answer from the upstream under one of
// the proxy's ids never reaches the client: a second answer, or one to a
// request never made, is dropped; one spelled with an escape, or sent
// inside a batch, answers the proxy's request it names.
func TestTheProxysIDsStayInTheProxy(t *testing.T) {
	r := newRig(t, 0)
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"n":1}}}`)
	r.upstream.next(t, "upstream") // tools/list
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent\u003a1","result":{"tools":[]}}`)
	r.upstream.next(t, "upstream") // the call, as mcp-idempotent:2
	r.upstream.send(t, `[{"jsonrpc":"2.0","id":"mcp-idempotent:2","result":{"content":[{"type":"text","text":"one"}]}}]`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":1,`) || !strings.Contains(got, "one") {
		t.Fatalf("the call got %s; want the answer that came in a batch", got)
	}
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:2","result":{"content":[{"type":"text","text":"again"}]}}`)
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:999","result":{}}`)

	r.client.send(t, `[{"jsonrpc":"2.0","id":5,"method":"ping"}]`)
	r.upstream.next(t, "upstream")
	r.client.send(t, `{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"charge_card","arguments":{"n":2}}}`)
	r.upstream.next(t, "upstream") // the call, as mcp-idempotent:3
	r.upstream.send(t, `[{"jsonrpc":"2.0","id":5,"result":{}},{"jsonrpc":"2.0","id":"mcp-idempotent:3","result":{"content":[{"type":"text","text":"two"}]}}]`)
	answers := []string{r.client.next(t, "client"), r.client.next(t, "client")}
	slices.Sort(answers) // the batch first: '[' < '{'
	if want := `[{"jsonrpc":"2.0","id":5,"result":{}}]`; answers[0] != want {
		t.Errorf("client got %s; want the batch with its own answer only, %s", answers[0], want)
	}
	if !strings.Contains(answers[1], `"id":6,`) || !strings.Contains(answers[1], "two") {
		t.Errorf("the second call got %s; want the answer taken from the batch", answers[1])
	}
	for _, a := range answers {
		if strings.Contains(a, "mcp-idempotent:") {
			t.Errorf("client got %s, which holds one of the proxy's ids", a)
		}
	}
}

// TestToolsChangedDuringTheProxysListing: a change the upstream announces
// while the proxy lists its tools makes the pages read so far stale, so
// the proxy lists again rather than go by them, and a read-only tool is
// still passed through, not recorded.
func TestToolsChangedDuringTheProxysListing(t *testing.T) {
	r := newRig(t, 0)
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"quote","arguments":{}}}`)
	if got := r.upstream.next(t, "upstream"); got != `{"jsonrpc":"2.0","id":"mcp-idempotent:1","method":"tools/list"}` {
		t.Fatalf("upstream got %s; want the proxy's tools/list", got)
	}
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[`+
		`{"name":"quote","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}],"nextCursor":"2"}}`)
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"cursor":"2"`) {
		t.Fatalf("upstream got %s; want the listing's second page asked for", got)
	}
	r.upstream.send(t, `{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)
	r.client.next(t, "client") // the notification, passed on
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:2","result":{"tools":[]}}`)
	if got := r.upstream.next(t, "upstream"); got != `{"jsonrpc":"2.0","id":"mcp-idempotent:3","method":"tools/list"}` {
		t.Fatalf("upstream got %s; want the tools listed again from the start", got)
	}
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:3","result":{"tools":[`+
		`{"name":"quote","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}]}}`)
	if got := r.upstream.next(t, "upstream"); got != `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"quote","arguments":{}}}` {
		t.Fatalf("upstream got %s; want the read-only call passed through as it came", got)
	}
}

// TestToolsChangedInABatch: a change announced inside a batch from the
// upstream is acted on as one sent alone: the proxy forgets what it knew
// of the tools and lists them again.
func TestToolsChangedInABatch(t *testing.T) {
	r := newRig(t, 0)
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	r.upstream.next(t, "upstream")
	r.upstream.send(t, `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"quote","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}]}}`)
	r.client.next(t, "client")
	r.upstream.send(t, `[{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}]`)
	r.client.next(t, "client")
	r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"quote","arguments":{}}}`)
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"method":"tools/list"`) {
		t.Fatalf("upstream got %s; want the tools listed again after the change", got)
	}
}

// TestUnansweredListingDoesNotHoldCalls: a server that never answers the
// proxy's tools/list does not hold the calls waiting on the listing: after
// listTimeout they go on as calls to a tool with side effects.
func TestUnansweredListingDoesNotHoldCalls(t *testing.T) {
	defer func(d time.Duration) { listTimeout = d }(listTimeout)
	listTimeout = 50 * time.Millisecond
	r := newRig(t, 0)
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card"}}`)
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"method":"tools/list"`) {
		t.Fatalf("upstream got %s; want the proxy's tools/list", got)
	}
	// Not answered: the proxy takes it back, and the call goes on.
	want := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"mcp-idempotent:1","reason":"no answer came in time"}}`
	if got := r.upstream.next(t, "upstream"); got != want {
		t.Fatalf("upstream got %s; want %s", got, want)
	}
	call := r.upstream.next(t, "upstream")
	if !strings.Contains(call, `"method":"tools/call"`) {
		t.Fatalf("upstream got %s; want the call", call)
	}
	r.upstream.answerCharged(t, call)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":1,`) || !strings.Contains(got, "charged") {
		t.Fatalf("client got %s; want the answer", got)
	}
	// As a tool with side effects, calling again replays.
	r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card"}}`)
	r.upstream.next(t, "upstream") // the listing, tried again
	if got := r.client.next(t, "client"); !strings.Contains(got, `"mcp-idempotent/replayed":true`) {
		t.Fatalf("calling again got %s; want the answer replayed", got)
	}
}

// TestUnreadableFrameIsNotMisread: a broken frame is read for an id only
// up to its first broken member. An "id" nested after a stray bracket is
// not taken for the message's, and a broken request of the upstream's
// that shares a client request's id does not make the proxy forget that
// request.
func TestUnreadableFrameIsNotMisread(t *testing.T) {
	r := newRig(t, 0)
	r.startCall(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card"}}`) // as mcp-idempotent:2
	r.client.send(t, `{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"file:///a"}}`)
	r.upstream.next(t, "upstream")

	const nested = `{"jsonrpc":"2.0","result":{"contents":],"id":"mcp-idempotent:2"},"id":3}`
	r.upstream.send(t, nested)
	if got := r.client.next(t, "client"); got != nested {
		t.Fatalf("client got %s; want the broken frame as it came, the tools/call still running", got)
	}
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:2","result":{"content":[{"type":"text","text":"charged"}]}}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":1,`) || !strings.Contains(got, "charged") {
		t.Fatalf("the tools/call got %s; want the upstream's answer", got)
	}

	r.client.send(t, `{"jsonrpc":"2.0","id":4,"method":"resources/read","params":{"uri":"file:///b"}}`)
	r.upstream.next(t, "upstream")
	const request = `{"jsonrpc":"2.0","id":4,"params":{"x":]},"method":"sampling/createMessage"}`
	r.upstream.send(t, request)
	if got := r.client.next(t, "client"); got != request {
		t.Fatalf("client got %s; want the broken frame as it came", got)
	}
	// Both reads are still remembered (the frames might have been
	// anything), so the upstream's exit answers both.
	r.upstreamW.Close()
	answers := r.client.byID(t, 2)
	if got := answers["4"]; !strings.Contains(got, "closed before answering resources/read") {
		t.Fatalf("request 4 got %q; want it answered when the upstream closed", got)
	}
}

// TestSessionEndDuringToolLookup: a call waiting for the proxy's own
// listing of its tool when the session ends (as on SIGTERM) is told that
// it did not run.
func TestSessionEndDuringToolLookup(t *testing.T) {
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom()})
	cr, cw := io.Pipe()
	pr, pw := io.Pipe()
	ur, uw := io.Pipe()
	qr, qw := io.Pipe()
	s := New(stdio.NewConn(cr, pw, 0), stdio.NewConn(ur, qw, 0), Options{
		Interceptor: in, Actor: "alice", Scope: "session:test", UpstreamID: "stdio:test", ShutdownGrace: time.Second,
	})
	client := newPeer(stdio.NewConn(pr, cw, 0))
	upstream := newPeer(stdio.NewConn(qr, uw, 0))
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		s.Run(ctx)
		pw.Close()
		qw.Close()
		close(stopped)
	}()
	t.Cleanup(func() {
		cw.Close()
		uw.Close()
		<-stopped
	})
	client.send(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"charge_card","arguments":{}}}`)
	upstream.next(t, "upstream") // the proxy's tools/list, never answered
	cancel()
	if got := client.next(t, "client"); !strings.Contains(got, `"id":7,"error"`) || !strings.Contains(got, "session ended before charge_card was executed; it did not run") {
		t.Fatalf("the client got %s; want an error saying the call did not run", got)
	}
}

// TestNoCallAfterTheUpstreamIsGone: once the upstream has exited for
// good, Run answers what waited on it and waits for the calls still under
// way (here one attached to another session's execution) before it
// returns; the client's pump reads on meanwhile. A tools/call that comes
// then is told it did not run, and starts nothing. Taken, it was counted
// in the calls Run waits for, during the wait: a WaitGroup's Add from zero
// racing its Wait, which the race detector reported under the torture
// suite's mutated input (the upstream in a crash loop).
func TestNoCallAfterTheUpstreamIsGone(t *testing.T) {
	store := memstore.New(memstore.Options{})
	in := intercept.New(intercept.Options{Store: store, Hasher: fingerprint.NewRandom()})
	const call = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":100}}}`
	other := newRigWith(t, 0, in)
	held := other.startCall(t, call) // under way, its answer held

	r := newRigWith(t, 0, in)
	r.client.send(t, call)         // the same call, in the same scope: it attaches
	r.upstream.next(t, "upstream") // the proxy's tools/list
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[]}}`)
	r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	r.upstream.next(t, "upstream") // the ping, never answered
	r.upstreamW.Close()            // the upstream exits; no restart is set
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":2,"error"`) {
		t.Fatalf("the ping got %s; want an error saying the upstream closed", got)
	}

	// Run waits for the attached call now; the client sends another.
	r.client.send(t, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":5}}}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":3,"error"`) || !strings.Contains(got, "session ended before charge_card was executed; it did not run") {
		t.Errorf("a call after the upstream went got %s; want an error saying it did not run", got)
	}
	if n := store.Len(); n != 1 {
		t.Errorf("the store holds %d records; want the held call's only", n)
	}

	other.upstream.answerCharged(t, held)
	other.client.next(t, "other client")
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":1,"result"`) || !strings.Contains(got, "charged") {
		t.Errorf("the attached call got %s; want the execution's result", got)
	}
	if err := r.wait(t); !errors.Is(err, ErrUpstreamClosed) {
		t.Fatalf("Run = %v; want ErrUpstreamClosed", err)
	}
}

// TestCallsAsTheUpstreamGoes: the client sends tools/calls while the
// upstream exits for good, and on as Run waits for the calls under way and
// returns. This is the interleaving TestNoCallAfterTheUpstreamIsGone pins
// down, left to the scheduler, as the torture suite met it: under -race,
// a call counted (inflight.Add from zero) as Run waited (inflight.Wait)
// was reported as a data race, and could panic "WaitGroup is reused
// before previous Wait has returned".
func TestCallsAsTheUpstreamGoes(t *testing.T) {
	for range 40 {
		r := newRig(t, 0)
		sent := make(chan struct{})
		go func() {
			defer close(sent)
			for i := range 400 {
				call := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"charge_card","arguments":{"n":%d}}}`, i, i)
				if r.client.conn.WriteFrame([]byte(call)) != nil {
					return // the client's side is closed
				}
			}
		}()
		r.upstream.next(t, "upstream") // the proxy's tools/list, for the first call
		r.upstreamW.Close()
		// The client reads every answer, until Run has returned.
		for open := true; open; {
			select {
			case <-r.client.frames:
			case <-r.client.closed:
				open = false
			}
		}
		r.clientW.Close()
		<-sent
		if err := r.wait(t); !errors.Is(err, ErrUpstreamClosed) {
			t.Fatalf("Run = %v; want ErrUpstreamClosed", err)
		}
	}
}

// TestUpstreamErrorPassesAsItCame: the upstream's JSON-RPC error to a
// recorded tools/call reaches the caller as the upstream wrote it: its
// members, their spelling and its escapes.
func TestUpstreamErrorPassesAsItCame(t *testing.T) {
	r := newRig(t, 0)
	r.startCall(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{}}}`)
	const errObj = `{ "code" : -32000.0 , "message" : "caf\u00e9 <&>" , "data" : {"b": 1, "a": 2}, "extra": true }`
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:2","error":`+errObj+`}`)
	if got, want := r.client.next(t, "client"), `{"jsonrpc":"2.0","id":1,"error":`+errObj+`}`; got != want {
		t.Fatalf("the client got\n%s\nwant\n%s", got, want)
	}
}

// TestInstanceSetsIDsApart: with an Instance, the proxy's own ids are
// "mcp-idempotent:INSTANCE:N", and a client's "mcp-idempotent:N" (another
// mcp-idempotent in front of this one) is a client's id like any other.
func TestInstanceSetsIDsApart(t *testing.T) {
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom()})
	r := newRigOptions(t, 0, Options{Interceptor: in, Instance: "k1"})
	r.client.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","method":"tools/call","params":{"name":"charge_card","arguments":{}}}`)
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"id":"mcp-idempotent:k1:1","method":"tools/list"`) {
		t.Fatalf("the proxy's own listing went as %s; want id mcp-idempotent:k1:1", got)
	}
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:k1:1","result":{"tools":[]}}`)
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"id":"mcp-idempotent:k1:2","method":"tools/call"`) {
		t.Fatalf("the call went as %s; want id mcp-idempotent:k1:2", got)
	}
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:k1:2","result":{"content":[]}}`)
	if got := r.client.next(t, "client"); got != `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"content":[]}}` {
		t.Fatalf("the client got %s; want the answer under its own id", got)
	}
	r.client.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:k1:7","method":"ping"}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"code":-32600`) || !strings.Contains(got, "starting with mcp-idempotent:k1: are reserved") {
		t.Fatalf("a request under the proxy's own id space got %s; want -32600", got)
	}
}

// TestReadOnlyWithARetryRule: a read-only tool whose policy has a retry
// rule is still unrecorded, but the proxy sends it, under an id of its
// own, so that a transient answer is sent again; the caller gets the last
// answer under its own id. Without a rule it passes as it came.
func TestReadOnlyWithARetryRule(t *testing.T) {
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom()})
	resolve := func(tool string, ann *mcp.Annotations) policy.Policy {
		p := policy.FromAnnotations(ann)
		switch tool {
		case "quote":
			p.Retry = &policy.RetryRule{MaxAttempts: 3, Base: time.Millisecond, Cap: time.Millisecond,
				Transient: []policy.ResultMatch{{Text: regexp.MustCompile(`busy`)}}}
		case "stamp":
			p.Scope = policy.ScopeKey
			p.Retry = &policy.RetryRule{MaxAttempts: 1}
		}
		return p
	}
	r := newRigOptions(t, 0, Options{Interceptor: in, Resolve: resolve})
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	r.upstream.next(t, "upstream")
	r.upstream.send(t, `{"jsonrpc":"2.0","id":1,"result":{"tools":[`+
		`{"name":"quote","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}},`+
		`{"name":"price","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}},`+
		`{"name":"stamp","inputSchema":{"type":"object"}}]}}`)
	r.client.next(t, "client")

	r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"quote","arguments":{}}}`)
	for i := 1; i <= 2; i++ {
		got := r.upstream.next(t, "upstream")
		want := fmt.Sprintf(`{"jsonrpc":"2.0","id":"mcp-idempotent:%d","method":"tools/call","params":{"name":"quote","arguments":{}}}`, i)
		if got != want {
			t.Fatalf("attempt %d reached the upstream as %s; want %s", i, got, want)
		}
		text := "busy"
		if i == 2 {
			text = "42"
		}
		r.upstream.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":"mcp-idempotent:%d","result":{"content":[{"type":"text","text":%q}]}}`, i, text))
	}
	if got := r.client.next(t, "client"); got != `{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"42"}]}}` {
		t.Fatalf("the client got %s; want the second attempt's answer under its id", got)
	}

	r.client.send(t, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"price","arguments":{}}}`)
	if got := r.upstream.next(t, "upstream"); got != `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"price","arguments":{}}}` {
		t.Fatalf("a read-only call without a rule reached the upstream as %s; want it as it came", got)
	}

	// A keyless call to a key-scoped tool with a rule: unrecorded, sent by
	// the proxy too (its account is spent).
	r.client.send(t, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"stamp","arguments":{}}}`)
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"id":"mcp-idempotent:3"`) || strings.Contains(got, "execution-id") {
		t.Fatalf("a keyless key-scoped call reached the upstream as %s; want it under the proxy's id, without an execution id", got)
	}
}

// TestUnrecordedCancelReachesTheUpstream: a caller that cancels a call the
// proxy sends unrecorded (a read-only tool with a retry rule) takes it back
// from the upstream, under the id the proxy sent it with, as a call passed
// through would; it gets no answer, and one the upstream sends anyway is
// dropped.
func TestUnrecordedCancelReachesTheUpstream(t *testing.T) {
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom()})
	resolve := func(tool string, ann *mcp.Annotations) policy.Policy {
		p := policy.FromAnnotations(ann)
		p.Retry = &policy.RetryRule{MaxAttempts: 3, Base: time.Millisecond, Cap: time.Millisecond}
		return p
	}
	var log syncBuffer
	r := newRigOptions(t, 0, Options{Interceptor: in, Resolve: resolve, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	r.upstream.next(t, "upstream")
	r.upstream.send(t, `{"jsonrpc":"2.0","id":1,"result":{"tools":[`+
		`{"name":"search","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}]}}`)
	r.client.next(t, "client")

	r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"search","arguments":{}}}`)
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"id":"mcp-idempotent:1"`) {
		t.Fatalf("the call reached the upstream as %s; want it under the proxy's id", got)
	}
	r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`)
	want := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"mcp-idempotent:1","reason":"the caller cancelled the request"}}`
	if got := r.upstream.next(t, "upstream"); got != want {
		t.Fatalf("after the client's cancellation the upstream got %s; want %s", got, want)
	}
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"content":[]}}`)
	r.client.send(t, `{"jsonrpc":"2.0","id":3,"method":"ping"}`)
	if got := r.upstream.next(t, "upstream"); got != `{"jsonrpc":"2.0","id":3,"method":"ping"}` {
		t.Fatalf("the upstream got %s; want the ping, and no second attempt of the cancelled call", got)
	}
	r.upstream.send(t, `{"jsonrpc":"2.0","id":3,"result":{}}`)
	if got := r.client.next(t, "client"); got != `{"jsonrpc":"2.0","id":3,"result":{}}` {
		t.Fatalf("the client got %s; want only the ping's answer, nothing for the call it cancelled", got)
	}
	// The upstream may answer a request it was told of the cancellation
	// of: that is no fault of its.
	if strings.Contains(log.String(), "level=WARN") {
		t.Errorf("the log warns:\n%s\nwant the late answer dropped quietly", log.String())
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a test at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestReadOnlyCallsReadNoKey: a key or a deadline in _meta that cannot be
// read refuses a call the proxy records or sends itself, but not a
// read-only tool's call passed upstream as it came, which uses neither,
// as it would run without the proxy.
func TestReadOnlyCallsReadNoKey(t *testing.T) {
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom()})
	resolve := func(tool string, ann *mcp.Annotations) policy.Policy {
		p := policy.FromAnnotations(ann)
		switch tool {
		case "quote":
			p.Retry = &policy.RetryRule{MaxAttempts: 2, Base: time.Millisecond, Cap: time.Millisecond}
		case "stamp":
			p.Scope = policy.ScopeKey
		}
		return p
	}
	r := newRigOptions(t, 0, Options{Interceptor: in, Resolve: resolve})
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	r.upstream.next(t, "upstream")
	r.upstream.send(t, `{"jsonrpc":"2.0","id":1,"result":{"tools":[`+
		`{"name":"echo","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}},`+
		`{"name":"quote","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}},`+
		`{"name":"stamp","inputSchema":{"type":"object"}},`+
		`{"name":"charge_card","inputSchema":{"type":"object"}}]}}`)
	r.client.next(t, "client")

	for i, meta := range []string{`{"idempotencyKey":12345}`, `{"mcp-idempotent/key":""}`, `{"mcp-idempotent/deadline_ms":"soon"}`} {
		call := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{},"_meta":%s}}`, 10+i, meta)
		r.client.send(t, call)
		if got := r.upstream.next(t, "upstream"); got != call {
			t.Errorf("a read-only call with _meta %s reached the upstream as %s; want it as it came", meta, got)
		}
	}
	for _, tc := range []struct{ tool, meta string }{
		{"charge_card", `{"idempotencyKey":12345}`},
		{"charge_card", `{"mcp-idempotent/deadline_ms":"soon"}`},
		{"stamp", `{"mcp-idempotent/key":""}`},
		{"quote", `{"mcp-idempotent/deadline_ms":0}`},
	} {
		r.client.send(t, `{"jsonrpc":"2.0","id":20,"method":"tools/call","params":{"name":"`+tc.tool+`","arguments":{},"_meta":`+tc.meta+`}}`)
		if got := r.client.next(t, "client"); !strings.Contains(got, `"id":20,`) || !strings.Contains(got, `"code":-32602`) {
			t.Errorf("%s with _meta %s got %s; want -32602", tc.tool, tc.meta, got)
		}
	}
	r.upstream.nothingMore(t, "refused calls are not sent")
}

// TestToldToStop: a session whose context ends (the proxy got SIGTERM or
// SIGINT) keeps no grace for calls under way: the call sent is answered
// as outcome unknown at once, not after the grace, and the session ends.
func TestToldToStop(t *testing.T) {
	ctx, stop := context.WithCancel(context.Background())
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom()})
	r := newRigRunning(t, ctx, 0, Options{Interceptor: in, ShutdownGrace: time.Minute})
	r.startCall(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{}}}`)
	stop()
	// Within next's few seconds, where the grace is a minute.
	if got := r.client.next(t, "client"); !strings.Contains(got, "Outcome unknown") {
		t.Fatalf("the call got %s; want outcome unknown", got)
	}
	r.wait(t)
}

// TestEmptyBatch: an empty array is an invalid request (JSON-RPC 2.0),
// answered with one error and not passed on.
func TestEmptyBatch(t *testing.T) {
	r := newRig(t, 0)
	r.client.send(t, `[]`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":null`) || !strings.Contains(got, `"code":-32600`) {
		t.Fatalf("an empty batch got %s; want one -32600 under a null id", got)
	}
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	if got := r.upstream.next(t, "upstream"); got != `{"jsonrpc":"2.0","id":1,"method":"ping"}` {
		t.Fatalf("the upstream got %s; want only the ping after it", got)
	}
}

// TestReservedIDsHoweverSpelled: a client request whose id the upstream
// reads as one of the proxy's own is refused, spelled with an escape or
// inside a batch, so no answer to it can be taken for the proxy's.
func TestReservedIDsHoweverSpelled(t *testing.T) {
	r := newRig(t, 0)
	r.client.send(t, `{"jsonrpc":"2.0","id":"mcp\u002didempotent:2","method":"ping"}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"code":-32600`) || !strings.Contains(got, "reserved") {
		t.Fatalf("an escaped reserved id got %s; want -32600", got)
	}
	r.client.send(t, `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":"mcp-idempotent:3","method":"ping"}]`)
	if got := r.client.next(t, "client"); strings.Count(got, `"code":-32600`) != 2 {
		t.Fatalf("a batch holding a reserved id got %s; want each request refused", got)
	}
	r.client.send(t, `{"jsonrpc":"2.0","id":4,"method":"ping"}`)
	if got := r.upstream.next(t, "upstream"); got != `{"jsonrpc":"2.0","id":4,"method":"ping"}` {
		t.Fatalf("the upstream got %s; want only the ping after the refused ones", got)
	}
}

// TestAnsweredBatchIsForgotten: a batch's requests, once answered, are
// not answered again with an error when the upstream later exits.
func TestAnsweredBatchIsForgotten(t *testing.T) {
	r := newRig(t, 0)
	r.client.send(t, `[{"jsonrpc":"2.0","id":7,"method":"ping"}]`)
	r.upstream.next(t, "upstream")
	r.upstream.send(t, `[{"jsonrpc":"2.0","id":7,"result":{}}]`)
	if got := r.client.next(t, "client"); got != `[{"jsonrpc":"2.0","id":7,"result":{}}]` {
		t.Fatalf("the client got %s; want the batch answer", got)
	}
	r.upstreamW.Close()
	r.wait(t)
	<-r.client.closed // every frame the proxy wrote has been read
	r.client.nothingMore(t, "the batch was already answered when the upstream exited")
}

// TestShutdownWaitsForADetachedExecution: the client cancels a dispatched
// call and leaves. The upstream is not told the input ended until the
// call's answer is in (within the shutdown grace), so an upstream that
// exits at the end of its input does not leave the execution unknown.
func TestShutdownWaitsForADetachedExecution(t *testing.T) {
	r := newRig(t, 0)
	r.client.send(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"charge_card","arguments":{}}}`)
	r.upstream.next(t, "upstream") // tools/list
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[]}}`)
	call := r.upstream.next(t, "upstream")
	r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`)
	r.clientW.Close()
	// Nothing tells of a shutdown that waits; one that does not closes
	// the upstream's input at once, well within this.
	select {
	case <-r.upstream.closed:
		t.Fatal("the upstream's input was closed with a dispatched call unanswered")
	case <-time.After(300 * time.Millisecond):
	}
	var m struct{ ID json.RawMessage }
	json.Unmarshal([]byte(call), &m)
	r.upstream.send(t, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"content":[]}}`)
	if err := r.wait(t); err != nil {
		t.Fatalf("Run = %v; want nil", err)
	}
}

// TestShutdownWaitsForAPassThroughRequest: a request passed through gets
// the grace too, and its answer reaches the client, which may still read
// after closing its side.
func TestShutdownWaitsForAPassThroughRequest(t *testing.T) {
	r := newRig(t, 0)
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///a"}}`)
	r.upstream.next(t, "upstream")
	r.clientW.Close()
	select {
	case <-r.upstream.closed:
		t.Fatal("the upstream's input was closed with a request unanswered")
	case <-time.After(300 * time.Millisecond):
	}
	r.upstream.send(t, `{"jsonrpc":"2.0","id":1,"result":{"contents":[]}}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":1,"result"`) {
		t.Fatalf("client got %s; want the answer", got)
	}
	r.wait(t)
}

// TestShutdownDoesNotWaitForAStandingRequest: a standing request, such
// as the 2026-07-28 subscriptions/listen that a client keeps open for the
// whole session, ends with the client's input: the upstream's input is
// closed at once, not after the grace.
func TestShutdownDoesNotWaitForAStandingRequest(t *testing.T) {
	r := newRigOptions(t, 0, Options{ShutdownGrace: time.Hour})
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{}}`)
	r.upstream.next(t, "upstream")
	r.clientW.Close()
	select {
	case <-r.upstream.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream's input stayed open: shutdown waited for the standing request")
	}
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":1,"error"`) {
		t.Errorf("the standing request got %s; want an error saying the session ended", got)
	}
	r.wait(t)
}

// TestShutdownAnswersEveryone: when the client has gone, the grace has
// passed and the upstream neither answers nor closes, every request still
// waiting is answered before the session ends (the client may still be
// reading): the tools/call with an unknown outcome, the pass-through
// request with an error.
func TestShutdownAnswersEveryone(t *testing.T) {
	r := newRig(t, 0)
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card"}}`)
	r.upstream.next(t, "upstream") // tools/list
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[]}}`)
	r.upstream.next(t, "upstream") // the call
	r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"file:///a"}}`)
	r.upstream.next(t, "upstream")
	r.clientW.Close()
	answers := r.client.byID(t, 2)
	if got := answers["1"]; !strings.Contains(got, "Outcome unknown:") || !strings.Contains(got, "session ended") {
		t.Errorf("the tools/call got %q; want outcome unknown, the session having ended", got)
	}
	if got := answers["2"]; !strings.Contains(got, `"error"`) || !strings.Contains(got, "session ended before the upstream answered resources/read") {
		t.Errorf("the pass-through request got %q; want an error saying the session ended", got)
	}
	r.wait(t)
}

// TestShutdownTellsAnAttachedCallerItIsInProgress: a caller attached to an
// execution that another session runs, when its own session ends, is told
// the execution is still in progress, not left without an answer as if it
// had cancelled.
func TestShutdownTellsAnAttachedCallerItIsInProgress(t *testing.T) {
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom()})
	a, b := newRigWith(t, 0, in), newRigWith(t, 0, in)
	const call = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card"}}`
	const list = `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[]}}`
	a.client.send(t, call)
	a.upstream.next(t, "upstream A") // tools/list
	a.upstream.send(t, list)
	running := a.upstream.next(t, "upstream A") // the call, held
	b.client.send(t, call)
	b.upstream.next(t, "upstream B") // tools/list
	b.upstream.send(t, list)
	b.clientW.Close() // B's client goes while the call runs in A
	if got := b.client.next(t, "client B"); !strings.Contains(got, `"id":1,`) || !strings.Contains(got, "Still in progress:") {
		t.Fatalf("B's caller got %s; want to be told the execution is still in progress", got)
	}
	a.upstream.answerCharged(t, running)
	if got := a.client.next(t, "client A"); !strings.Contains(got, "charged") {
		t.Fatalf("A's caller got %s; want the answer", got)
	}
}

// TestNoAnswerAfterGivingUp: once the session has given up on the upstream
// (the grace after the client's end of input passed) and answered every
// request still waiting, an answer the upstream sends at that moment is
// dropped: the client would otherwise get two answers to one request.
func TestNoAnswerAfterGivingUp(t *testing.T) {
	for _, late := range []string{
		`{"jsonrpc":"2.0","id":2,"result":{"contents":[]}}`,
		`[{"jsonrpc":"2.0","id":2,"result":{"contents":[]}}]`,
	} {
		client, upstream := &sink{}, &sink{}
		in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom()})
		s := New(client, upstream, Options{Interceptor: in})
		s.fromClient(t.Context(), []byte(`{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"file:///a"}}`))
		if upstream.take() == nil {
			t.Fatal("the request did not go upstream")
		}
		l := s.current()
		s.abandon(l, errSessionEnded, "the session ended before the upstream answered %s", false)
		if got := string(client.take()); !strings.Contains(got, `"id":2,"error"`) {
			t.Fatalf("the waiting request got %s; want an error", got)
		}
		s.fromUpstream(l, []byte(late))
		if got := client.take(); got != nil {
			t.Errorf("after the error, the late answer %s reached the client as %s", late, got)
		}
	}
}

// TestRequestsMCPDoesNotAllow: a message without "jsonrpc":"2.0", or a
// request whose id is not a string or an integer, is refused, not passed
// on (a server may end the session on it, or answer under an id the
// proxy cannot match); the session goes on.
func TestRequestsMCPDoesNotAllow(t *testing.T) {
	r := newRig(t, 0)
	for _, tt := range []struct{ frame, want string }{
		{`{"id":1,"method":"tools/list"}`, `{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"mcp-idempotent: \"jsonrpc\" must be \"2.0\""}}`},
		{`{"jsonrpc":"1.0","id":"a","method":"ping"}`, `"id":"a","error":{"code":-32600`},
		{`{"jsonrpc":"2.0","id":null,"method":"ping"}`, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"mcp-idempotent: request id null is not a string or an integer"}}`},
		{`{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"charge_card"}}`, `"id":null,"error":{"code":-32600`},
		{`[{"jsonrpc":"2.0","id":true,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]`, `[{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"mcp-idempotent: request id true is not a string or an integer"}},{"jsonrpc":"2.0","id":2,"error"`},
	} {
		r.client.send(t, tt.frame)
		if got := r.client.next(t, "client"); !strings.Contains(got, tt.want) {
			t.Errorf("%s was answered %s; want %s", tt.frame, got, tt.want)
		}
	}
	r.client.send(t, `{"jsonrpc":"2.0","id":3,"method":"ping"}`)
	if got := r.upstream.next(t, "upstream"); got != `{"jsonrpc":"2.0","id":3,"method":"ping"}` {
		t.Fatalf("the upstream got %s; want only the valid ping", got)
	}
}

// TestIDInUseIsRefused: a request under an id that a request still being
// answered holds is refused under a null id and not passed on; the first
// request's answer still comes, under its id.
func TestIDInUseIsRefused(t *testing.T) {
	r := newRig(t, 0)
	call := r.startCall(t, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"charge_card"}}`)
	for _, frame := range []string{
		`{"jsonrpc":"2.0","id":5,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":5.0,"method":"tools/call","params":{"name":"charge_card","arguments":{"n":2}}}`,
	} {
		r.client.send(t, frame)
		if got := r.client.next(t, "client"); !strings.Contains(got, `"id":null,"error"`) || !strings.Contains(got, "request id 5") {
			t.Fatalf("%s was answered %s; want a refusal under a null id naming id 5", frame, got)
		}
	}
	r.upstream.answerCharged(t, call)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":5,"result"`) {
		t.Fatalf("the call got %s; want its answer under id 5", got)
	}
	r.client.send(t, `{"jsonrpc":"2.0","id":5,"method":"ping"}`) // free again
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"method":"ping"`) {
		t.Fatalf("the upstream got %s; want the ping, id 5 being free", got)
	}
	// A batch holding an id in use is refused whole.
	r.client.send(t, `{"jsonrpc":"2.0","id":6,"method":"ping"}`)
	r.upstream.next(t, "upstream")
	r.client.send(t, `[{"jsonrpc":"2.0","id":7,"method":"ping"},{"jsonrpc":"2.0","id":6,"method":"ping"}]`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":7,"error"`) || !strings.Contains(got, `"id":null,"error"`) || !strings.Contains(got, "request id 6") {
		t.Fatalf("a batch reusing id 6 got %s; want it refused, 6's error under a null id", got)
	}
	// Cancelled, a request passed upstream frees its id too.
	r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}`)
	r.upstream.next(t, "upstream") // the cancellation, passed on
	r.client.send(t, `{"jsonrpc":"2.0","id":5,"method":"ping"}`)
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"method":"ping"`) {
		t.Fatalf("the upstream got %s; want the ping, id 5 freed by the cancellation", got)
	}
}

// replyLostStore makes its first reservation, then, as a database client
// whose context is cancelled while it waits for the server's reply does,
// returns the context's error instead of the record.
type replyLostStore struct {
	record.Store
	first    atomic.Bool
	reserved chan struct{}
}

func (s *replyLostStore) Reserve(ctx context.Context, r *record.Record, opts record.ReserveOptions) (*record.Record, bool, error) {
	rec, won, err := s.Store.Reserve(ctx, r, opts)
	if err == nil && s.first.CompareAndSwap(false, true) {
		close(s.reserved)
		select {
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return rec, won, err
}

// TestCancelDuringReserve: a caller that cancels while its reservation is
// being made does not leave a reservation that nothing sends: the call is
// seen through, and the same call sent again gets its answer.
func TestCancelDuringReserve(t *testing.T) {
	store := &replyLostStore{Store: memstore.New(memstore.Options{}), reserved: make(chan struct{})}
	in := intercept.New(intercept.Options{Store: store, Hasher: fingerprint.NewRandom(), StoreWaits: true})
	r := newRigWith(t, 0, in)
	r.client.send(t, `{"jsonrpc":"2.0","id":"l","method":"tools/list"}`)
	r.upstream.next(t, "upstream")
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"l","result":{"tools":[{"name":"charge_card","inputSchema":{"type":"object"}}]}}`)
	r.client.next(t, "client")
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":1}}}`)
	<-store.reserved
	r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`)
	r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":1}}}`)
	r.upstream.answerCharged(t, r.upstream.next(t, "upstream"))
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":2,"result"`) || !strings.Contains(got, "charged") {
		t.Fatalf("the call sent again got %s; want the answer", got)
	}
}

// TestProtocolMeta: the proxy's own requests carry the protocol members
// of the client's request, but not the task that request relates to.
func TestProtocolMeta(t *testing.T) {
	got := protocolMeta(json.RawMessage(`{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/related-task":{"taskId":"t1"},"progressToken":7,"io.modelcontextprotocol/clientInfo":{"name":"c"}}`))
	if len(got) != 2 || string(got["io.modelcontextprotocol/protocolVersion"]) != `"2026-07-28"` || got["io.modelcontextprotocol/clientInfo"] == nil {
		t.Fatalf("protocolMeta = %s; want the protocol version and client info alone", got)
	}
}
