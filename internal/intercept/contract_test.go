package intercept

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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
	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

// callAs makes one tools/call as actor in session scope.
func (h *harness) callAs(t *testing.T, actor, scope, params string) *answers {
	t.Helper()
	tc, perr := mcp.ParseToolCall(json.RawMessage(params))
	if perr != nil {
		t.Fatalf("mcp.ParseToolCall(%s): %v", params, perr)
	}
	a := newAnswers()
	h.in.Handle(t.Context(), &Request{
		Call: tc, Policy: &h.pol, Schema: &Schema{Defaults: h.defaults, Twins: h.twins}, Origin: &Origin{Actor: actor, Scope: scope, UpstreamID: "stdio:bank"},
		Upstream: h.up, Reply: a,
	})
	return a
}

func keyed(key, args string) string {
	return `{"name":"charge_card","arguments":` + args + `,"_meta":{"mcp-idempotent/key":"` + key + `"}}`
}

func TestClientKeyNamesTheExecution(t *testing.T) {
	h := newHarness(charged)
	first := view(t, h.callAs(t, "alice", "session:1", keyed("order-1", `{"amount":100}`)).only(t))
	// The same key from another session, arguments spelt differently.
	again := view(t, h.callAs(t, "alice", "session:2", keyed("order-1", `{"amount":1e2}`)).only(t))
	if !again.Meta.Replayed || again.Content[0].Text != first.Content[0].Text {
		t.Fatalf("the key's second use got %+v; want the first answer replayed", again)
	}
	// The same key for other arguments: refused, never executed.
	a := h.callAs(t, "alice", "session:1", keyed("order-1", `{"amount":200}`)).only(t)
	e := jsonrpc.DecodeError(a.Error)
	if a.Error == nil || e.Code != jsonrpc.CodeInvalidParams || !strings.Contains(e.Message, `"order-1"`) || !strings.Contains(e.Message, "arguments differ") {
		t.Fatalf("key reused for other arguments got %+v; want -32602 naming the key", a)
	}
	// Another key is another execution, even for the same arguments; so is
	// another actor's use of the same key.
	h.callAs(t, "alice", "session:1", keyed("order-2", `{"amount":100}`)).only(t)
	h.callAs(t, "bob", "session:1", keyed("order-1", `{"amount":100}`)).only(t)
	if n := h.up.calls.Load(); n != 3 {
		t.Fatalf("upstream ran %d times; want 3 (order-1, order-2, bob's order-1)", n)
	}
}

func TestIgnoredArgumentsAndSchemaDefaults(t *testing.T) {
	h := newHarness(charged)
	h.pol.Ignore = []string{"note", "trace.id"}
	h.defaults = map[string]json.RawMessage{"region": json.RawMessage(`"us-east-1"`)}
	for _, args := range []string{
		`{"amount":100}`,
		`{"amount":100,"region":"us-east-1"}`,
		`{"amount":100,"note":"retry #2"}`,
		`{"amount":100,"trace":{"id":"t-9"}}`,
		`{"amount":100,"trace":{}}`,
	} {
		h.callAs(t, "alice", "s", `{"name":"charge_card","arguments":`+args+`}`).only(t)
	}
	if n := h.up.calls.Load(); n != 1 {
		t.Fatalf("upstream ran %d times; ignored members and defaults must not change the action", n)
	}
	h.callAs(t, "alice", "s", `{"name":"charge_card","arguments":{"amount":100,"region":"eu-west-1"}}`).only(t)
	h.callAs(t, "alice", "s", `{"name":"charge_card","arguments":{"amount":100,"trace":{"id":"t-9","span":"x"}}}`).only(t)
	if n := h.up.calls.Load(); n != 3 {
		t.Fatalf("upstream ran %d times; a non-default region and a member beside the ignored one are other actions", n)
	}
	h.pol.Defaults = false
	h.callAs(t, "alice", "s", `{"name":"charge_card","arguments":{"amount":100}}`).only(t) // matches the first
	h.callAs(t, "alice", "s", `{"name":"charge_card","arguments":{"amount":100,"region":"us-east-1"}}`).only(t)
	if n := h.up.calls.Load(); n != 4 {
		t.Fatalf("upstream ran %d times; with defaults off, an explicit default is another action", n)
	}
}

