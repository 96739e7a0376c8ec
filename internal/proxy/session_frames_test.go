package proxy

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

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
// pass-through request with an error. Neither waits for ever, nor does a
// request of the upstream's over the limit.
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
	// A request from the server too large to read is not passed on: the
	// server is answered (TestOversizedRequestFromUpstreamIsAnswered).
	r.upstream.send(t, `{"jsonrpc":"2.0","method":"sampling/createMessage","id":9,"params":{"p":`+big+`}}`)
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"id":9,"error"`) || !strings.Contains(got, "200-byte limit") {
		t.Fatalf("upstream got %s; want an error under id 9, naming the limit", got)
	}
	r.client.send(t, `{"jsonrpc":"2.0","id":3,"method":"ping"}`)
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"id":3`) {
		t.Fatalf("the session did not go on: upstream got %s", got)
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

// TestAnswerGivingTwoIDs: an answer from the upstream that gives "id"
// twice, the first one of the proxy's, answers the proxy's request
// (outcome unknown: readers disagree on which id it has), whole or too
// large to read, rather than reaching the client under the proxy's id
// while the call waits until the session ends.
func TestAnswerGivingTwoIDs(t *testing.T) {
	const limit = 4096
	for _, tt := range []struct{ name, answer string }{
		{"whole", `{"jsonrpc":"2.0","id":"mcp-idempotent:2","id":"zz","result":{"content":[]}}`},
		{"too large", `{"jsonrpc":"2.0","id":"mcp-idempotent:2","id":"zz","result":{"content":[{"type":"text","text":"` + strings.Repeat("x", 2*limit) + `"}]}}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, limit)
			r.startCall(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card"}}`) // as mcp-idempotent:2
			r.upstream.send(t, tt.answer)
			got := r.client.next(t, "client")
			if !strings.Contains(got, `"id":1,`) || !strings.Contains(got, "Outcome unknown:") {
				t.Fatalf("the tools/call got %.300s; want outcome unknown under its own id", got)
			}
			if strings.Contains(got, "mcp-idempotent:2") {
				t.Errorf("client got %.300s, which holds one of the proxy's ids", got)
			}
		})
	}
}

// TestAnswersBeyondTheRules: an answer with "error": null beside its
// result (JSON-RPC 1.0 style) is the result; one with both a result and
// an error, or with an error that is no error object, is malformed, and
// its call's outcome unknown: it says no more of how the call went than
// an answer without a result. None runs again when called again.
func TestAnswersBeyondTheRules(t *testing.T) {
	for _, tt := range []struct {
		name, answer, want string
	}{
		{"error null", `"result":{"content":[{"type":"text","text":"charged"}]},"error":null`, "charged"},
		{"both", `"result":{"content":[{"type":"text","text":"charged"}]},"error":{"code":-32000,"message":"no"}`, "Outcome unknown:"},
		{"error a string", `"error":"boom"`, "Outcome unknown:"},
		{"error code not an integer", `"error":{"code":1.5,"message":"no"}`, "Outcome unknown:"},
		{"error code a string", `"error":{"code":"-32000","message":"no"}`, "Outcome unknown:"},
		{"error empty", `"error":{}`, "Outcome unknown:"},
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

// TestAmbiguousMemberIsInvalidRequest: a message giving a member twice is
// valid JSON but not one message, alone or in a batch: -32600 under a
// null id, and nothing is passed on.
func TestAmbiguousMemberIsInvalidRequest(t *testing.T) {
	r := newRig(t, 0)
	for _, frame := range []string{
		`{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}`,
		`[{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}]`,
	} {
		r.client.send(t, frame)
		if got := r.client.next(t, "client"); !strings.Contains(got, `"id":null,"error":{"code":-32600`) || !strings.Contains(got, "ambiguous member") {
			t.Errorf("%s was answered %s; want -32600 naming the ambiguous member", frame, got)
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
	// Every id in use goes null, not only the first found.
	r.client.send(t, `{"jsonrpc":"2.0","id":8,"method":"ping"}`)
	r.upstream.next(t, "upstream")
	r.client.send(t, `[{"jsonrpc":"2.0","id":6,"method":"ping"},{"jsonrpc":"2.0","id":8,"method":"ping"}]`)
	if got := r.client.next(t, "client"); strings.Contains(got, `"id":6,`) || strings.Contains(got, `"id":8,`) || strings.Count(got, `"id":null,"error"`) != 2 {
		t.Fatalf("a batch reusing ids 6 and 8 got %s; want both errors under a null id", got)
	}
	// Cancelled, a request passed upstream frees its id too.
	r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}`)
	r.upstream.next(t, "upstream") // the cancellation, passed on
	r.client.send(t, `{"jsonrpc":"2.0","id":5,"method":"ping"}`)
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"method":"ping"`) {
		t.Fatalf("the upstream got %s; want the ping, id 5 freed by the cancellation", got)
	}
}

// TestUnreadableRequestIsAnsweredUnderItsID: a request nested past the
// JSON decoder's depth limit, JSON all the same, is answered under its id
// when its first bytes hold it, as one over the size limit is: under a
// null id its client would wait for ever. What is not JSON, a broken
// answer of the client's, or an id a request in flight holds still gets
// the null id.
func TestUnreadableRequestIsAnsweredUnderItsID(t *testing.T) {
	r := newRig(t, 0)
	deep := strings.Repeat("[", 20000) + strings.Repeat("]", 20000)
	r.client.send(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"charge_card","arguments":{"a":`+deep+`}}}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":7,`) || !strings.Contains(got, `"code":-32700`) || !strings.Contains(got, "max depth") {
		t.Fatalf("got %s; want a parse error under id 7 naming the depth", got)
	}
	// JSON that is not JSON is answered under a null id, as JSON-RPC
	// has it for a message not parsed.
	r.client.send(t, `{"jsonrpc":"2.0","id":"a","method":"ping","params":{"x":]}}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":null,`) || !strings.Contains(got, `"code":-32700`) {
		t.Fatalf("got %s; want a parse error under a null id", got)
	}
	r.client.send(t, `{"jsonrpc":"2.0","id":8,"result":{"x":]}}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":null,`) {
		t.Fatalf("a broken answer got %s; want a null id", got)
	}
	r.client.send(t, `{"jsonrpc":"2.0","id":9,"method":"resources/read","params":{"uri":"file:///a"}}`)
	r.upstream.next(t, "upstream")
	r.client.send(t, `{"jsonrpc":"2.0","id":9,"method":"ping","params":{"x":]}}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":null,`) {
		t.Fatalf("a broken request under an id in use got %s; want a null id", got)
	}
}
