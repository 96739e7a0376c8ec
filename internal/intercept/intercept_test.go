package intercept

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
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
		Call: tc, Policy: &h.pol, Actor: "alice", Scope: "session:1", UpstreamID: "stdio:bank",
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

func TestSequentialRetriesReplay(t *testing.T) {
	h := newHarness(charged)
	first := view(t, h.call(t.Context(), t, chargeCall).only(t))
	if first.Meta.Replayed {
		t.Error("the first caller's answer is marked replayed; it is the live answer")
	}
	for i := range 4 {
		// Key order, spacing and number spelling are the same action.
		v := view(t, h.call(t.Context(), t, `{ "arguments": {"amount": 1e2, "card": "4242"}, "name": "charge_card" }`).only(t))
		if v.Content[0].Text != first.Content[0].Text {
			t.Fatalf("retry %d got %q; want the first answer %q", i+1, v.Content[0].Text, first.Content[0].Text)
		}
		if !v.Meta.Replayed || !strings.HasPrefix(v.Meta.Execution.ID, "exe_") {
			t.Fatalf("retry %d is not marked as a replay of an execution: %+v", i+1, v.Meta)
		}
	}
	if n := h.up.calls.Load(); n != 1 {
		t.Fatalf("upstream ran %d times for 5 identical calls; want 1", n)
	}
}

func TestConcurrentDuplicatesShareOneExecution(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, release := newHeldHarness()
		const callers = 50
		got := make([]*answers, callers)
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() { got[i] = h.call(t.Context(), t, chargeCall) })
		}
		synctest.Wait() // every caller has reserved or attached, and blocks
		if r := h.onlyRecord(t); r.Attached != callers-1 || r.State != record.Dispatched {
			t.Fatalf("record %s attached=%d; want dispatched with %d attached", r.State, r.Attached, callers-1)
		}
		close(release)
		wg.Wait()

		replayed := 0
		for i, a := range got {
			v := view(t, a.only(t))
			if v.Content[0].Text != "charge #1" {
				t.Errorf("caller %d got %q; want charge #1", i, v.Content[0].Text)
			}
			if v.Meta.Replayed {
				replayed++
			}
		}
		if n := h.up.calls.Load(); n != 1 {
			t.Fatalf("upstream ran %d times for %d concurrent calls; want 1", n, callers)
		}
		if replayed != callers-1 {
			t.Errorf("%d answers marked replayed; want %d (all but the originator's)", replayed, callers-1)
		}
	})
}

func TestDistinctActionsRunSeparately(t *testing.T) {
	h := newHarness(charged)
	for _, p := range []string{
		`{"name":"charge_card","arguments":{"card":"4242","amount":100}}`,
		`{"name":"charge_card","arguments":{"card":"4242","amount":101}}`,
		`{"name":"charge_card","arguments":{"card":"5555","amount":100}}`,
		`{"name":"refund","arguments":{"card":"4242","amount":100}}`,
	} {
		h.call(t.Context(), t, p).only(t)
	}
	if n := h.up.calls.Load(); n != 4 {
		t.Fatalf("upstream ran %d times for 4 different actions; want 4", n)
	}
}

func TestActorsNeverShare(t *testing.T) {
	h := newHarness(charged)
	for _, actor := range []string{"alice", "bob"} {
		tc, _ := mcp.ParseToolCall(json.RawMessage(chargeCall))
		a := newAnswers()
		h.in.Handle(t.Context(), &Request{Call: tc, Policy: &h.pol, Actor: actor, Scope: "s", Upstream: h.up, Reply: a})
		a.only(t)
	}
	if n := h.up.calls.Load(); n != 2 {
		t.Fatalf("upstream ran %d times for two actors; want 2", n)
	}
}