// TestShapedArgumentsAreCheckedFirst: arguments a tool's defaults or
// ignore list reshape are refused as the fingerprint refuses them (one name
// twice, a name that is not UTF-8) before they are read into a map, which
// would keep one of the two members, or make two names alike.
func TestShapedArgumentsAreCheckedFirst(t *testing.T) {
	h := newHarness(charged)
	h.pol.Ignore = []string{"note"}
	h.defaults = map[string]json.RawMessage{"region": json.RawMessage(`"us-east-1"`)}
	for _, args := range []string{
		`{"amount":1,"amount":2}`,
		`{"amount":1,"\u0061mount":2}`,
		"{\"\xff\":1}",
		"{\"\xfe\":1}",
		`{"trace":{"id":1,"id":2}}`,
	} {
		a := h.callAs(t, "alice", "s", `{"name":"charge_card","arguments":`+args+`}`).only(t)
		if e := jsonrpc.DecodeError(a.Error); a.Error == nil || e.Code != jsonrpc.CodeInvalidParams {
			t.Errorf("arguments %s got result %s, error %s; want -32602", args, a.Result, a.Error)
		}
	}
	if n := h.up.calls.Load(); n != 0 {
		t.Fatalf("upstream ran %d times; want none of the calls executed", n)
	}
	if n := len(h.store.Records()); n != 0 {
		t.Fatalf("%d records; want none", n)
	}
}

// TestNoReadingOtherwise: a call that an upstream matching names without
// regard to case (Go's encoding/json) would read otherwise than the proxy
// is refused, never sent. In params ("Name" beside "name" runs
// charge_card upstream while the proxy saw a read-only tool) and in the
// _meta members the proxy reads, mcp.ParseToolCall refuses it; an arguments
// member that the policy drops or fills in, spelled in another case, is
// read upstream as the member the policy names, and the call is refused.
func TestNoReadingOtherwise(t *testing.T) {
	for _, params := range []string{
		`{"name":"balance","Name":"charge_card","arguments":{}}`,
		`{"NAME":"charge_card","arguments":{}}`,
		`{"name":"charge_card","name":"balance","arguments":{}}`,
		`{"name":"charge_card","arguments":{},"Arguments":{"amount":1}}`,
		`{"name":"charge_card","arguments":{},"_meta":{},"_Meta":{"mcp-idempotent/key":"k"}}`,
		`{"_meta":{"a":1},"name":"charge_card","_meta":{"b":2}}`,
		`{"_meta":{"a":1},"name":"charge_card","_meta":null}`,
		`{"name":"charge_card","arguments":{},"task":{},"Task":{}}`,
		`{"name":"charge_card","arguments":{},"requestState":"a","RequestState":"b"}`,
		`{"name":"charge_card","arguments":{},"inputResponses":{},"inputresponses":{}}`,
		`{"name":"charge_card","arguments":{},"_meta":{"mcp-idempotent/key":"a","mcp-idempotent/key":"b"}}`,
		`{"name":"charge_card","arguments":{},"_meta":{"idempotencyKey":"a","IdempotencyKey":"b"}}`,
		`{"name":"charge_card","arguments":{},"_meta":{"mcp-idempotent/deadline_ms":5,"mcp-idempotent/deadline_ms":9}}`,
		`{"name":"charge_card","arguments":{},"_meta":{"progressToken":"first","progressToken":"last"}}`,
		`{"name":"charge_card","arguments":{},"_meta":{"progressToken":1,"ProgressToken":2}}`,
	} {
		if _, err := mcp.ParseToolCall(json.RawMessage(params)); err == nil || err.Code != jsonrpc.CodeInvalidParams || !strings.Contains(err.Message, "ambiguous") {
			t.Errorf("mcp.ParseToolCall(%s) = %v; want -32602 saying the member is ambiguous", params, err)
		}
	}

	h := newHarness(charged)
	h.pol.Ignore = []string{"note", "trace.id"}
	h.defaults = map[string]json.RawMessage{"region": json.RawMessage(`"us-east-1"`)}
	for _, args := range []string{
		`{"amount":1,"Note":"x"}`,
		`{"amount":1,"REGION":"eu-west-1"}`,
		`{"amount":1,"trace":{"ID":"t"}}`,
	} {
		a := h.callAs(t, "alice", "s", `{"name":"charge_card","arguments":`+args+`}`).only(t)
		if e := jsonrpc.DecodeError(a.Error); a.Error == nil || e.Code != jsonrpc.CodeInvalidParams {
			t.Errorf("arguments %s got result %s, error %s; want -32602", args, a.Result, a.Error)
		}
	}
	if n := h.up.calls.Load(); n != 0 {
		t.Fatalf("upstream ran %d times; want none of the calls executed", n)
	}
}

