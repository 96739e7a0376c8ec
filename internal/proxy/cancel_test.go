package proxy

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestBatchCancelOfTheProxysOwnRequest: a client's cancellation of
// one of the proxy's own requests is dropped when it comes alone; in a
// batch it must be dropped too, never reach the upstream and cancel the
// execution (DESIGN section 5).
func TestBatchCancelOfTheProxysOwnRequest(t *testing.T) {
	r := newRig(t, 0)
	call := r.startCall(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"charge_card","arguments":{}}}`)
	var m struct{ ID json.RawMessage }
	json.Unmarshal([]byte(call), &m)
	r.client.send(t, `[{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`+string(m.ID)+`}}]`)
	r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}`)
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, "roots/list_changed") {
		t.Fatalf("upstream got %s; a client's cancellation of the proxy's own request %s must never reach the upstream", got, m.ID)
	}
}

// TestBatchCancelDetachesTheCaller: a caller that cancels its
// tools/call in a batch is detached, as one that cancels alone: it gets
// no answer, and the cancellation does not go upstream.
func TestBatchCancelDetachesTheCaller(t *testing.T) {
	r := newRig(t, 0)
	call := r.startCall(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"charge_card","arguments":{}}}`)
	r.client.send(t, `[{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}]`)
	r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}`)
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, "roots/list_changed") {
		t.Errorf("upstream got %s; an intercepted call's cancel must stay in the proxy", got)
		r.upstream.next(t, "upstream")
	}
	r.upstream.answerCharged(t, call)
	r.client.send(t, `{"jsonrpc":"2.0","id":8,"method":"ping"}`)
	r.upstream.send(t, `{"jsonrpc":"2.0","id":8,"result":{}}`)
	r.upstream.next(t, "upstream")
	if got := r.client.next(t, "client"); !strings.Contains(got, `"id":8`) {
		t.Fatalf("the client got %s; the caller that cancelled call 7 must get nothing (it is detached, its answer not delivered)", got)
	}
}
