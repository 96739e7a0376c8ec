package intercept

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

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
		h.in.Handle(t.Context(), &Request{Call: tc, Policy: &h.pol, Origin: &Origin{Actor: actor, Scope: "s"}, Upstream: h.up, Reply: a})
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

// TestOutcomeReadsEverySpelling: outcome looks into a result for an
// input_required or an upstream's outcome only if it holds an underscore
// or a backslash; every spelling a JSON reader takes for them has one,
// and names that differ in case are not them.
func TestOutcomeReadsEverySpelling(t *testing.T) {
	for _, tt := range []struct {
		result string
		want   record.State
	}{
		{`{"content":[{"type":"text","text":"charged"}],"isError":false}`, record.Completed},
		{`{"content":[],"id":"ch_1"}`, record.Completed},
		{`{"resultType":"input_required","requestState":"s"}`, record.Failed},
		{`{"resultType":"input\u005frequired","requestState":"s"}`, record.Failed},
		{`{"result\u0054ype":"input_required"}`, record.Failed},
		{`{"ResultType":"input_required"}`, record.Completed},
		{`{"_meta":{"mcp-idempotent/outcome":"unknown"}}`, record.Unknown},
		{`{"\u005fmeta":{"mcp-idempotent/outcome":"unknown"}}`, record.Unknown},
		{`{"_meta":{"mcp-idempotent\/outcome":"unknown"}}`, record.Unknown},
		{`{"_meta":{"mcp-idempotent/outcome":"unknow\u006e"}}`, record.Unknown},
		{`{"_Meta":{"mcp-idempotent/outcome":"unknown"}}`, record.Completed},
		{`{"_meta":{"mcp-idempotent/outcome":"already_done"}}`, record.Completed},
		{`{"text":"a\nb"}`, record.Completed},
	} {
		var c record.Change
		if outcome(&c, json.RawMessage(tt.result), nil); c.To != tt.want {
			t.Errorf("outcome(%s) settles as %s; want %s", tt.result, c.To, tt.want)
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

// TestKeyedTasksExtensionRunsWhereTheOlderRecordIsReplaced: the same
// keyed call declaring tasks, which matches the record of the call
// without it, runs anew where that record would be replaced: after its
// failure, and after its delivery under replay: undelivered.
func TestKeyedTasksExtensionRunsWhereTheOlderRecordIsReplaced(t *testing.T) {
	const (
		caps   = `"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}`
		before = `{"name":"charge_card","arguments":{"card":"4242","amount":100},"_meta":{"mcp-idempotent/key":"K3"}}`
		after  = `{"name":"charge_card","arguments":{"card":"4242","amount":100},"_meta":{"mcp-idempotent/key":"K3",` + caps + `}}`
	)
	for _, tc := range []struct {
		name string
		fail bool
		pol  func(*policy.Policy)
	}{
		{"failed", true, func(*policy.Policy) {}},
		{"delivered, replay undelivered", false, func(p *policy.Policy) { p.Replay = policy.ReplayUndelivered }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
				if tc.fail && n == 1 {
					return nil, retry.NotSent(errors.New("refused"))
				}
				return charged(ctx, n, p)
			})
			tc.pol(&h.pol)
			h.call(t.Context(), t, before).only(t)
			h.in.Wait(t.Context())
			a := h.call(t.Context(), t, after).only(t)
			if a.Error != nil || view(t, a).Content[0].Text != "charge #2" {
				t.Fatalf("the keyed call declaring tasks got %s %s; want a new execution, charge #2", a.Result, a.Error)
			}
			if n := h.up.calls.Load(); n != 2 {
				t.Fatalf("upstream reached %d times; want 2", n)
			}
		})
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

// TestKeyReusedForATaskSaysSo: a client key reused with the same
// arguments, but asking otherwise for a task, is refused saying so, not
// that the arguments differ.
func TestKeyReusedForATaskSaysSo(t *testing.T) {
	h := newHarness(func(_ context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
		if strings.Contains(string(p), `"task"`) || strings.Contains(string(p), "io.modelcontextprotocol/tasks") {
			return json.RawMessage(fmt.Sprintf(`{"task":{"taskId":"task-%d","status":"working"}}`, n)), nil
		}
		return charged(context.Background(), n, p)
	})
	const (
		args = `"name":"charge_card","arguments":{"card":"4242","amount":100}`
		ext  = `,"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}`
	)
	for _, c := range []struct{ first, then, want string }{
		{`{` + args + `,"task":{},"_meta":{"mcp-idempotent/key":"T1"}}`, `{` + args + `,"_meta":{"mcp-idempotent/key":"T1"}}`,
			"the first call asks for a task (params.task) and this one asks for no task"},
		{`{` + args + `,"_meta":{"mcp-idempotent/key":"T2"}}`, `{` + args + `,"task":{"ttl":1000},"_meta":{"mcp-idempotent/key":"T2"}}`,
			"the first call asks for no task and this one asks for a task (params.task)"},
		{`{` + args + `,"_meta":{"mcp-idempotent/key":"T3"` + ext + `}}`, `{` + args + `,"_meta":{"mcp-idempotent/key":"T3"}}`,
			"the first call declares the tasks extension and this one asks for no task"},
	} {
		h.call(t.Context(), t, c.first).only(t)
		a := h.call(t.Context(), t, c.then).only(t)
		if a.Error == nil || !strings.Contains(string(a.Error), c.want) {
			t.Fatalf("%s after %s got %s %s; want it refused saying %q", c.then, c.first, a.Result, a.Error, c.want)
		}
	}
	if n := h.up.calls.Load(); n != 3 {
		t.Fatalf("upstream reached %d times; want the three first calls only", n)
	}
}