// TestSchemaCaseTwins: a schema that declares two members differing only
// in case, each with a default, is one a server reads apart (Go's
// encoding/json prefers the exact name). Its defaults are filled in, and
// neither a call that leaves both out nor one that gives both is refused
// as holding a twin of a member the policy fills in.
func TestSchemaCaseTwins(t *testing.T) {
	h := newHarness(charged)
	h.defaults = map[string]json.RawMessage{"mode": json.RawMessage(`"a"`), "Mode": json.RawMessage(`"b"`)}
	h.twins = mcp.SchemaCaseTwins(json.RawMessage(`{"properties":{"mode":{"default":"a"},"Mode":{"default":"b"}}}`), nil)
	for _, args := range []string{`{}`, `{"mode":"a"}`, `{"Mode":"b"}`, `{"mode":"a","Mode":"b"}`} {
		a := h.callAs(t, "alice", "s", `{"name":"charge_card","arguments":`+args+`}`).only(t)
		if a.Error != nil {
			t.Fatalf("arguments %s got error %s; want a result", args, a.Error)
		}
	}
	if n := h.up.calls.Load(); n != 1 {
		t.Fatalf("upstream ran %d times; want 1: every call spells the defaults", n)
	}
	h.callAs(t, "alice", "s", `{"name":"charge_card","arguments":{"Mode":"a"}}`).only(t)
	if n := h.up.calls.Load(); n != 2 {
		t.Fatalf("upstream ran %d times; want 2: Mode a is another action", n)
	}
	// A twin the schema does not declare is still refused.
	a := h.callAs(t, "alice", "s", `{"name":"charge_card","arguments":{"MODE":"a"}}`).only(t)
	if e := jsonrpc.DecodeError(a.Error); a.Error == nil || e.Code != jsonrpc.CodeInvalidParams {
		t.Fatalf("MODE got result %s, error %s; want -32602", a.Result, a.Error)
	}
}

func TestScopes(t *testing.T) {
	for _, tt := range []struct {
		scope policy.Scope
		calls [][2]string // actor, session
		want  int32
	}{
		{policy.ScopeSession, [][2]string{{"alice", "s1"}, {"alice", "s2"}, {"alice", "s1"}}, 2},
		{policy.ScopeActor, [][2]string{{"alice", "s1"}, {"alice", "s2"}, {"bob", "s1"}}, 2},
		{policy.ScopeGlobal, [][2]string{{"alice", "s1"}, {"bob", "s2"}, {"carol", "s3"}}, 1},
	} {
		h := newHarness(charged)
		h.pol.Scope = tt.scope
		for _, c := range tt.calls {
			h.callAs(t, c[0], c[1], chargeCall).only(t)
		}
		if n := h.up.calls.Load(); n != tt.want {
			t.Errorf("scope %s: upstream ran %d times; want %d", tt.scope, n, tt.want)
		}
	}
}

func TestForwardKey(t *testing.T) {
	var sent []string
	h := newHarness(func(_ context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
		sent = append(sent, string(p))
		return charged(context.Background(), n, p)
	})
	view(t, h.call(t.Context(), t, `{"name":"charge_card","arguments":{},"_meta":{"progressToken":"p"}}`).only(t))
	rec := h.onlyRecord(t)
	want := `{"name":"charge_card","arguments":{},"_meta":{"progressToken":"p","mcp-idempotent/execution-id":"` + rec.ID + `"}}`
	if sent[0] != want {
		t.Fatalf("upstream got %s; want %s", sent[0], want)
	}
	h.pol.ForwardKey = false
	h.call(t.Context(), t, `{"name":"charge_card","arguments":{"n":2}}`).only(t)
	if sent[1] != `{"name":"charge_card","arguments":{"n":2}}` {
		t.Fatalf("with forward_key off, upstream got %s; want the params as sent", sent[1])
	}
}

// TestForwardKeyOffDropsAClientsExecutionID: with forward_key off, an
// execution id a client wrote in the call's _meta does not go upstream,
// where it would be taken for the proxy's (and, over HTTP, sent as the
// Idempotency-Key): two different calls under one such id would be one
// to a server that dedupes on it.
func TestForwardKeyOffDropsAClientsExecutionID(t *testing.T) {
	var sent []string
	h := newHarness(func(_ context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
		sent = append(sent, string(p))
		return charged(context.Background(), n, p)
	})
	h.pol.ForwardKey = false
	h.call(t.Context(), t, `{"name":"charge_card","arguments":{"n":1},"_meta":{"mcp-idempotent/execution-id":"exe_chosen","progressToken":"p"}}`).only(t)
	h.call(t.Context(), t, `{"name":"charge_card","arguments":{"n":2},"_meta":{"mcp-idempotent/execution-id":"exe_chosen"}}`).only(t)
	want := []string{
		`{"name":"charge_card","arguments":{"n":1},"_meta":{"progressToken":"p"}}`,
		`{"name":"charge_card","arguments":{"n":2},"_meta":{}}`,
	}
	if !slices.Equal(sent, want) {
		t.Fatalf("with forward_key off, upstream got\n%s\nwant\n%s", strings.Join(sent, "\n"), strings.Join(want, "\n"))
	}
}