func TestToolErrorResultIsReplayed(t *testing.T) {
	h := newHarness(func(context.Context, int, json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"content":[{"type":"text","text":"card declined"}],"isError":true}`), nil
	})
	h.call(t.Context(), t, chargeCall).only(t)
	v := view(t, h.call(t.Context(), t, chargeCall).only(t))
	if !v.IsError || !v.Meta.Replayed {
		t.Fatalf("retry of a declined charge: %+v; want the stored isError result, replayed", v)
	}
	if n := h.up.calls.Load(); n != 1 {
		t.Fatalf("upstream ran %d times; an isError result is a completion and must replay", n)
	}
}

// TestTakenOverWhileSent: when the store already holds another outcome
// for an execution as its send comes back (this process's lease lapsed,
// and another process took it over, sent it again and settled it), the
// caller gets the stored outcome, not an error saying it will be recorded.
func TestTakenOverWhileSent(t *testing.T) {
	var h *harness
	h = newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
		// Meanwhile, in another process:
		id := h.store.Records()[0].ID
		for _, c := range []record.Change{
			{To: record.Unknown, Note: "taken over"},
			{To: record.Dispatched},
			{To: record.Completed, Result: json.RawMessage(`{"content":[{"type":"text","text":"charge #B"}]}`)},
			{To: record.Delivered},
		} {
			if _, err := h.store.Update(ctx, id, c); err != nil {
				return nil, err
			}
		}
		return charged(ctx, n, p)
	})
	v := view(t, h.call(t.Context(), t, chargeCall).only(t))
	if !v.Meta.Replayed || v.Content[0].Text != "charge #B" {
		t.Fatalf("the first caller got %+v; want the stored outcome, replayed", v)
	}
}

// TestTakenOverAndRunningAgain: when this process's lease lapsed and
// another process took the execution over and is running it again, the
// store refuses this process's outcome (fencing), and its caller waits
// for the other's, which is the one recorded.
func TestTakenOverAndRunningAgain(t *testing.T) {
	var h *harness
	otherDone := make(chan error, 1)
	h = newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
		// Meanwhile, in another process, which will answer later:
		id := h.store.Records()[0].ID
		for _, c := range []record.Change{
			{To: record.Unknown, Note: "taken over"},
			{To: record.Dispatched, From: record.Unknown, Owner: "proxy-B", Lease: time.Minute},
		} {
			if _, err := h.store.Update(ctx, id, c); err != nil {
				return nil, err
			}
		}
		go func() {
			time.Sleep(50 * time.Millisecond)
			_, err := h.store.Update(context.Background(), id, record.Change{To: record.Completed, Holder: "proxy-B",
				Result: json.RawMessage(`{"content":[{"type":"text","text":"charge #B"}]}`)})
			otherDone <- err
		}()
		return charged(ctx, n, p)
	})
	v := view(t, h.call(t.Context(), t, chargeCall).only(t))
	if err := <-otherDone; err != nil {
		t.Fatalf("the other process's outcome: %v; want it recorded", err)
	}
	if v.Content[0].Text != "charge #B" {
		t.Fatalf("the first caller got %+v; want the other process's outcome", v)
	}
}

// TestNoSecretFailsClosed: without the fingerprint secret (a durable
// store that keeps it could not be reached at start), a side effect is
// refused as with the store down, and runs once the secret is known.
func TestNoSecretFailsClosed(t *testing.T) {
	h := newHarness(charged)
	hasher := fingerprint.Pending()
	h.in = New(Options{Store: h.store, Hasher: hasher})
	a := h.call(t.Context(), t, chargeCall).only(t)
	if e := jsonrpc.DecodeError(a.Error); a.Error == nil || e.Code != jsonrpc.CodeInternalError || !strings.Contains(e.Message, "store is unavailable") {
		t.Fatalf("a call without the secret got %+v; want -32603 saying the store is unavailable", a)
	}
	if n := h.up.calls.Load(); n != 0 || len(h.store.Records()) != 0 {
		t.Fatalf("%d sends, %d records; want none", n, len(h.store.Records()))
	}
	if err := hasher.SetSecret([]byte("0123456789abcdef0123")); err != nil {
		t.Fatal(err)
	}
	if v := view(t, h.call(t.Context(), t, chargeCall).only(t)); v.Content[0].Text != "charge #1" {
		t.Fatalf("once the secret is known the call got %+v; want it run", v)
	}
}

func TestUpstreamErrorFailsAndRunsAgain(t *testing.T) {
	h := newHarness(func(_ context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
		if n == 1 {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "amount too large"}
		}
		return charged(context.Background(), n, p)
	})
	a := h.call(t.Context(), t, chargeCall).only(t)
	if a.Error == nil || !strings.Contains(string(a.Error), "amount too large") {
		t.Fatalf("first call got %+v; want the upstream's JSON-RPC error as it came", a)
	}
	if v := view(t, h.call(t.Context(), t, chargeCall).only(t)); v.Meta.Replayed || v.Content[0].Text != "charge #2" {
		t.Fatalf("call after a failure got %+v; want a new execution", v)
	}
}

func TestNotSentFailsAndRunsAgain(t *testing.T) {
	h := newHarness(func(_ context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
		if n == 1 {
			return nil, retry.NotSent(errors.New("the upstream has closed"))
		}
		return charged(context.Background(), n, p)
	})
	a := h.call(t.Context(), t, chargeCall).only(t)
	e := jsonrpc.DecodeError(a.Error)
	if a.Error == nil || !strings.Contains(e.Message, "failed before it was sent") {
		t.Fatalf("first call got %+v; want an error saying nothing ran", a)
	}
	h.call(t.Context(), t, chargeCall).only(t)
	if n := h.up.calls.Load(); n != 2 {
		t.Fatalf("upstream reached %d times; a call that was never sent must run on the next try", n)
	}
}

func TestOutcomeUnknownIsNeverResent(t *testing.T) {
	h := newHarness(func(context.Context, int, json.RawMessage) (json.RawMessage, error) {
		return nil, errors.New("the upstream exited before answering")
	})
	for i := range 2 {
		v := view(t, h.call(t.Context(), t, chargeCall).only(t))
		if !v.IsError || !strings.HasPrefix(v.Content[0].Text, "Outcome unknown:") ||
			!strings.Contains(v.Content[0].Text, v.Meta.Execution.ID) || v.Meta.Outcome != "unknown" {
			t.Fatalf("call %d got %+v; want an outcome-unknown result naming the execution", i+1, v)
		}
	}
	if n := h.up.calls.Load(); n != 1 {
		t.Fatalf("upstream reached %d times; an unknown outcome must never be re-sent", n)
	}
}

func TestIdempotentToolsCoalesceOnlyInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, release := newHeldHarness()
		h.pol = policy.FromAnnotations(&mcp.Annotations{IdempotentHint: ptr(true)})
		h.callConcurrently(t, 3, release)
		if n := h.up.calls.Load(); n != 1 {
			t.Fatalf("upstream ran %d times for 3 concurrent calls to an idempotent tool; want 1", n)
		}
		h.call(t.Context(), t, chargeCall).only(t)
		if n := h.up.calls.Load(); n != 2 {
			t.Fatalf("upstream ran %d times; a later call to an idempotent tool runs again", n)
		}
	})
}

func TestCancelledCallerDetachesAndTheAnswerWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, release := newHeldHarness()
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan *answers)
		go func() { done <- h.call(ctx, t, chargeCall) }()
		synctest.Wait()
		if r := h.onlyRecord(t); r.State != record.Dispatched {
			t.Fatalf("state %s; want dispatched", r.State)
		}
		cancel()
		a := <-done
		close(release) // the execution goes on without its caller
		if err := h.in.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
		if a.count() != 0 {
			t.Fatalf("a caller that cancelled got %d answers; want none", a.count())
		}
		if r := h.onlyRecord(t); r.State != record.Completed {
			t.Fatalf("state %s after the cancelled caller's execution finished; want completed (not delivered)", r.State)
		}
		v := view(t, h.call(t.Context(), t, chargeCall).only(t))
		if !v.Meta.Replayed || v.Content[0].Text != "charge #1" {
			t.Fatalf("retry after a cancel got %+v; want the stored answer", v)
		}
		if r := h.onlyRecord(t); r.State != record.Delivered {
			t.Fatalf("state %s after the replay was written; want delivered", r.State)
		}
		if n := h.up.calls.Load(); n != 1 {
			t.Fatalf("upstream ran %d times; want 1", n)
		}
	})
}

func TestOneCallerCancellingLeavesTheOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, release := newHeldHarness()
		ctx, cancel := context.WithCancel(t.Context())
		first := make(chan *answers)
		go func() { first <- h.call(ctx, t, chargeCall) }()
		second := make(chan *answers)
		go func() { second <- h.call(t.Context(), t, chargeCall) }()
		synctest.Wait()
		cancel()
		cancelled := <-first
		close(release)
		if v := view(t, (<-second).only(t)); v.Content[0].Text != "charge #1" {
			t.Fatalf("the remaining caller got %+v", v)
		}
		if n := h.up.calls.Load(); n != 1 {
			t.Fatalf("upstream ran %d times; want 1", n)
		}
		if cancelled.count() != 0 {
			t.Fatalf("the caller that cancelled got %d answers; want none", cancelled.count())
		}
	})
}

func TestAttachWindowAnswersStillInProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, release := newHeldHarness()
		h.pol.AttachWindow = 5 * time.Second
		first := h.call(t.Context(), t, chargeCall) // dispatched; the upstream holds it
		v := view(t, h.call(t.Context(), t, chargeCall).only(t))
		if !v.IsError || !strings.HasPrefix(v.Content[0].Text, "Still in progress:") ||
			!strings.Contains(v.Content[0].Text, "Do not retry") || v.Meta.Outcome != "in_progress" {
			t.Fatalf("after the attach window: %+v; want a still-in-progress result", v)
		}
		if first.count() != 0 {
			t.Fatal("the originator was answered before the upstream answered")
		}
		close(release)
		if v := view(t, first.only(t)); v.Content[0].Text != "charge #1" {
			t.Fatalf("the originator got %+v once the upstream answered", v)
		}
		if v := view(t, h.call(t.Context(), t, chargeCall).only(t)); v.Content[0].Text != "charge #1" || !v.Meta.Replayed {
			t.Fatalf("after the execution finished: %+v; want its answer replayed", v)
		}
	})
}

func TestInputRequiredIsNotACompletion(t *testing.T) {
	h := newHarness(func(_ context.Context, n int, _ json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(fmt.Sprintf(`{"resultType":"input_required","inputRequests":{"confirm":{"method":"elicitation/create"}},"requestState":"s%d"}`, n)), nil
	})
	for i := range 2 {
		a := h.call(t.Context(), t, chargeCall).only(t)
		if !strings.Contains(string(a.Result), fmt.Sprintf(`"s%d"`, i+1)) {
			t.Fatalf("call %d got %s; want the upstream's own input_required result", i+1, a.Result)
		}
	}
	// A continuation is its own action: its answers are fingerprinted.
	h.call(t.Context(), t, `{"name":"charge_card","arguments":{"card":"4242","amount":100},"inputResponses":{"confirm":{"action":"accept"}},"requestState":"s1"}`)
	if n := h.up.calls.Load(); n != 3 {
		t.Fatalf("upstream reached %d times; input_required completes nothing, so each call runs", n)
	}
}

// TestInputRequiredSpelledWithEscapes: "input\u005frequired" is
// input_required to any JSON reader, and so to the proxy.
func TestInputRequiredSpelledWithEscapes(t *testing.T) {
	for _, result := range []string{
		`{"resultType":"input\u005frequired","requestState":"s"}`,
		`{"result\u0054ype":"input_required","requestState":"s"}`,
	} {
		if !inputRequired(json.RawMessage(result)) {
			t.Errorf("inputRequired(%s) = false", result)
		}
	}
}

// TestKeyedMultiRoundRequest: under a client key, a multi-round request's
// continuation runs (the round that asked for input is no other action);
// a retry of it is its replay; other answers are another continuation;
// the key still refuses another action.
func TestKeyedMultiRoundRequest(t *testing.T) {
	h := newHarness(func(_ context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
		if !strings.Contains(string(p), "inputResponses") {
			return json.RawMessage(`{"resultType":"input_required","inputRequests":{"confirm":{"method":"elicitation/create"}},"requestState":"s1"}`), nil
		}
		return charged(context.Background(), n, p)
	})
	const (
		first        = `{"name":"charge_card","arguments":{"card":"4242","amount":100},"_meta":{"mcp-idempotent/key":"K1"}}`
		continuation = `{"name":"charge_card","arguments":{"card":"4242","amount":100},"inputResponses":{"confirm":{"action":"accept"}},"requestState":"s1","_meta":{"mcp-idempotent/key":"K1"}}`
	)
	if a := h.call(t.Context(), t, first).only(t); !strings.Contains(string(a.Result), "input_required") {
		t.Fatalf("the first round got %s; want input_required", a.Result)
	}
	if v := view(t, h.call(t.Context(), t, continuation).only(t)); v.Content[0].Text != "charge #2" {
		t.Fatalf("the continuation got %+v; want it run", v)
	}
	if v := view(t, h.call(t.Context(), t, continuation).only(t)); v.Content[0].Text != "charge #2" || !v.Meta.Replayed {
		t.Fatalf("the continuation again got %+v; want its replay", v)
	}
	// Other answers are another continuation, run as without a key.
	decline := strings.Replace(continuation, `"accept"`, `"decline"`, 1)
	if v := view(t, h.call(t.Context(), t, decline).only(t)); v.Content[0].Text != "charge #3" || v.Meta.Replayed {
		t.Fatalf("a continuation with other answers got %+v; want it run", v)
	}
	a := h.call(t.Context(), t, strings.Replace(continuation, `"amount":100`, `"amount":999`, 1)).only(t)
	if a.Error == nil || !strings.Contains(string(a.Error), "already used for a different call") || !strings.Contains(string(a.Error), "the arguments differ") {
		t.Fatalf("another action under the key got %s %s; want it refused", a.Result, a.Error)
	}
	a = h.call(t.Context(), t, `{"name":"refund","arguments":{"card":"4242","amount":100},"_meta":{"mcp-idempotent/key":"K1"}}`).only(t)
	if a.Error == nil || !strings.Contains(string(a.Error), "it names another tool") {
		t.Fatalf("another tool under the key got %s %s; want it refused as another tool", a.Result, a.Error)
	}
	if n := h.up.calls.Load(); n != 3 {
		t.Fatalf("upstream reached %d times; want the first round and the two continuations", n)
	}
}

// TestResultTypeIsMatchedExactly: a completion whose result happens to
// hold a member "ResultType" is a completion, replayed, not run again.
func TestResultTypeIsMatchedExactly(t *testing.T) {
	h := newHarness(func(context.Context, int, json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"content":[{"type":"text","text":"charged"}],"ResultType":"input_required"}`), nil
	})
	h.call(t.Context(), t, chargeCall).only(t)
	if v := view(t, h.call(t.Context(), t, chargeCall).only(t)); !v.Meta.Replayed {
		t.Fatalf("calling again got %+v; want the completion replayed", v)
	}
	if n := h.up.calls.Load(); n != 1 {
		t.Fatalf("upstream reached %d times; want 1", n)
	}
}

