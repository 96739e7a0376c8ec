package proxy

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

// countedWriter counts the writes the proxy makes to one side, and fails
// them from the moment fail is set, as a pipe whose reader has gone does,
// telling failed of each.
type countedWriter struct {
	io.WriteCloser
	writes atomic.Int32
	fail   atomic.Bool
	failed chan struct{}
}

func newCountedWriter() *countedWriter {
	return &countedWriter{failed: make(chan struct{}, 16)}
}

func (w *countedWriter) Write(p []byte) (int, error) {
	if w.fail.Load() {
		w.failed <- struct{}{}
		return 0, errors.New("broken pipe")
	}
	w.writes.Add(1)
	return w.WriteCloser.Write(p)
}

// wrap makes w write to pipe.
func (w *countedWriter) wrap(pipe io.WriteCloser) io.WriteCloser {
	w.WriteCloser = pipe
	return w
}

// holdRig is a rig whose proxy's writes to the client and to the upstream
// are counted.
func holdRig(t *testing.T, store record.Store) (r *rig, toClient, toUpstream *countedWriter) {
	toClient, toUpstream = newCountedWriter(), newCountedWriter()
	in := intercept.New(intercept.Options{Store: store, Hasher: fingerprint.NewRandom()})
	r = newRigWriting(t, context.Background(), 0, Options{Interceptor: in}, func(c Conn) Conn { return c }, toClient.wrap, toUpstream.wrap)
	return r, toClient, toUpstream
}

// rawWrite writes frames to w in one write, newline-ended, as a peer with
// many messages ready does.
func rawWrite(t *testing.T, w io.Closer, frames ...string) {
	t.Helper()
	if _, err := w.(io.Writer).Write([]byte(strings.Join(frames, "\n") + "\n")); err != nil {
		t.Fatal(err)
	}
}

// TestBurstGoesInOneWrite: frames that arrive together, read at once,
// go on together, in one write each way, in order.
func TestBurstGoesInOneWrite(t *testing.T) {
	r, toClient, toUpstream := holdRig(t, memstore.New(memstore.Options{}))
	rawWrite(t, r.clientW,
		`{"jsonrpc":"2.0","id":1,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":2,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":3,"method":"ping"}`)
	for i := range 3 {
		if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"id":`+string(rune('1'+i))+`,"method":"ping"`) {
			t.Fatalf("the upstream's frame %d is %s; want ping %d", i+1, got, i+1)
		}
	}
	if n := toUpstream.writes.Load(); n != 1 {
		t.Errorf("three requests read at once went upstream in %d writes; want 1", n)
	}
	rawWrite(t, r.upstreamW,
		`{"jsonrpc":"2.0","id":1,"result":{}}`,
		`{"jsonrpc":"2.0","id":2,"result":{}}`,
		`{"jsonrpc":"2.0","id":3,"result":{}}`)
	for i := range 3 {
		if got := r.client.next(t, "client"); !strings.Contains(got, `"id":`+string(rune('1'+i))+`,"result"`) {
			t.Fatalf("the client's frame %d is %s; want answer %d", i+1, got, i+1)
		}
	}
	if n := toClient.writes.Load(); n != 1 {
		t.Errorf("three answers read at once went to the client in %d writes; want 1", n)
	}
}

// listCharge lists charge_card, a tool with side effects, for the client:
// its calls are then handled as they are read.
func listCharge(t *testing.T, r *rig) {
	t.Helper()
	r.client.send(t, `{"jsonrpc":"2.0","id":"l","method":"tools/list"}`)
	r.upstream.next(t, "upstream")
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"l","result":{"tools":[{"name":"charge_card","inputSchema":{"type":"object"}}]}}`)
	r.client.next(t, "client")
}