// TestClientsEscapedExecutionID: the proxy's member spelled with escapes
// is the same member to every reader, and is dropped (forward_key off)
// or replaced by the proxy's (on), never sent beside it.
func TestClientsEscapedExecutionID(t *testing.T) {
	var sent []string
	h := newHarness(func(_ context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
		sent = append(sent, string(p))
		return charged(context.Background(), n, p)
	})
	const meta = `"_meta":{"mcp-idempotent\/execution-id":"exe_a","\u006dcp-idempotent/execution-id":"exe_b","p":1}`
	h.pol.ForwardKey = false
	h.call(t.Context(), t, `{"name":"charge_card","arguments":{"n":1},`+meta+`}`).only(t)
	h.pol.ForwardKey = true
	h.call(t.Context(), t, `{"name":"charge_card","arguments":{"n":2},`+meta+`}`).only(t)
	want0 := `{"name":"charge_card","arguments":{"n":1},"_meta":{"p":1}}`
	want1 := `{"name":"charge_card","arguments":{"n":2},"_meta":{"p":1,"mcp-idempotent/execution-id":"exe_`
	if len(sent) != 2 || sent[0] != want0 || !strings.HasPrefix(sent[1], want1) || strings.Count(sent[1], "execution-id") != 1 {
		t.Fatalf("upstream got\n%s\nwant\n%s\n%s...", strings.Join(sent, "\n"), want0, want1)
	}
}

// dies answers the first dispatch as an upstream that died after the side
// effect, and then behaves as respond.
func dies(respond func(context.Context, int, json.RawMessage) (json.RawMessage, error)) func(context.Context, int, json.RawMessage) (json.RawMessage, error) {
	return func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
		if n == 1 {
			return nil, errors.New("the upstream exited before answering")
		}
		return respond(ctx, n, p)
	}
}

func TestOnUnknownBlock(t *testing.T) {
	h := newHarness(dies(charged))
	for i := range 3 {
		if v := view(t, h.call(t.Context(), t, chargeCall).only(t)); !strings.HasPrefix(v.Content[0].Text, "Outcome unknown:") {
			t.Fatalf("call %d got %+v; want outcome unknown", i+1, v)
		}
	}
	if n := h.up.calls.Load(); n != 1 {
		t.Fatalf("upstream reached %d times; block never re-sends", n)
	}
}

func TestOnUnknownRetry(t *testing.T) {
	var ids []string
	h := newHarness(dies(func(_ context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
		var params struct {
			Meta map[string]string `json:"_meta"`
		}
		json.Unmarshal(p, &params)
		ids = append(ids, params.Meta[mcp.MetaExecutionID])
		return charged(context.Background(), n, p)
	}))
	h.pol.OnUnknown = policy.Retry
	first := view(t, h.call(t.Context(), t, chargeCall).only(t))
	if !strings.HasPrefix(first.Content[0].Text, "Outcome unknown:") {
		t.Fatalf("first call got %+v; want outcome unknown", first)
	}
	second := view(t, h.call(t.Context(), t, chargeCall).only(t))
	if second.Content[0].Text != "charge #2" || second.Meta.Replayed || second.Meta.Execution.ID != first.Meta.Execution.ID {
		t.Fatalf("the call after an unknown outcome got %+v; want the re-dispatch's answer, naming the first execution, not marked replayed", second)
	}
	h.in.Wait(t.Context()) // delivery is recorded just after the answer is written
	rec := h.onlyRecord(t)
	if rec.Attempts != 2 || rec.State != record.Delivered || len(ids) != 1 || ids[0] != rec.ID || rec.ID != first.Meta.Execution.ID {
		t.Fatalf("record %s attempts=%d state=%s, re-dispatch carried %v; want one execution, two attempts, the same id", rec.ID, rec.Attempts, rec.State, ids)
	}
	if v := view(t, h.call(t.Context(), t, chargeCall).only(t)); !v.Meta.Replayed || v.Content[0].Text != "charge #2" {
		t.Fatalf("third call got %+v; want the replay", v)
	}
}