func TestTaskHandleIsReplayed(t *testing.T) {
	h := newHarness(func(_ context.Context, n int, _ json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(fmt.Sprintf(`{"task":{"taskId":"task-%d","status":"working"}}`, n)), nil
	})
	taskCall := `{"name":"charge_card","arguments":{"card":"4242","amount":100},"task":{"ttl":60000}}`
	first := h.call(t.Context(), t, taskCall).only(t)
	retry := h.call(t.Context(), t, `{"name":"charge_card","arguments":{"card":"4242","amount":100},"task":{"ttl":30000}}`).only(t)
	for _, a := range []Answer{first, retry} {
		if !strings.Contains(string(a.Result), `"taskId":"task-1"`) {
			t.Fatalf("got %s; a retried task-augmented call must attach to the same task", a.Result)
		}
	}
	h.call(t.Context(), t, chargeCall).only(t) // not task-augmented: another action
	if n := h.up.calls.Load(); n != 2 {
		t.Fatalf("upstream reached %d times; want 2", n)
	}
}

// TestTasksExtensionIsPartOfTheAction: a 2026-07-28 call that declares the
// tasks extension may be answered with a task handle, which a retry
// declaring it attaches to; the same call without it is another action,
// and never gets a handle its client could not follow.
func TestTasksExtensionIsPartOfTheAction(t *testing.T) {
	h := newHarness(func(_ context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
		if strings.Contains(string(p), "io.modelcontextprotocol/tasks") {
			return json.RawMessage(fmt.Sprintf(`{"resultType":"task","taskId":"task-%d","status":"working"}`, n)), nil
		}
		return charged(context.Background(), n, p)
	})
	const (
		meta     = `"io.modelcontextprotocol/protocolVersion":"2026-07-28"`
		withTask = `{"name":"charge_card","arguments":{"card":"4242","amount":100},"_meta":{` + meta +
			`,"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}}`
		without = `{"name":"charge_card","arguments":{"card":"4242","amount":100},"_meta":{` + meta +
			`,"io.modelcontextprotocol/clientCapabilities":{"extensions":{}}}}`
	)
	// The same declaration spelled with an escape is the same.
	escaped := strings.Replace(withTask, `/tasks"`, `/t\u0061sks"`, 1)
	for i, call := range []string{withTask, escaped} {
		if a := h.call(t.Context(), t, call).only(t); !strings.Contains(string(a.Result), `"taskId":"task-1"`) {
			t.Fatalf("call %d declaring tasks got %s; want the one task", i+1, a.Result)
		}
	}
	if a := h.call(t.Context(), t, without).only(t); strings.Contains(string(a.Result), "taskId") {
		t.Fatalf("the call without the extension got %s; want a result, not a task handle", a.Result)
	}
	if n := h.up.calls.Load(); n != 2 {
		t.Fatalf("upstream reached %d times; want 2", n)
	}
}