// twoCalls sends two tools/call of charge_card in one write, and returns
// them as the upstream got them.
func twoCalls(t *testing.T, r *rig) (first, second string) {
	t.Helper()
	rawWrite(t, r.clientW,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"n":1}}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"n":2}}}`)
	return r.upstream.next(t, "upstream"), r.upstream.next(t, "upstream")
}

// answersOf is the upstream's answers to calls, in one frame each.
func answersOf(calls ...string) []string {
	var frames []string
	for _, c := range calls {
		id := c[strings.Index(c, `"id":`)+5:]
		id = id[:strings.IndexByte(id, ',')]
		frames = append(frames, `{"jsonrpc":"2.0","id":`+id+`,"result":{"content":[{"type":"text","text":"charged"}]}}`)
	}
	return frames
}

// states returns the states of the store's executions, most recent last.
func states(t *testing.T, store record.Lister) []record.State {
	t.Helper()
	recs, err := store.List(context.Background(), record.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var got []record.State
	for _, rec := range recs {
		got = append(got, rec.State)
	}
	return got
}

// TestHeldAnswerIsDeliveredOnceWritten: answers held through a burst are
// recorded delivered once their write succeeds, and not at all if it
// fails: a retry of an answer that never went out must find it
// undelivered (DESIGN: "completed, result not delivered").
func TestHeldAnswerIsDeliveredOnceWritten(t *testing.T) {
	for _, fail := range []bool{false, true} {
		store := memstore.New(memstore.Options{})
		r, toClient, _ := holdRig(t, store)
		listCharge(t, r)
		first, second := twoCalls(t, r)
		toClient.fail.Store(fail)
		rawWrite(t, r.upstreamW, answersOf(first, second)...)
		if !fail {
			r.client.byID(t, 2)
			// A frame after the burst is handled once the burst's
			// writers have been told.
			r.upstream.send(t, `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}`)
			r.client.next(t, "client")
			if got := states(t, store); len(got) != 2 || got[0] != record.Delivered || got[1] != record.Delivered {
				t.Fatalf("written, the answers' executions are %v; want both delivered", got)
			}
			continue
		}
		// The calls were handled as they were read, so their answers
		// come in one burst, one write. A frame after it is handled once
		// the burst's writers have been told: its write failing too
		// means they have.
		<-toClient.failed
		r.upstream.send(t, `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}`)
		<-toClient.failed
		if n := len(toClient.failed); n != 0 {
			t.Errorf("the two answers were tried in %d writes; want 1", n+1)
		}
		if got := states(t, store); len(got) != 2 || got[0] != record.Completed || got[1] != record.Completed {
			t.Fatalf("with the write failed, the answers' executions are %v; want both completed, not delivered", got)
		}
	}
}

// TestHeldRequestNotWrittenIsNotSent: requests held through a burst whose
// write then fails were never received, and their executions say so: the
// callers are answered at once that nothing ran.
func TestHeldRequestNotWrittenIsNotSent(t *testing.T) {
	store := memstore.New(memstore.Options{})
	r, _, toUpstream := holdRig(t, store)
	listCharge(t, r)
	toUpstream.fail.Store(true)
	rawWrite(t, r.clientW,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"n":1}}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"n":2}}}`)
	for id, got := range r.client.byID(t, 2) {
		if !strings.Contains(got, "nothing ran") {
			t.Errorf("call %s, its request not written, was answered %s; want that nothing ran", id, got)
		}
	}
	if got := states(t, store); len(got) != 2 || got[0] != record.Failed || got[1] != record.Failed {
		t.Fatalf("the executions are %v; want both failed (never sent)", got)
	}
	if n := len(toUpstream.failed); n != 1 {
		t.Errorf("the two requests were tried in %d writes; want 1", n)
	}
}

// TestBlankLineDoesNotStrandAFrame: a peer that ends its messages with a
// blank line (print(json + "\n") in Python) has its message passed on at
// once, not held until it writes again.
func TestBlankLineDoesNotStrandAFrame(t *testing.T) {
	r, _, _ := holdRig(t, memstore.New(memstore.Options{}))
	rawWrite(t, r.clientW, `{"jsonrpc":"2.0","id":1,"method":"ping"}`, "")
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"method":"ping"`) {
		t.Fatalf("the upstream got %s; want the ping", got)
	}
	rawWrite(t, r.upstreamW, `{"jsonrpc":"2.0","id":1,"result":{}}`, "")
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":1,"result"`) {
		t.Fatalf("the client got %s; want the answer", got)
	}
}