func TestOnUnknownRetriesOnce(t *testing.T) {
	h := newHarness(func(context.Context, int, json.RawMessage) (json.RawMessage, error) {
		return nil, errors.New("the upstream exited before answering")
	})
	h.pol.OnUnknown = policy.Retry
	for range 4 {
		h.call(t.Context(), t, chargeCall).only(t)
	}
	if n := h.up.calls.Load(); n != 2 {
		t.Fatalf("upstream reached %d times; on_unknown retry re-sends once", n)
	}
}

func TestOnUnknownRecover(t *testing.T) {
	for _, tt := range []struct {
		name       string
		status     string // the status tool's result; "" means it fails
		wantText   string
		wantCalls  int32 // charge_card dispatches
		wantState  record.State
		wantRecord string
		rule       func(*policy.RecoverRule)
	}{
		{"done", `{"content":[{"type":"text","text":"deployed"}],"structuredContent":{"status":"succeeded"}}`, "deployed", 1, record.Delivered, "completed by the status result", nil},
		{"not done", `{"content":[{"type":"text","text":"no such deploy"}],"structuredContent":{"status":"not_found"}}`, "charge #2", 2, record.Delivered, "re-dispatched", nil},
		{"no answer", "", "Outcome unknown:", 1, record.Unknown, "left unknown", nil},
		// A job still running is not one that never happened: sending it
		// again would do it twice.
		{"still running", `{"content":[{"type":"text","text":"deploying"}],"structuredContent":{"status":"running"}}`, "Outcome unknown:", 1, record.Unknown, "left unknown", nil},
		{"says nothing structured", `{"content":[{"type":"text","text":"ok"}]}`, "Outcome unknown:", 1, record.Unknown, "left unknown", nil},
		{"not done, the rule's own values", `{"content":[{"type":"text","text":"?"}],"structuredContent":{"job":{"state":"absent"}}}`, "charge #2", 2, record.Delivered, "re-dispatched",
			func(r *policy.RecoverRule) { r.DonePath, r.NotDoneValues = "job.state", []string{`"absent"`} }},
		{"the rule's own values replace the defaults", `{"content":[{"type":"text","text":"?"}],"structuredContent":{"status":"not_found"}}`, "Outcome unknown:", 1, record.Unknown, "left unknown",
			func(r *policy.RecoverRule) { r.NotDoneValues = []string{`"absent"`} }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var charges, checks int32
			var checkedID string
			h := newHarness(func(_ context.Context, _ int, p json.RawMessage) (json.RawMessage, error) {
				var params struct {
					Name      string            `json:"name"`
					Arguments map[string]string `json:"arguments"`
				}
				json.Unmarshal(p, &params)
				if params.Name == "get_status" {
					checks++
					checkedID = params.Arguments["execution_id"]
					if tt.status == "" {
						return nil, &jsonrpc.Error{Code: -32603, Message: "status unavailable"}
					}
					return json.RawMessage(tt.status), nil
				}
				charges++
				if charges == 1 {
					return nil, errors.New("the upstream exited before answering")
				}
				return json.RawMessage(fmt.Sprintf(`{"content":[{"type":"text","text":"charge #%d"}]}`, charges)), nil
			})
			h.pol.OnUnknown = policy.Recover
			h.pol.Recover = &policy.RecoverRule{Tool: "get_status", Arguments: json.RawMessage(`{"execution_id":"{{execution_id}}"}`)}
			if tt.rule != nil {
				tt.rule(h.pol.Recover)
			}
			h.call(t.Context(), t, chargeCall).only(t)
			a := h.call(t.Context(), t, chargeCall).only(t)
			v := view(t, a)
			h.in.Wait(t.Context()) // delivery is recorded just after the answer is written
			rec := h.onlyRecord(t)
			if !strings.HasPrefix(v.Content[0].Text, tt.wantText) || charges != tt.wantCalls || rec.State != tt.wantState {
				t.Fatalf("got %q, %d dispatches, record %s; want %q, %d, %s (%s)", v.Content[0].Text, charges, rec.State, tt.wantText, tt.wantCalls, tt.wantState, tt.wantRecord)
			}
			if checks != 1 || checkedID != rec.ID {
				t.Fatalf("status tool called %d times with execution_id %q; want once with %s", checks, checkedID, rec.ID)
			}
		})
	}
}