// TestKeyedTasksExtensionMatchesOlderRecords: a record an earlier version
// made of a keyed call, when the tasks extension was not part of the
// fingerprint, still matches the same call declaring it: not refused as
// another action.
func TestKeyedTasksExtensionMatchesOlderRecords(t *testing.T) {
	h := newHarness(charged)
	const (
		caps   = `"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}`
		before = `{"name":"charge_card","arguments":{"card":"4242","amount":100},"_meta":{"mcp-idempotent/key":"K2"}}`
		after  = `{"name":"charge_card","arguments":{"card":"4242","amount":100},"_meta":{"mcp-idempotent/key":"K2",` + caps + `}}`
	)
	h.call(t.Context(), t, before).only(t) // as the earlier version fingerprinted it
	if v := view(t, h.call(t.Context(), t, after).only(t)); v.Content[0].Text != "charge #1" || !v.Meta.Replayed {
		t.Fatalf("the same keyed call, declaring tasks, got %+v; want the earlier record replayed", v)
	}
}

// failingStore refuses every reservation, like a store that is down.
type failingStore struct{ record.Store }

func (failingStore) Reserve(context.Context, *record.Record, record.ReserveOptions) (*record.Record, bool, error) {
	return nil, false, errors.New("connection refused")
}

func TestStoreDownFailsClosed(t *testing.T) {
	h := newHarness(charged)
	h.in = New(Options{Store: failingStore{}, Hasher: fingerprint.NewRandom()})
	a := h.call(t.Context(), t, chargeCall).only(t)
	if e := jsonrpc.DecodeError(a.Error); a.Error == nil || !strings.Contains(e.Message, "store is unavailable") {
		t.Fatalf("got %+v; want an error saying the store is unavailable", a)
	}
	if n := h.up.calls.Load(); n != 0 {
		t.Fatalf("upstream reached %d times without a reservation; want 0", n)
	}
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

// TestDeliveredWhenWritten: over a transport that learns of the delivery
// later, the execution is completed when the answer is handed over, and
// delivered only once the transport says the caller got it; so with
// replay: undelivered, a call after an answer that never reached its
// caller is answered from the record, not run again.
func TestDeliveredWhenWritten(t *testing.T) {
	h := newHarness(charged)
	h.pol.Replay = policy.ReplayUndelivered
	call := func() (*laterAnswers, func(error)) {
		tc, _ := mcp.ParseToolCall(json.RawMessage(chargeCall))
		a := &laterAnswers{answers: newAnswers(), written: make(chan func(error), 1)}
		h.in.Handle(t.Context(), &Request{Call: tc, Policy: &h.pol, Actor: "alice", Scope: "session:1",
			UpstreamID: "stdio:bank", Upstream: h.up, Reply: a, Correlation: "test"})
		a.only(t)
		return a, <-a.written
	}
	_, written := call() // the transport never writes it: the caller dropped
	if err := h.in.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	if r := h.onlyRecord(t); r.State != record.Completed {
		t.Fatalf("record %s before the answer was written; want completed", r.State)
	}
	_, written = call()
	if n := h.up.calls.Load(); n != 1 {
		t.Fatalf("upstream reached %d times; an answer never written is replayed, not run again", n)
	}
	written(nil) // this one reached its caller
	if r := h.onlyRecord(t); r.State != record.Delivered {
		t.Fatalf("record %s once the answer was written; want delivered", r.State)
	}
}

// TestOutcomeRecordedWhenTheStoreIsBack: an outcome the store refused to
// record is recorded once the store takes it again: the execution does
// not stay in flight, and calling again replays it instead of waiting on
// it (or running it again).
func TestOutcomeRecordedWhenTheStoreIsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(charged)
		store := &recordtest.UpdatesDown{Store: h.store}
		h.in = New(Options{Store: store, Hasher: fingerprint.NewRandom()})
		store.Down.Store(true)
		a := h.call(t.Context(), t, chargeCall).only(t)
		if e := jsonrpc.DecodeError(a.Error); a.Error == nil || !strings.Contains(e.Message, "ran, but its outcome could not be recorded yet") {
			t.Fatalf("got %+v; want an error saying the call ran and its outcome is not recorded yet", a)
		}
		time.Sleep(time.Second) // the store stays down a while
		store.Down.Store(false)
		if err := h.in.Wait(t.Context()); err != nil {
			t.Fatal(err)
		}
		if r := h.onlyRecord(t); r.State != record.Completed {
			t.Fatalf("record %s; want completed once the store is back", r.State)
		}
		v := view(t, h.call(t.Context(), t, chargeCall).only(t))
		if !v.Meta.Replayed || v.Content[0].Text != "charge #1" {
			t.Fatalf("calling again got %+v; want the outcome replayed", v)
		}
		if n := h.up.calls.Load(); n != 1 {
			t.Fatalf("upstream reached %d times; want 1", n)
		}
	})
}

