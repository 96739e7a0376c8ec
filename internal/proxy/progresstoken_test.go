package proxy

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

// upstreamToken returns the progress token of frame, a request the
// upstream got, as JSON text; "" for none.
func upstreamToken(t *testing.T, frame string) string {
	t.Helper()
	var m struct {
		Params struct {
			Meta struct {
				ProgressToken json.RawMessage `json:"progressToken"`
			} `json:"_meta"`
		}
	}
	if err := json.Unmarshal([]byte(frame), &m); err != nil {
		t.Fatalf("the upstream got %s: %v", frame, err)
	}
	return string(m.Params.Meta.ProgressToken)
}

// progressOn is the upstream's notifications/progress n on token, JSON
// text.
func progressOn(token, n string) string {
	return `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":` + token + `,"progress":` + n + `}}`
}

// TestReusedTokenGetsNoneOfTheCancelledCallsProgress: MCP lets a client
// use a progress token again once the request that had it has ended, as
// a cancelled call has for the client; but the execution goes on
// upstream, and may still tell progress. The upstream never sees one
// token on two requests under way, and the progress of the cancelled
// call never reaches the client as the new request's, whether the new
// one passes through or is recorded.
func TestReusedTokenGetsNoneOfTheCancelledCallsProgress(t *testing.T) {
	for _, again := range []struct{ name, request string }{
		{"passed through", `{"jsonrpc":"2.0","id":9,"method":"resources/read","params":{"uri":"file:///a","_meta":{"progressToken":"p7"}}}`},
		{"recorded", `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"charge_card","arguments":{"n":2},"_meta":{"progressToken":"p7"}}}`},
	} {
		t.Run(again.name, func(t *testing.T) {
			r := newRig(t, 0)
			r.client.send(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"charge_card","arguments":{"n":1},"_meta":{"progressToken":"p7"}}}`)
			r.upstream.next(t, "upstream") // tools/list
			r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[]}}`)
			first := r.upstream.next(t, "upstream")
			r.upstream.send(t, progressOn(upstreamToken(t, first), "1"))
			if got := r.client.next(t, "client"); got != progressOn(`"p7"`, "1") {
				t.Fatalf("the client got %s; want the progress of its call on its own token", got)
			}
			r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`)
			r.client.send(t, again.request)
			second := r.upstream.next(t, "upstream")
			if upstreamToken(t, second) == upstreamToken(t, first) {
				t.Fatalf("the upstream got %s while the cancelled call, %s, runs on: two requests under way on one progress token", second, first)
			}
			r.upstream.send(t, progressOn(upstreamToken(t, first), "2"))
			passedToClient(t, r, "the cancelled call's progress")
			r.upstream.send(t, progressOn(upstreamToken(t, second), "1"))
			if got := r.client.next(t, "client"); got != progressOn(`"p7"`, "1") {
				t.Fatalf("the client got %s; want the progress of its new request on the token", got)
			}
			r.upstream.answerCharged(t, second)
			if got := r.client.next(t, "client"); !strings.Contains(got, `"id":9`) {
				t.Fatalf("the client got %s; want the answer to its new request", got)
			}
		})
	}
}

// TestProgressAfterTheAnswerKeepsItsToken: a task's progress goes on
// past the answer that gave its handle, on the call's token; the
// upstream's progress on the token the proxy gave the call still reaches
// the client on its own.
func TestProgressAfterTheAnswerKeepsItsToken(t *testing.T) {
	r := newRig(t, 0)
	r.client.send(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"charge_card","arguments":{},"task":{"ttl":60000},"_meta":{"progressToken":7}}}`)
	r.upstream.next(t, "upstream") // tools/list
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[]}}`)
	call := r.upstream.next(t, "upstream")
	var m struct{ ID json.RawMessage }
	json.Unmarshal([]byte(call), &m)
	r.upstream.send(t, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"task":{"taskId":"t1","status":"working","createdAt":"2026-01-01T00:00:00Z","ttl":60000}}}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"taskId":"t1"`) {
		t.Fatalf("the client got %s; want the task's handle", got)
	}
	r.upstream.send(t, progressOn(upstreamToken(t, call), "1"))
	if got := r.client.next(t, "client"); got != progressOn("7", "1") {
		t.Fatalf("the client got %s; want the task's progress on the call's token", got)
	}
}