// TestConcurrentRecoversRedispatchOnce: two calls find the same unknown
// execution, and both status checks say "not done". Only one of them may
// re-dispatch it: the claim is conditional on the record still being
// unknown, so the other attaches to that re-dispatch.
func TestConcurrentRecoversRedispatchOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var charges atomic.Int32
		hold := make(chan struct{})       // holds both status checks
		holdCharge := make(chan struct{}) // holds the re-dispatch
		h := newHarness(func(_ context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
			var params struct {
				Name string `json:"name"`
			}
			json.Unmarshal(p, &params)
			if params.Name == "get_status" {
				<-hold
				return json.RawMessage(`{"content":[{"type":"text","text":"no"}],"structuredContent":{"status":"not_found"}}`), nil
			}
			if charges.Add(1) == 1 {
				return nil, errors.New("the upstream exited before answering")
			}
			<-holdCharge
			return charged(context.Background(), n, p)
		})
		h.pol.OnUnknown = policy.Recover
		h.pol.Recover = &policy.RecoverRule{Tool: "get_status", Arguments: json.RawMessage(`{"execution_id":"{{execution_id}}"}`)}
		h.call(t.Context(), t, chargeCall).only(t) // outcome unknown
		a := h.call(t.Context(), t, chargeCall)
		b := h.call(t.Context(), t, chargeCall)
		synctest.Wait() // both status checks are under way
		close(hold)
		synctest.Wait() // both answered; the claims are decided
		close(holdCharge)
		a.only(t)
		b.only(t)
		h.in.Wait(t.Context())
		if n := charges.Load(); n != 2 {
			t.Fatalf("charge_card was sent %d times; want 2 (the first, and one re-dispatch)", n)
		}
	})
}

// TestHungStatusToolWithinTheAttachWindow: a status tool that never
// answers holds the caller no longer than its attach window, even where
// the call's deadline is later; the outcome stays unknown.
func TestHungStatusToolWithinTheAttachWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hung := make(chan struct{})
		defer close(hung)
		h := newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
			if n == 1 {
				return nil, errors.New("the upstream exited before answering")
			}
			<-hung // the status tool does not answer while the test runs
			return nil, errors.New("gone")
		})
		h.pol.OnUnknown = policy.Recover
		h.pol.Recover = &policy.RecoverRule{Tool: "get_status"}
		h.pol.AttachWindow = 2 * time.Second
		h.call(t.Context(), t, chargeCall).only(t) // outcome unknown
		start := time.Now()
		v := view(t, h.call(t.Context(), t, chargeCall).only(t))
		if !strings.HasPrefix(v.Content[0].Text, "Outcome unknown:") || time.Since(start) != 2*time.Second {
			t.Fatalf("got %+v after %v; want outcome unknown after the 2s attach window", v, time.Since(start))
		}
	})
}

// TestKeyReuseIsRefusedWhateverTheFirstCallBecame: a client key reused
// with other arguments is refused, never executed, also when the key's
// first execution failed or is one a new call would replace (an idempotent
// tool's completed call, a delivered call under replay: undelivered).
func TestKeyReuseIsRefusedWhateverTheFirstCallBecame(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(h *harness)
		fail bool
	}{
		{"idempotent, completed", func(h *harness) { h.pol.Class = policy.Idempotent }, false},
		{"replay undelivered, delivered", func(h *harness) { h.pol.Replay = policy.ReplayUndelivered }, false},
		{"failed", func(h *harness) {}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(func(ctx context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
				if tc.fail && n == 1 {
					return nil, retry.NotSent(errors.New("refused"))
				}
				return charged(ctx, n, p)
			})
			tc.set(h)
			h.callAs(t, "alice", "s", keyed("order-1", `{"amount":100}`)).only(t)
			h.in.Wait(t.Context())
			a := h.callAs(t, "alice", "s", keyed("order-1", `{"amount":999}`)).only(t)
			if e := jsonrpc.DecodeError(a.Error); a.Error == nil || e.Code != jsonrpc.CodeInvalidParams {
				t.Fatalf("key order-1 reused for other arguments got %s %s; want -32602, not run", a.Result, a.Error)
			}
			if n := h.up.calls.Load(); n != 1 {
				t.Fatalf("the upstream saw %d calls; want 1", n)
			}
		})
	}
}

// TestClientKeysAreTheActorsOwnOnAGlobalTool: a global tool shares
// executions across actors, but not client keys: bob's key k is his own,
// whatever alice did under hers.
func TestClientKeysAreTheActorsOwnOnAGlobalTool(t *testing.T) {
	h := newHarness(charged)
	h.pol.Scope = policy.ScopeGlobal
	h.callAs(t, "alice", "s1", keyed("k", `{"amount":100}`)).only(t)
	if a := h.callAs(t, "bob", "s2", keyed("k", `{"amount":5}`)).only(t); a.Error != nil {
		t.Fatalf("bob's key k was refused because alice used hers: %s", a.Error)
	}
}