// waitsFail is a memory store whose Wait fails while down is set, like a
// store whose connection dropped under a waiter.
type waitsFail struct {
	*memstore.Store
	down atomic.Bool
}

func (s *waitsFail) Wait(ctx context.Context, id string) (*record.Record, error) {
	if s.down.Load() {
		return nil, errors.New("waiting for " + id + ": connection reset by peer")
	}
	return s.Store.Wait(ctx, id)
}

// TestWaiterOutlivesAStoreFailure: a caller attached to an execution under
// way, whose store fails while it waits, waits on and gets the
// execution's answer, not an error that says neither whether the tool ran
// nor what to do.
func TestWaiterOutlivesAStoreFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, release := newHeldHarness()
		store := &waitsFail{Store: h.store}
		h.in = New(Options{Store: store, Hasher: fingerprint.NewRandom()})
		store.down.Store(true)
		first := h.call(t.Context(), t, chargeCall)
		second := h.call(t.Context(), t, chargeCall)
		synctest.Wait() // the second caller's wait has failed once
		time.Sleep(time.Second)
		store.down.Store(false)
		close(release)
		for i, a := range []*answers{first, second} {
			if v := view(t, a.only(t)); len(v.Content) == 0 || v.Content[0].Text != "charge #1" {
				t.Errorf("caller %d got %+v; want charge #1", i+1, v)
			}
		}
		if n := h.up.calls.Load(); n != 1 {
			t.Fatalf("upstream reached %d times; want 1", n)
		}
	})
}

