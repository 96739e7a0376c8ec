package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
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