// TestUpstreamProxyNotKnowingIsNoCompletion: an upstream that is another
// mcp-idempotent may answer that it does not know the outcome, or that the
// execution is still in progress. That is no completion to replay: the
// record is unknown, the first caller gets the upstream's answer as it
// came, and a retry goes by on_unknown.
func TestUpstreamProxyNotKnowingIsNoCompletion(t *testing.T) {
	for _, outcome := range []string{"unknown", "in_progress"} {
		t.Run(outcome, func(t *testing.T) {
			said := fmt.Sprintf(`{"content":[{"type":"text","text":"not known"}],"isError":true,"_meta":{"mcp-idempotent/outcome":%q}}`, outcome)
			h := newHarness(func(_ context.Context, n int, p json.RawMessage) (json.RawMessage, error) {
				if n == 1 {
					return json.RawMessage(said), nil
				}
				return charged(context.Background(), n, p)
			})
			h.pol.OnUnknown = policy.Retry
			if a := h.call(t.Context(), t, chargeCall).only(t); string(a.Result) != said {
				t.Fatalf("the first caller got %s; want the upstream's answer as it came", a.Result)
			}
			if rec := h.onlyRecord(t); rec.State != record.Unknown {
				t.Fatalf("the record is %s; want unknown", rec.State)
			}
			if v := view(t, h.call(t.Context(), t, chargeCall).only(t)); v.Content[0].Text != "charge #2" || v.Meta.Replayed {
				t.Fatalf("the retry got %+v; want it sent again under on_unknown: retry", v)
			}
		})
	}
}

// TestRecoverAfterARedispatch: an execution sent again after its status
// said not done, whose second outcome is unknown too, is still settled by
// a status that says done; a status that says not done does not send it a
// third time.
func TestRecoverAfterARedispatch(t *testing.T) {
	status := `{"content":[{"type":"text","text":"?"}],"structuredContent":{"status":"not_found"}}`
	var charges int
	h := newHarness(func(_ context.Context, _ int, p json.RawMessage) (json.RawMessage, error) {
		if strings.Contains(string(p), `"get_status"`) {
			return json.RawMessage(status), nil
		}
		charges++
		return nil, errors.New("the upstream exited before answering")
	})
	h.pol.OnUnknown = policy.Recover
	h.pol.Recover = &policy.RecoverRule{Tool: "get_status", Arguments: json.RawMessage(`{"execution_id":"{{execution_id}}"}`)}
	h.call(t.Context(), t, chargeCall).only(t) // unknown
	h.call(t.Context(), t, chargeCall).only(t) // not found: sent again, unknown again
	h.in.Wait(t.Context())
	h.call(t.Context(), t, chargeCall).only(t) // not found again: not sent a third time
	h.in.Wait(t.Context())
	if charges != 2 {
		t.Fatalf("charge_card was sent %d times; want 2", charges)
	}
	status = `{"content":[{"type":"text","text":"charged after all"}],"structuredContent":{"status":"done"}}`
	if v := view(t, h.call(t.Context(), t, chargeCall).only(t)); v.Content[0].Text != "charged after all" {
		t.Fatalf("after the status says done, got %+v; want the execution completed with it", v)
	}
	h.in.Wait(t.Context())
	if rec := h.onlyRecord(t); rec.State != record.Delivered || rec.Attempts != 2 {
		t.Fatalf("record %s, %d attempts; want delivered after 2", rec.State, rec.Attempts)
	}
}

// lostAnswers is a store whose reservations, while lose is set, are made
// and then answered with an error, as a store's answer that timed out
// after the write landed.
type lostAnswers struct {
	record.Store
	lose atomic.Bool
}

func (s *lostAnswers) Reserve(ctx context.Context, r *record.Record, opts record.ReserveOptions) (*record.Record, bool, error) {
	rec, won, err := s.Store.Reserve(ctx, r, opts)
	if s.lose.Load() {
		return nil, false, errors.New("context deadline exceeded")
	}
	return rec, won, err
}