// takenOver is a memory store in which another process takes over every
// execution between its reservation and its dispatch, settling it as
// never sent, as it does when this process's lease lapses meanwhile.
type takenOver struct{ *memstore.Store }

func (s takenOver) Reserve(ctx context.Context, r *record.Record, opts record.ReserveOptions) (*record.Record, bool, error) {
	opts.Dispatch = false // reserved, then dispatched in a step of its own
	return s.Store.Reserve(ctx, r, opts)
}

func (s takenOver) Update(ctx context.Context, id string, c record.Change) (*record.Record, error) {
	if c.To == record.Dispatched {
		if _, err := s.Store.Update(ctx, id, record.Change{To: record.Failed, Note: "the lease lapsed before dispatch"}); err != nil {
			return nil, err
		}
	}
	return s.Store.Update(ctx, id, c)
}

// TestTakenOverBeforeDispatch: a caller whose execution another process
// settled before it was sent is told that nothing ran and that calling
// again runs it, and nothing is sent.
func TestTakenOverBeforeDispatch(t *testing.T) {
	h := newHarness(charged)
	h.in = New(Options{Store: takenOver{h.store}, Hasher: fingerprint.NewRandom()})
	a := h.call(t.Context(), t, chargeCall).only(t)
	if e := jsonrpc.DecodeError(a.Error); a.Error == nil || !strings.Contains(e.Message, "failed before it was sent") || !strings.Contains(e.Message, "nothing ran") {
		t.Fatalf("got result %s, error %s; want an error saying nothing ran", a.Result, a.Error)
	}
	if n := h.up.calls.Load(); n != 0 {
		t.Fatalf("upstream reached %d times; want 0", n)
	}
}

