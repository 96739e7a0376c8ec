package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
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
)

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

// TestAttachedCancelLogsOnce: a caller attached to an execution under way
// that cancels gets one info line in the log, as a caller that started
// one does, not one from the session and another from the interceptor.
func TestAttachedCancelLogsOnce(t *testing.T) {
	var log syncBuffer
	logger := slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	in := intercept.New(intercept.Options{Store: memstore.New(memstore.Options{}), Hasher: fingerprint.NewRandom(), Logger: logger})
	r := newRigOptions(t, 0, Options{Interceptor: in, Logger: logger})
	call := func(id int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"charge_card","arguments":{"card":"4242"}}}`, id)
	}
	r.client.send(t, call(1))
	r.upstream.next(t, "upstream") // tools/list
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[]}}`)
	r.upstream.next(t, "upstream") // the call, left unanswered
	r.client.send(t, call(2))
	waitLog(t, &log, "attached to an execution under way")
	r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`)
	waitLog(t, &log, "caller cancelled; detached")
	var infos []string
	for line := range strings.Lines(log.String()) {
		if strings.Contains(line, "level=INFO") && strings.Contains(line, "cancel") {
			infos = append(infos, line)
		}
	}
	if len(infos) != 1 {
		t.Fatalf("%d info lines for one cancel; want 1:\n%s", len(infos), strings.Join(infos, ""))
	}
}

// waitLog waits until log holds s.
func waitLog(t *testing.T, log *syncBuffer, s string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(log.String(), s); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the log never said %q:\n%s", s, log.String())
		}
	}
}

// TestCancelledCallsProgressStaysInTheProxy: a caller that cancels a call
// the proxy records is detached, and the execution runs on upstream. Its
// progress names a request the client has ended, so it is not passed on;
// once a new request of the client's carries the token again, progress on
// it is that request's, and passes.
func TestCancelledCallsProgressStaysInTheProxy(t *testing.T) {
	r, call := cancelledWithToken(t)
	r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}`)
	r.upstream.next(t, "upstream") // the cancel stayed in the proxy: this is the notification
	r.upstream.send(t, progressOn(upstreamToken(t, call), "1"))
	r.upstream.send(t, `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"after"}}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, "notifications/message") {
		t.Fatalf("the client got %s; want the progress of its cancelled call dropped", got)
	}
	r.client.send(t, `{"jsonrpc":"2.0","id":9,"method":"ping","params":{"_meta":{"progressToken":"p7"}}}`)
	r.upstream.next(t, "upstream") // the ping
	r.upstream.send(t, progressOn(`"p7"`, "1"))
	if got := r.client.next(t, "client"); !strings.Contains(got, `"progressToken":"p7"`) {
		t.Fatalf("the client got %s; want the progress of its new request on the token", got)
	}
}

// cancelledWithToken returns a rig whose client sent a recorded call
// with progress token p7, sent upstream, and then cancelled it; and the
// call as the upstream got it.
func cancelledWithToken(t *testing.T) (*rig, string) {
	t.Helper()
	r := newRig(t, 0)
	r.client.send(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"charge_card","arguments":{},"_meta":{"progressToken":"p7"}}}`)
	r.upstream.next(t, "upstream") // tools/list
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[]}}`)
	call := r.upstream.next(t, "upstream")
	r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`)
	return r, call
}

// TestCancelledCallsTokenFreedInABatch: a request in a batch that carries
// the token of a cancelled call makes progress on it that request's, as
// a request alone does.
func TestCancelledCallsTokenFreedInABatch(t *testing.T) {
	r, _ := cancelledWithToken(t)
	r.client.send(t, `[{"jsonrpc":"2.0","id":9,"method":"ping","params":{"_meta":{"progressToken":"p7"}}}]`)
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"id":9`) {
		t.Fatalf("the upstream got %s; want the batch", got)
	}
	r.upstream.send(t, `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p7","progress":1}}`)
	r.upstream.send(t, `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"after"}}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"progressToken":"p7"`) {
		t.Fatalf("the client got %s; want the progress of its new request on the token", got)
	}
}

// secondHeld is a store whose second reservation waits until release is
// closed, having closed arrived.
type secondHeld struct {
	record.Store
	n                atomic.Int32
	arrived, release chan struct{}
}

func (s *secondHeld) Reserve(ctx context.Context, r *record.Record, opts record.ReserveOptions) (*record.Record, bool, error) {
	if s.n.Add(1) == 2 {
		close(s.arrived)
		<-s.release
	}
	return s.Store.Reserve(ctx, r, opts)
}

// TestNoProgressToACallerThatCancelled: a caller that cancels while its
// reservation is made is attached to the execution under way after the
// cancel. It is told no progress then: the client has ended the request,
// and its token is the client's again. A new call on that token gets the
// upstream's progress as sent, not raised past a count the cancelled
// call left behind.
func TestNoProgressToACallerThatCancelled(t *testing.T) {
	var log syncBuffer
	logger := slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	store := &secondHeld{Store: memstore.New(memstore.Options{}), arrived: make(chan struct{}), release: make(chan struct{})}
	in := intercept.New(intercept.Options{Store: store, Hasher: fingerprint.NewRandom(), StoreWaits: true, Logger: logger})
	r := newRigOptions(t, 0, Options{Interceptor: in, Logger: logger})
	r.client.send(t, `{"jsonrpc":"2.0","id":"l","method":"tools/list"}`)
	r.upstream.next(t, "upstream")
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"l","result":{"tools":[{"name":"charge_card","inputSchema":{"type":"object"}}]}}`)
	r.client.next(t, "client")
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":1}}}`)
	first := r.upstream.next(t, "upstream")
	r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":1},"_meta":{"progressToken":"p2"}}}`)
	<-store.arrived
	r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`)
	passedUpstream(t, r, "the cancellation")
	close(store.release)
	waitLog(t, &log, "caller cancelled; detached")

	r.client.send(t, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":3},"_meta":{"progressToken":"p2"}}}`)
	third := r.upstream.next(t, "upstream")
	r.upstream.send(t, progressOn(upstreamToken(t, third), "0"))
	if got := r.client.next(t, "client"); got != progressOn(`"p2"`, "0") {
		t.Fatalf("the client got %s; want the new call's progress 0 on p2, and nothing for the call it cancelled", got)
	}
	r.upstream.answerCharged(t, first)
	r.upstream.answerCharged(t, third)
	if got := r.client.byID(t, 2); len(got) != 2 || got["1"] == "" || got["3"] == "" {
		t.Fatalf("the client got %v; want the answers to calls 1 and 3", got)
	}
}
