package intercept

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

// upstream is a scripted Upstream that counts what reaches it.
type upstream struct {
	calls   atomic.Int32
	respond func(ctx context.Context, n int, params json.RawMessage) (json.RawMessage, error)
}

func (u *upstream) Send(_ context.Context, method string, params json.RawMessage, done Answered) {
	n := int(u.calls.Add(1))
	go func() { done.Answered(u.respond(context.Background(), n, params)) }()
}

// charged answers the nth call with a result naming n.
func charged(_ context.Context, n int, _ json.RawMessage) (json.RawMessage, error) {
	return json.RawMessage(fmt.Sprintf(`{"content":[{"type":"text","text":"charge #%d"}]}`, n)), nil
}

// answers collects what one caller was told.
type answers struct {
	got chan Answer
}

func newAnswers() *answers { return &answers{got: make(chan Answer, 4)} }

func (a *answers) Reply(ans Answer) error {
	a.got <- ans
	return nil
}

// only waits for the caller's answer and checks that no second one came.
func (a *answers) only(t *testing.T) Answer {
	t.Helper()
	var ans Answer
	select {
	case ans = <-a.got:
	case <-time.After(10 * time.Second):
		t.Fatal("the caller got no answer")
	}
	select {
	case extra := <-a.got:
		t.Fatalf("the caller got a second answer: %+v", extra)
	default:
	}
	return ans
}

func (a *answers) count() int { return len(a.got) }

type harness struct {
	in       *Interceptor
	store    *memstore.Store
	up       *upstream
	pol      policy.Policy
	defaults map[string]json.RawMessage // the tool's schema defaults
	twins    *mcp.CaseTwins             // the tool's schema case twins
}

func newHarness(respond func(context.Context, int, json.RawMessage) (json.RawMessage, error)) *harness {
	store := memstore.New(memstore.Options{})
	return &harness{
		in:    New(Options{Store: store, Hasher: fingerprint.NewRandom()}),
		store: store,
		up:    &upstream{respond: respond},
		pol:   policy.FromAnnotations(nil),
	}
}

// newHeldHarness returns a harness whose upstream holds every call until
// release is closed, then answers it like charged.
func newHeldHarness() (h *harness, release chan struct{}) {
	release = make(chan struct{})
	return newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
		<-release
		return charged(ctx, n, p)
	}), release
}

// call makes one tools/call and returns what its caller was told.
func (h *harness) call(ctx context.Context, t *testing.T, params string) *answers {
	t.Helper()
	req, a := h.request(t, params)
	h.in.Handle(ctx, req)
	return a
}

// request is the Request of a tools/call with params, and what its caller
// will be told.
func (h *harness) request(t *testing.T, params string) (*Request, *answers) {
	t.Helper()
	tc, perr := mcp.ParseToolCall(json.RawMessage(params))
	if perr != nil {
		t.Fatalf("mcp.ParseToolCall(%s): %v", params, perr)
	}
	a := newAnswers()
	return &Request{
		Call: tc, Policy: &h.pol, Origin: &Origin{Actor: "alice", Scope: "session:1", UpstreamID: "stdio:bank"},
		Upstream: h.up, Reply: a, Correlation: "test",
	}, a
}

// callConcurrently makes n identical calls at once to a harness whose
// upstream holds them until release is closed, which it closes once every
// call has reached the proxy, and waits for each caller's one answer.
func (h *harness) callConcurrently(t *testing.T, n int, release chan struct{}) {
	t.Helper()
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { h.call(t.Context(), t, chargeCall).only(t) })
	}
	synctest.Wait()
	close(release)
	wg.Wait()
}

const chargeCall = `{"name":"charge_card","arguments":{"card":"4242","amount":100}}`

type resultView struct {
	Content []struct {
		Text string `json:"text"`
	} `json:"content"`
	IsError bool `json:"isError"`
	Meta    struct {
		Replayed  bool          `json:"mcp-idempotent/replayed"`
		Outcome   string        `json:"mcp-idempotent/outcome"`
		Execution executionMeta `json:"mcp-idempotent/execution"`
	} `json:"_meta"`
}

func view(t *testing.T, a Answer) resultView {
	t.Helper()
	if a.Error != nil {
		t.Fatalf("got JSON-RPC error %s; want a result", a.Error)
	}
	var v resultView
	if err := json.Unmarshal(a.Result, &v); err != nil || len(v.Content) == 0 {
		t.Fatalf("result %s is not a CallToolResult with content: %v", a.Result, err)
	}
	return v
}

// laterAnswers is a caller whose transport learns of the delivery later
// than the write, as an HTTP stream does: written holds the callbacks.
type laterAnswers struct {
	*answers
	written chan func(error)
}

func (a *laterAnswers) DeliversLater() bool { return true }

func (a *laterAnswers) ReplyThen(ans Answer, written func(error)) error {
	a.written <- written
	return a.Reply(ans)
}

// onlyRecord returns the one record the store holds.
func (h *harness) onlyRecord(t *testing.T) *record.Record {
	t.Helper()
	recs := h.store.Records()
	if len(recs) != 1 {
		t.Fatalf("store holds %d records; want 1", len(recs))
	}
	return recs[0]
}

func ptr[T any](v T) *T { return &v }

// endable is a call's context that the test ends with an error of its
// choosing, as the proxy's session ends a call's context with
// ErrSessionEnded.
type endable struct {
	context.Context
	done chan struct{}
	err  atomic.Pointer[error]
}

func newEndable(parent context.Context) *endable {
	return &endable{Context: parent, done: make(chan struct{})}
}

func (c *endable) Done() <-chan struct{} { return c.done }

func (c *endable) Err() error {
	if p := c.err.Load(); p != nil {
		return *p
	}
	return nil
}

func (c *endable) end(err error) {
	c.err.Store(&err)
	close(c.done)
}