// TestProgressOfACallSentAfterItsCallerLeft: a call whose caller cancels
// before it is sent is sent all the same, for the caller attached to it;
// its progress reaches no one, as it belongs to the caller that left, and
// the token that caller gave may be used again.
func TestProgressOfACallSentAfterItsCallerLeft(t *testing.T) {
	store := &replyLostStore{Store: memstore.New(memstore.Options{}), reserved: make(chan struct{})}
	in := intercept.New(intercept.Options{Store: store, Hasher: fingerprint.NewRandom(), StoreWaits: true})
	r := newRigWith(t, 0, in)
	r.client.send(t, `{"jsonrpc":"2.0","id":"l","method":"tools/list"}`)
	r.upstream.next(t, "upstream")
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"l","result":{"tools":[{"name":"charge_card","inputSchema":{"type":"object"}}]}}`)
	r.client.next(t, "client")
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":1},"_meta":{"progressToken":"p1"}}}`)
	<-store.reserved
	r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`)
	r.client.send(t, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":1}}}`)
	call := r.upstream.next(t, "upstream")
	if upstreamToken(t, call) == `"p1"` {
		t.Fatalf("the upstream got %s; want it on a token of the proxy's", call)
	}
	r.client.send(t, `{"jsonrpc":"2.0","id":3,"method":"ping","params":{"_meta":{"progressToken":"p1"}}}`)
	r.upstream.next(t, "upstream") // the ping
	r.upstream.send(t, progressOn(upstreamToken(t, call), "1"))
	passedToClient(t, r, "the progress of a call whose caller left")
	r.upstream.answerCharged(t, call)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":2,"result"`) || !strings.Contains(got, "charged") {
		t.Fatalf("the attached call got %s; want the answer", got)
	}
}

// TestReservedProgressTokenRefused: the proxy's calls go upstream on
// tokens of its own, its ids, so a request of the client's on such a
// token is refused, as one under such an id is: passed through, its
// progress would be taken for the proxy's call's, and the upstream
// would see one token on two requests. However spelled, alone or in a
// batch; other tokens pass.
func TestReservedProgressTokenRefused(t *testing.T) {
	r := newRig(t, 0)
	r.client.send(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"charge_card","arguments":{},"_meta":{"progressToken":"p7"}}}`)
	r.upstream.next(t, "upstream") // tools/list
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[]}}`)
	call := r.upstream.next(t, "upstream")
	up := upstreamToken(t, call)
	for i, token := range []string{up, strings.Replace(up, "-", `\u002d`, 1)} {
		r.client.send(t, `{"jsonrpc":"2.0","id":`+string(rune('1'+i))+`,"method":"resources/read","params":{"uri":"file:///a","_meta":{"progressToken":`+token+`}}}`)
		var answer struct {
			ID    json.RawMessage
			Error struct {
				Code    int
				Message string
			}
		}
		got := r.client.next(t, "client")
		if err := json.Unmarshal([]byte(got), &answer); err != nil || string(answer.ID) != string(rune('1'+i)) ||
			answer.Error.Code != -32602 || !strings.Contains(answer.Error.Message, "reserved") {
			t.Fatalf("a request on token %s: the client got %s; want -32602 saying the token is reserved", token, got)
		}
	}
	r.client.send(t, `[{"jsonrpc":"2.0","id":5,"method":"ping","params":{"_meta":{"progressToken":`+up+`}}}]`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":5`) || !strings.Contains(got, "reserved") {
		t.Fatalf("a batch on token %s: the client got %s; want it refused, saying the token is reserved", up, got)
	}
	other := `{"jsonrpc":"2.0","id":6,"method":"resources/read","params":{"uri":"file:///a","_meta":{"progressToken":"mcp-idempotent/1"}}}`
	r.client.send(t, other)
	nextIs(t, r.upstream, "upstream", other, "the request on a token of the client's, and nothing before it")
	r.upstream.answerCharged(t, call)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":7`) {
		t.Fatalf("the client got %s; want the call's answer", got)
	}
}

// TestEscapedProgressTokenGoesAsTheProxys: a progress token whose name
// is spelled with an escape is the progress token all the same: it goes
// upstream as the proxy's, and the progress on it comes back on the
// client's.
func TestEscapedProgressTokenGoesAsTheProxys(t *testing.T) {
	r := newRig(t, 0)
	r.client.send(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"charge_card","arguments":{},"_meta":{"progress\u0054oken":"p7"}}}`)
	r.upstream.next(t, "upstream") // tools/list
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[]}}`)
	call := r.upstream.next(t, "upstream")
	if up := upstreamToken(t, call); up == "" || up == `"p7"` {
		t.Fatalf("the upstream got %s; want the call on a token of the proxy's", call)
	}
	r.upstream.send(t, progressOn(upstreamToken(t, call), "1"))
	if got := r.client.next(t, "client"); got != progressOn(`"p7"`, "1") {
		t.Fatalf("the client got %s; want the progress on its token", got)
	}
}
