package proxy

import (
	"strings"
	"testing"
)

// TestServerRequestOutlivesItsDetachedCaller: an elicitation the upstream
// sends during a task-augmented call still reaches the upstream with the
// client's answer after the caller cancelled the call, and the retry that
// attached meanwhile gets the one task handle; tasks/get, with a taskId
// the proxy cannot read as one, passes through as it came.
func TestServerRequestOutlivesItsDetachedCaller(t *testing.T) {
	const call = `{"name":"charge_card","arguments":{},"task":{"ttl":1000}}`
	r := newRig(t, 0)
	r.client.send(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":`+call+`}`)
	r.upstream.next(t, "upstream") // tools/list
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[]}}`)
	sent := r.upstream.next(t, "upstream")

	const ask = `{"jsonrpc":"2.0","id":5,"method":"elicitation/create","params":{"message":"ok?","requestedSchema":{"type":"object","properties":{}}}}`
	r.upstream.send(t, ask)
	if got := r.client.next(t, "client"); got != ask {
		t.Fatalf("the client got %s; want the elicitation as it came", got)
	}
	r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`)
	r.client.send(t, `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":`+call+`}`)
	const answer = `{"jsonrpc":"2.0","id":5,"result":{"action":"accept","content":{}}}`
	r.client.send(t, answer)
	if got := r.upstream.next(t, "upstream"); got != answer {
		t.Fatalf("the upstream got %s; want the client's answer to its elicitation", got)
	}
	r.upstream.send(t, `{"jsonrpc":"2.0","id":`+idOf(sent)+`,"result":{"task":{"taskId":"T1","status":"working"}}}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":8`) || !strings.Contains(got, `"taskId":"T1"`) {
		t.Fatalf("the retry got %s; want the task handle under id 8", got)
	}
	const get = `{"jsonrpc":"2.0","id":9,"method":"tasks/get","params":{"taskId":{"x":1}}}`
	r.client.send(t, get)
	if got := r.upstream.next(t, "upstream"); got != get {
		t.Fatalf("the upstream got %s; want tasks/get as it came", got)
	}
	r.client.send(t, `{"jsonrpc":"2.0","id":10,"method":"tools/call","params":`+call+`}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":10`) || !strings.Contains(got, `"taskId":"T1"`) {
		t.Fatalf("a retry after the handle was delivered got %s; want the same task handle", got)
	}
}
