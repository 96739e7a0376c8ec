package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/transport/stdio"
)

// BenchmarkSession measures one tools/call round trip through a Session
// in process, over pipes, against an upstream that answers at once: the
// proxy's own cost, without process hops. The sub-benchmarks run side by
// side: "relay" copies frames without looking at them.
func BenchmarkSession(b *testing.B) {
	for _, mode := range []string{"relay", "new-execution", "replay"} {
		b.Run(mode, func(b *testing.B) {
			cr, cw := io.Pipe()
			pr, pw := io.Pipe()
			ur, uw := io.Pipe()
			qr, qw := io.Pipe()
			clientSide := stdio.NewConn(cr, pw, 0)
			upstreamSide := stdio.NewConn(ur, qw, 0)
			go answer(stdio.NewConn(qr, uw, 0))
			done := make(chan struct{})
			if mode == "relay" {
				go func() { copyFrames(clientSide, upstreamSide); close(done) }()
				go copyFrames(upstreamSide, clientSide)
			} else {
				in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom()})
				s := New(clientSide, upstreamSide, Options{Interceptor: in, Actor: "a", Scope: "s", UpstreamID: "u"})
				go func() { s.Run(context.Background()); close(done) }()
			}
			client := stdio.NewConn(pr, cw, 0)
			call := func(i int) {
				amount := i
				if mode == "replay" {
					amount = 0
				}
				req := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"charge_card","arguments":{"card":"4242","amount":%d}}}`, i, amount)
				if err := client.WriteFrame([]byte(req)); err != nil {
					b.Fatal(err)
				}
				if _, err := client.ReadFrame(); err != nil {
					b.Fatal(err)
				}
			}
			call(-1) // the proxy lists the tools once
			b.ResetTimer()
			for i := range b.N {
				call(i)
			}
			b.StopTimer()
			cw.Close()
			uw.Close()
			<-done
		})
	}
}

// answer is an upstream that answers every request at once.
func answer(c *stdio.Conn) {
	for {
		f, err := c.ReadFrame()
		if err != nil {
			return
		}
		m, err := jsonrpc.Decode(f)
		if err != nil || !m.IsRequest() {
			continue
		}
		result := json.RawMessage(`{"content":[{"type":"text","text":"charged"}]}`)
		if m.Method == "tools/list" {
			result = json.RawMessage(`{"tools":[{"name":"charge_card","inputSchema":{"type":"object"}}]}`)
		}
		c.WriteFrame(jsonrpc.NewResponse(m.ID, result))
	}
}

func copyFrames(from, to *stdio.Conn) {
	for {
		f, err := from.ReadFrame()
		if err != nil {
			to.Close()
			return
		}
		to.WriteFrame(f)
	}
}

// BenchmarkPath measures the proxy's own work for one tools/call round
// trip, with no pipes and no goroutine hand-offs: the client's frame is
// handed to the session, the request it sends upstream is answered by
// handing the answer back, and the client's answer is taken. It is the
// CPU a call costs the proxy process, to profile with -cpuprofile.
func BenchmarkPath(b *testing.B) {
	for _, mode := range []string{"new-execution", "replay", "read-only"} {
		b.Run(mode, func(b *testing.B) {
			call := pathCall(b, mode)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				call(i)
				i++
			}
		})
	}
}

// BenchmarkPathTraced is BenchmarkPath with OpenTelemetry tracing on:
// every span recorded and sampled, none exported (the batching exporter
// works on another goroutine, off the call's path).
func BenchmarkPathTraced(b *testing.B) {
	tracer := sdktrace.NewTracerProvider().Tracer("bench")
	for _, mode := range []string{"new-execution", "replay", "read-only"} {
		b.Run(mode, func(b *testing.B) {
			call := pathCallTraced(b, mode, tracer)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				call(i)
				i++
			}
		})
	}
}

// BenchmarkPathCold is BenchmarkPath with the processor's caches evicted
// before each call, as they are in a running chain: between two calls
// through the proxy the client and the server run on the same processors,
// and between the request and its answer the server does. Each call
// then pays for every line of code and data it touches, so this measures
// the proxy's footprint, which BenchmarkPath, its caches warm, does not
// see. It reports the median call (p50-ns); ns/op includes the eviction.
func BenchmarkPathCold(b *testing.B) {
	evict := make([]byte, 4<<20) // twice a core's L2 here
	for _, mode := range []string{"new-execution", "replay", "read-only"} {
		b.Run(mode, func(b *testing.B) {
			call := pathCall(b, mode)
			lat := make([]time.Duration, 0, b.N)
			i := 0
			for b.Loop() {
				for j := 0; j < len(evict); j += 64 {
					evict[j]++
				}
				start := time.Now()
				call(i)
				lat = append(lat, time.Since(start))
				i++
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
		})
	}
}

// pathCall sets up a session for BenchmarkPath over two sinks, the tool
// listed (read-only in mode "read-only"), and returns a function making
// call i: distinct arguments for each i, or the same every time in mode
// "replay".
func pathCall(b *testing.B, mode string) func(i int) {
	return pathCallTraced(b, mode, nil)
}

// pathCallTraced is pathCall with tracer, if not nil, tracing the calls.
func pathCallTraced(b *testing.B, mode string, tracer trace.Tracer) func(i int) {
	client, upstream := &sink{}, &sink{}
	annotations := `{}`
	if mode == "read-only" {
		annotations = `{"readOnlyHint":true}`
	}
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom(), Tracer: tracer})
	s := New(client, upstream, Options{Interceptor: in, Actor: "a", Scope: "s", UpstreamID: "u", Tracer: tracer})
	ctx := context.Background()
	tools := []byte(`{"jsonrpc":"2.0","id":"l","method":"tools/list","params":{}}`)
	s.fromClient(ctx, tools)
	s.fromUpstream(s.up, []byte(`{"jsonrpc":"2.0","id":"l","result":{"tools":[{"name":"charge_card","inputSchema":{"type":"object"},"annotations":`+annotations+`}]}}`))
	client.take()
	upstream.take()
	result := []byte(`{"content":[{"type":"text","text":"charged 4242-0000-0000-000001 #1"}],"isError":false}`)
	var req, answer []byte
	call := func(i int) {
		amount := i
		if mode == "replay" {
			amount = 0
		}
		// The frames are built without fmt, and the id of the one sent
		// upstream cut out of it, not read by a parser: the benchmark's
		// own work is counted with the proxy's (instructions.sh), and
		// should be small beside it.
		req = appendRequest(req[:0], i, amount)
		// Frames are clones, as stdio.Conn.ReadFrame returns them.
		s.fromClient(ctx, bytes.Clone(req))
		if sent := upstream.take(); sent != nil {
			id := sentID(sent)
			if id == nil {
				b.Fatalf("call %d: no id in the request sent upstream: %s", i, sent)
			}
			answer = append(append(append(answer[:0], `{"jsonrpc":"2.0","id":`...), id...), `,"result":`...)
			answer = append(append(answer, result...), '}')
			s.fromUpstream(s.up, bytes.Clone(answer))
		}
		if client.take() == nil {
			b.Fatalf("call %d: no answer", i)
		}
	}
	call(-1)
	return call
}

// sentID returns the id of a request the proxy wrote upstream, which
// always begins with the version and then the id (WriteRequest); nil if
// frame does not.
func sentID(frame []byte) json.RawMessage {
	const head = `{"jsonrpc":"2.0","id":`
	rest, ok := bytes.CutPrefix(frame, []byte(head))
	if !ok {
		return nil
	}
	id, _, ok := bytes.Cut(rest, []byte(`,"method":`))
	if !ok {
		return nil
	}
	return id
}

// appendRequest appends the tools/call pathCall sends as call i, with
// amount in its arguments: what fmt.Appendf would write with
// `{"jsonrpc":"2.0","id":%d,...,"card":"4242-0000-0000-%06d","amount":%d}}}`.
func appendRequest(b []byte, i, amount int) []byte {
	b = strconv.AppendInt(append(b, `{"jsonrpc":"2.0","id":`...), int64(i), 10)
	b = append(b, `,"method":"tools/call","params":{"name":"charge_card","arguments":{"card":"4242-0000-0000-`...)
	if amount < 0 {
		b = fmt.Appendf(b, "%06d", amount)
	} else {
		var room [20]byte
		digits := strconv.AppendInt(room[:0], int64(amount), 10)
		for range 6 - len(digits) {
			b = append(b, '0')
		}
		b = append(b, digits...)
	}
	b = strconv.AppendInt(append(b, `","amount":`...), int64(amount), 10)
	return append(b, "}}}"...)
}

// sink is a Conn that keeps the last frame written to it.
type sink struct {
	mu    sync.Mutex
	frame []byte
}

func (k *sink) ReadFrame() ([]byte, error) { return nil, io.EOF }
func (k *sink) Close() error               { return nil }
func (k *sink) WriteFrame(f []byte) error {
	k.mu.Lock()
	k.frame = append(k.frame[:0], f...)
	k.mu.Unlock()
	return nil
}

// WriteResponse and WriteRequest make sink a frameBuilder, as the stdio
// transport is.
func (k *sink) WriteResponse(id, result json.RawMessage) error {
	k.mu.Lock()
	k.frame = jsonrpc.AppendResponse(k.frame[:0], id, result)
	k.mu.Unlock()
	return nil
}

func (k *sink) WriteRequest(id string, method string, params json.RawMessage) error {
	k.mu.Lock()
	k.frame = jsonrpc.AppendRequestTail(append(append(k.frame[:0], `{"jsonrpc":"2.0","id":`...), id...), method, params)
	k.mu.Unlock()
	return nil
}

// take returns the last frame written and forgets it; nil if none. The
// frame is good until the next write.
func (k *sink) take() []byte {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.frame) == 0 {
		return nil
	}
	f := k.frame
	k.frame = k.frame[:0]
	return f
}

// TestAppendRequest checks that appendRequest writes what fmt.Appendf did.
func TestAppendRequest(t *testing.T) {
	for _, c := range [][2]int{{-1, -1}, {0, 0}, {7, 7}, {123456, 123456}, {1234567, 1234567}, {9, 0}} {
		want := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"charge_card","arguments":{"card":"4242-0000-0000-%06d","amount":%d}}}`, c[0], c[1], c[1])
		if got := string(appendRequest(nil, c[0], c[1])); got != want {
			t.Errorf("appendRequest(%d, %d) = %s; want %s", c[0], c[1], got, want)
		}
	}
}
