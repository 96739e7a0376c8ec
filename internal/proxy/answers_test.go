package proxy

import (
	"strings"
	"testing"
)

// TestAnswersAServerCannotRead: a message from the client with an id and
// no method, which a server's decoder could not read (no "jsonrpc":"2.0",
// neither or both of a result and an error, a malformed error, a bad id),
// is not passed on: a server may end the session on it. One with neither
// a result nor an error is answered as an invalid request; an answer is
// dropped, as no answer goes to an answer. A valid answer goes on.
func TestAnswersAServerCannotRead(t *testing.T) {
	r := newRig(t, 0)
	for _, tt := range []struct{ frame, want string }{
		{`{"jsonrpc":"2*0","id":2,"metod":"ools/call"}`, `{"jsonrpc":"2.0","id":2,"error":{"code":-32600,"message":"mcp-idempotent: not a JSON-RPC message: \"jsonrpc\" must be \"2.0\""}}`},
		{`{"jsonrpc":"2.0","id":3,"metod":"tools/call"}`, `"id":3,"error":{"code":-32600,"message":"mcp-idempotent: not a JSON-RPC message: it has an id, but neither a method, a result nor an error"}`},
		{`{"jsonrpc":"2.0","id":{}}`, `"id":null,"error":{"code":-32600`},
	} {
		r.client.send(t, tt.frame)
		if got := r.client.next(t, "client"); !strings.Contains(got, tt.want) {
			t.Errorf("%s was answered %s; want %s", tt.frame, got, tt.want)
		}
	}
	for _, dropped := range []string{
		`{"jsonrpc":"2.","id":"s1","result":{}}`,
		`{"id":"s1","result":{}}`,
		`{"jsonrpc":"2.0","id":"s1","result":{},"error":{"code":1,"message":"no"}}`,
		`{"jsonrpc":"2.0","id":"s1","error":{"code":"1","message":"no"}}`,
		`{"jsonrpc":"2.0","id":"s1","error":"no"}`,
		`{"jsonrpc":"2.0","id":[1],"result":{}}`,
	} {
		r.client.send(t, dropped)
	}
	// In a batch, the bad answers are dropped and the rest goes on.
	r.client.send(t, `[{"jsonrpc":"2.","id":"s1","result":{}},{"jsonrpc":"2.0","id":"s2","result":{}},{"jsonrpc":"2.0","id":"s3","error":"bad"}]`)
	if got, want := r.upstream.next(t, "upstream"), `[{"jsonrpc":"2.0","id":"s2","result":{}}]`; got != want {
		t.Fatalf("the upstream got %s; want %s, the batch's one valid answer", got, want)
	}
	for _, valid := range []string{
		`{"jsonrpc":"2.0","id":"s4","result":{}}`,
		`{"jsonrpc":"2.0","id":"s5","error":{"code":0,"message":""}}`,
		`{"jsonrpc":"2.0","id":6,"error":{"code":-32001,"message":"no","data":{"why":1}}}`,
	} {
		r.client.send(t, valid)
		if got := r.upstream.next(t, "upstream"); got != valid {
			t.Fatalf("the upstream got %s; want %s, a valid answer", got, valid)
		}
	}
}

// TestLateAnswerIsNotANewCallsAnswer: a request passed upstream and
// cancelled frees its id (TestIDInUseIsRefused reuses it). The upstream
// may still answer the cancelled request; that answer must not reach the
// client as the answer to the tools/call now under the id, which went
// upstream under an id of the proxy's and has not been answered.
func TestLateAnswerIsNotANewCallsAnswer(t *testing.T) {
	r := newRig(t, 0)
	r.client.send(t, `{"jsonrpc":"2.0","id":5,"method":"resources/read","params":{"uri":"file:///a"}}`)
	r.upstream.next(t, "upstream")
	r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}`)
	r.upstream.next(t, "upstream") // the cancellation
	call := r.startCall(t, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"charge_card"}}`)
	// The upstream had answered the read before it saw the cancellation.
	r.upstream.send(t, `{"jsonrpc":"2.0","id":5,"result":{"contents":[]}}`)
	r.upstream.answerCharged(t, call)
	if got := r.client.next(t, "client"); !strings.Contains(got, "charged") {
		t.Fatalf("the client got %s under id 5 while its tools/call 5 was under way; want only the call's own answer", got)
	}
}

// TestAnswerUnderAnIDTheUpstreamNeverGot: a tools/call the proxy
// handles goes upstream under an id of the proxy's; an answer from the
// upstream under the client's id 7 answers nothing the upstream was
// asked, and must not reach the client as the call's answer.
func TestAnswerUnderAnIDTheUpstreamNeverGot(t *testing.T) {
	r := newRig(t, 0)
	call := r.startCall(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"charge_card"}}`)
	r.upstream.send(t, `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"not charged"}]}}`)
	r.upstream.answerCharged(t, call)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"text":"charged"`) {
		t.Fatalf("the client got %s under id 7; want only the call's own answer", got)
	}
}

// TestRefusalUnderAnIDInUse: a request under an id that a call
// still being answered holds is answered under a null id (errors.md:
// "the first request's answer still comes"), whatever else is wrong with
// it: an error under id 5 would be taken for the answer to call 5.
func TestRefusalUnderAnIDInUse(t *testing.T) {
	r := newRig(t, 0)
	call := r.startCall(t, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"charge_card"}}`)
	for _, frame := range []string{
		`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":""}}`,
		`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"charge_card","arguments":[]}}`,
		`{"jsonrpc":"1.0","id":5,"method":"ping"}`,
	} {
		r.client.send(t, frame)
		if got := r.client.next(t, "client"); !strings.Contains(got, `"id":null,"error"`) {
			t.Errorf("%s was answered %s while call 5 is under way; want its refusal under a null id", frame, got)
		}
	}
	r.upstream.answerCharged(t, call)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":5,"result"`) {
		t.Fatalf("the call got %s; want its answer under id 5", got)
	}
}