// secondReserveStuck is a memory store whose second reservation waits
// until release is closed, telling entered when it starts waiting.
type secondReserveStuck struct {
	record.Store
	n       *atomic.Int32
	entered chan struct{}
	release chan struct{}
}

func (s secondReserveStuck) Reserve(ctx context.Context, r *record.Record, opts record.ReserveOptions) (*record.Record, bool, error) {
	if s.n.Add(1) == 2 {
		close(s.entered)
		<-s.release
	}
	return s.Store.Reserve(ctx, r, opts)
}

// TestHeldRequestIsNotUnknownWhenTheUpstreamGoes: a tools/call whose
// request is still held in the client's burst when the upstream exits
// never left: its execution is not recorded unknown (sent, outcome not
// observed), nor its caller told it may have run.
func TestHeldRequestIsNotUnknownWhenTheUpstreamGoes(t *testing.T) {
	mem := memstore.New(memstore.Options{})
	store := secondReserveStuck{mem, new(atomic.Int32), make(chan struct{}), make(chan struct{})}
	in := intercept.New(intercept.Options{Store: store, Hasher: fingerprint.NewRandom()})
	toUpstream := newCountedWriter()
	r := newRigWriting(t, context.Background(), 0, Options{Interceptor: in}, func(c Conn) Conn { return c }, nil, toUpstream.wrap)
	var once sync.Once
	release := func() { once.Do(func() { close(store.release) }) }
	t.Cleanup(release)
	listCharge(t, r)
	before := toUpstream.writes.Load()
	rawWrite(t, r.clientW,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"n":1}}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"n":2}}}`)
	<-store.entered // call 1 dispatched and held; call 2 waits on the store
	if n := toUpstream.writes.Load(); n != before {
		t.Fatalf("call 1's request went upstream (%d writes); the test wants it held", n-before)
	}
	r.upstreamW.Close() // the upstream exits
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":1,`) || !strings.Contains(got, "nothing ran") {
		t.Errorf("call 1, never sent, was answered %s; want that nothing ran", got)
	}
	recs, _ := mem.List(context.Background(), record.Filter{})
	for _, rec := range recs {
		if rec.State == record.Unknown {
			t.Errorf("execution %s is unknown, though its request never left the proxy (%d writes upstream since)", rec.ID, toUpstream.writes.Load()-before)
		}
	}
	release()
}

// TestForwardedRequestNotWrittenIsAnswered: a request passed upstream
// whose write fails, at once or when the burst holding it is flushed, is
// answered at once that it was not sent, and its id is free again; before,
// it waited for an answer that could not come.
func TestForwardedRequestNotWrittenIsAnswered(t *testing.T) {
	r, _, toUpstream := holdRig(t, memstore.New(memstore.Options{}))
	toUpstream.fail.Store(true)
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":1,"error":{"code":-32603,`) || !strings.Contains(got, "ping was not sent") {
		t.Fatalf("the ping, not written, was answered %s; want an error saying it was not sent", got)
	}
	// A burst: the requests are held, and the write that fails is Flush's.
	rawWrite(t, r.clientW,
		`{"jsonrpc":"2.0","id":1,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":2,"method":"resources/list"}`,
		`[{"jsonrpc":"2.0","id":3,"method":"ping"},{"jsonrpc":"2.0","id":4,"method":"ping"}]`)
	got := r.client.byID(t, 2)
	for _, id := range []string{"1", "2"} {
		if !strings.Contains(got[id], "was not sent") {
			t.Errorf("request %s, held and not written, was answered %s; want that it was not sent", id, got[id])
		}
	}
	if batch := r.client.next(t, "client"); !strings.HasPrefix(batch, "[") || strings.Count(batch, "ping was not sent") != 2 {
		t.Errorf("the batch, not written, was answered %s; want one array saying each request was not sent", batch)
	}
}