func TestReplayLeavesTheStoredResultUntouched(t *testing.T) {
	h := newHarness(func(context.Context, int, json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"content":[{"type":"text","text":"ok"}],"_meta":{"vendor/trace":"t1"}}`), nil
	})
	h.call(t.Context(), t, chargeCall).only(t)
	a := h.call(t.Context(), t, chargeCall).only(t)
	var v struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if err := json.Unmarshal(a.Result, &v); err != nil || string(v.Meta["vendor/trace"]) != `"t1"` {
		t.Fatalf("replay %s lost the upstream's own _meta", a.Result)
	}
	if r := h.onlyRecord(t); strings.Contains(string(r.Result), "replayed") {
		t.Fatalf("the stored result was modified: %s", r.Result)
	}
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

// TestAppendExecution checks that the _meta a replay carries is what
// json.Marshal makes of the execution, for names that need escapes too.
func TestAppendExecution(t *testing.T) {
	at := time.Date(2026, 11, 29, 12, 0, 0, 123456789, time.UTC)
	for _, r := range []*record.Record{
		{ID: "exe_01", State: record.Delivered, Tool: "charge_card", Attempts: 1, Upstream: "stdio:bank",
			History: []record.Transition{{State: record.Accepted, At: at}, {State: record.Dispatched, At: at.Add(time.Millisecond)},
				{State: record.Completed, At: at.Add(time.Second)}, {State: record.Delivered, At: at.Add(2 * time.Second)}}},
		{ID: "exe_02", State: record.Completed, Tool: `a "quoted" <tool> & é`, Attempts: 2, Attached: 3,
			History: []record.Transition{{State: record.Accepted, At: at}, {State: record.Dispatched, At: at.Add(time.Millisecond)},
				{State: record.Unknown, At: at.In(time.FixedZone("x", 3600))}, {State: record.Dispatched, At: at.Add(time.Hour)},
				{State: record.Completed, At: at.Add(2 * time.Hour)}}},
		{ID: "exe_03", State: record.Failed, Tool: "t\n\x01", Upstream: "http://h/p?\u2028"},
	} {
		want, err := json.Marshal(describe(r))
		if err != nil {
			t.Fatal(err)
		}
		if got := appendExecution(nil, r); string(got) != string(want) {
			t.Errorf("appendExecution:\n got %s\nwant %s", got, want)
		}
	}
}

// TestSessionEndedBeforeTheReservation: a call whose session ended before
// it was reserved did not leave, as a cancelled caller does: it is told,
// and nothing runs or is recorded.
func TestSessionEndedBeforeTheReservation(t *testing.T) {
	h := newHarness(charged)
	ended := newEndable(t.Context())
	ended.end(ErrSessionEnded)
	ans := h.call(ended, t, chargeCall).only(t)
	if ans.Error == nil || !strings.Contains(string(ans.Error), "session ended before charge_card was executed; it did not run") {
		t.Fatalf("got %+v; want an error saying the call did not run", ans)
	}
	if n := h.up.calls.Load(); n != 0 {
		t.Fatalf("the upstream ran %d calls; want none", n)
	}
	if v := view(t, h.call(t.Context(), t, chargeCall).only(t)); v.Content[0].Text != "charge #1" || v.Meta.Replayed {
		t.Fatalf("calling again got %+v; want a new execution", v)
	}
}

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

// waitsForEver is a memory store whose Wait never sees the execution
// settle, as a waiter on a shared store may not before its session ends.
type waitsForEver struct{ *memstore.Store }

func (waitsForEver) Wait(ctx context.Context, _ string) (*record.Record, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestSessionEndAnswersFromTheRecord: a caller attached to an execution
// that settled as unknown before the caller's session ended is told the
// outcome is unknown, not that the execution is still in progress.
func TestSessionEndAnswersFromTheRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		h := newHarness(func(context.Context, int, json.RawMessage) (json.RawMessage, error) {
			<-release
			return nil, errors.New("the upstream exited before answering")
		})
		h.in = New(Options{Store: waitsForEver{h.store}, Hasher: fingerprint.NewRandom()})
		first := h.call(t.Context(), t, chargeCall)
		ctx := newEndable(t.Context())
		attached := h.call(ctx, t, chargeCall)
		synctest.Wait()
		close(release)
		if v := view(t, first.only(t)); !strings.HasPrefix(v.Content[0].Text, "Outcome unknown:") {
			t.Fatalf("the first caller got %+v; want outcome unknown", v)
		}
		ctx.end(ErrSessionEnded)
		if v := view(t, attached.only(t)); !strings.HasPrefix(v.Content[0].Text, "Outcome unknown:") {
			t.Fatalf("the attached caller got %+v at the session's end; want outcome unknown, as the record says", v)
		}
	})
}

// TestSessionEndAnswersAStatusCheck: a call whose status check (on_unknown
// recover) is cut off by the end of its session is still answered: the
// outcome stays unknown.
func TestSessionEndAnswersAStatusCheck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		status := make(chan struct{})
		h := newHarness(func(_ context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
			if n == 1 {
				return nil, errors.New("the upstream exited before answering")
			}
			<-status // the status check: cut off by the session's end
			return nil, errors.New("the session ended before the upstream answered")
		})
		h.pol.OnUnknown = policy.Recover
		h.pol.Recover = &policy.RecoverRule{Tool: "get_status"}
		h.call(t.Context(), t, chargeCall).only(t)
		ctx := newEndable(t.Context())
		a := h.call(ctx, t, chargeCall)
		synctest.Wait() // the status check is under way
		ctx.end(ErrSessionEnded)
		close(status)
		if v := view(t, a.only(t)); !strings.HasPrefix(v.Content[0].Text, "Outcome unknown:") {
			t.Fatalf("got %+v; want outcome unknown", v)
		}
		if n := h.up.calls.Load(); n != 2 {
			t.Fatalf("upstream reached %d times; want the call and its status check", n)
		}
	})
}

// TestRetriesSendNoProgressToken: an attempt after the first goes without
// the client's progress token, whose progress the first attempt gave.
func TestRetriesSendNoProgressToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var sent []string
		busy := busyThen(1)
		h := newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
			mu.Lock()
			sent = append(sent, string(p))
			mu.Unlock()
			return busy(ctx, n, p)
		})
		h.pol.Retry = retryRule(true)
		h.call(t.Context(), t, `{"name":"charge_card","arguments":{"amount":1},"_meta":{"progressToken":"p1"}}`).only(t)
		if len(sent) != 2 || !strings.Contains(sent[0], `"progressToken":"p1"`) || strings.Contains(sent[1], "progressToken") {
			t.Fatalf("sent %q; want the first attempt with the progress token, the second without", sent)
		}
	})
}