// TestLostReservationIsSettled: a reservation whose answer the store lost
// is failed by the process that asked for it as soon as the store
// answers, not left in flight under a live owner until its lease lapses:
// a retry runs at once, and so does a call after the lease renewal that
// settled it.
func TestLostReservationIsSettled(t *testing.T) {
	for _, retry := range []bool{true, false} {
		for _, account := range []bool{false, true} {
			h := newHarness(charged)
			store := &lostAnswers{Store: h.store}
			opts := Options{Store: store, Hasher: fingerprint.NewRandom()}
			if account {
				// With an account to wait for, the reservation is not
				// dispatched in the same step: it stays accepted.
				opts.Accounts = map[string]policy.Account{"acct": {Rate: 100, Burst: 10}}
				h.pol.Retry = &policy.RetryRule{MaxAttempts: 1, Account: "acct"}
			}
			h.in = New(opts)
			store.lose.Store(true)
			if a := h.call(t.Context(), t, chargeCall).only(t); a.Error == nil || !strings.Contains(string(a.Error), "store is unavailable") {
				t.Fatalf("account %v: first call got %+v; want the store's refusal", account, a)
			}
			store.lose.Store(false)
			if !retry {
				h.in.settleAbandonedAll(t.Context()) // as at a lease renewal
				if rec := h.onlyRecord(t); rec.State != record.Failed || rec.History[len(rec.History)-1].Note != lostNote {
					t.Fatalf("account %v: after the renewal the lost reservation is %s; want failed", account, rec.State)
				}
			}
			if v := view(t, h.call(t.Context(), t, chargeCall).only(t)); v.Content[0].Text != "charge #1" {
				t.Fatalf("retry %v, account %v: the next call got %+v; want the first charge, run now", retry, account, v)
			}
			recs := h.store.Records()
			if len(recs) != 2 {
				t.Fatalf("retry %v, account %v: %d records; want the lost one and the run", retry, account, len(recs))
			}
			for _, rec := range recs {
				if rec.State == record.Failed && rec.History[len(rec.History)-1].Note != lostNote {
					t.Errorf("retry %v, account %v: failed record's note %q; want %q", retry, account, rec.History[len(rec.History)-1].Note, lostNote)
				}
			}
		}
	}
}

// heldReserves is a store whose reservations wait for release, after
// saying on entered that one began.
type heldReserves struct {
	record.Store
	entered, release chan struct{}
}

func (s *heldReserves) Reserve(ctx context.Context, r *record.Record, opts record.ReserveOptions) (*record.Record, bool, error) {
	s.entered <- struct{}{}
	<-s.release
	return s.Store.Reserve(ctx, r, opts)
}

// TestLargeCallsLeaveTheCaller: a call whose params are large is read,
// fingerprinted and reserved on a goroutine of its own, even with a store
// in memory: the caller, a session's reading goroutine, goes on at once.
func TestLargeCallsLeaveTheCaller(t *testing.T) {
	h := newHarness(charged)
	store := &heldReserves{Store: h.store, entered: make(chan struct{}, 1), release: make(chan struct{})}
	h.in = New(Options{Store: store, Hasher: fingerprint.NewRandom()})
	req, a := h.request(t, `{"name":"charge_card","arguments":{"note":"`+strings.Repeat("n", inlineParams)+`"}}`)
	returned := make(chan struct{})
	go func() {
		h.in.Handle(t.Context(), req)
		close(returned)
	}()
	<-store.entered
	select {
	case <-returned:
	case <-time.After(10 * time.Second): // bounds a hang only
		close(store.release)
		t.Fatal("Handle waited for the reservation of a large call")
	}
	close(store.release)
	if v := view(t, a.only(t)); v.Content[0].Text != "charge #1" {
		t.Fatalf("the large call got %+v; want it run", v)
	}
}

// TestKeyFreeOnceItsExecutionExpired: a client key is kept as long as its
// execution. Reused for other arguments within the retention, it is
// refused; once the execution expired, the call runs as a new one,
// whatever the first became.
func TestKeyFreeOnceItsExecutionExpired(t *testing.T) {
	for _, first := range []string{"completed", "unknown"} {
		t.Run(first, func(t *testing.T) {
			var mu sync.Mutex
			now := time.Now()
			clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
			respond := charged
			if first == "unknown" {
				respond = dies(charged)
			}
			h := newHarness(respond)
			h.in = New(Options{Store: memstore.New(memstore.Options{Now: clock}), Hasher: fingerprint.NewRandom(), Now: clock})
			h.pol.Retention = time.Hour
			h.callAs(t, "alice", "s", keyed("order-1", `{"amount":100}`)).only(t)
			h.in.Wait(t.Context())
			if a := h.callAs(t, "alice", "s", keyed("order-1", `{"amount":999}`)).only(t); a.Error == nil {
				t.Fatalf("key reused within the retention got %s; want -32602", a.Result)
			}
			mu.Lock()
			now = now.Add(h.pol.Retention + time.Second)
			mu.Unlock()
			if a := h.callAs(t, "alice", "s", keyed("order-1", `{"amount":999}`)).only(t); a.Error != nil || view(t, a).Meta.Replayed {
				t.Fatalf("key reused once its execution expired got %s %s; want a new execution", a.Result, a.Error)
			}
			if n := h.up.calls.Load(); n != 2 {
				t.Fatalf("the upstream saw %d calls; want 2", n)
			}
		})
	}
}
