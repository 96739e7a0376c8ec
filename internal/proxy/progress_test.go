package proxy

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestUpstreamProgressAfterTheProxys: once the proxy has told progress 0
// and 1 on a call's token (an approval's wait), the upstream's progress on
// the call, counted from its own start, reaches the client on that token
// raised past them, its total with it, alone or in a batch; progress on
// another token passes as it came.
func TestUpstreamProgressAfterTheProxys(t *testing.T) {
	r, a, call := askRig(t, Options{}, `{"elicitation":{}}`, `{"name":"charge_card","arguments":{"n":1},"_meta":{"progressToken":"p7"}}`)
	a.Progress("waiting for approval")
	a.Progress("still waiting")
	r.client.next(t, "client")
	r.client.next(t, "client")
	// The upstream got the call on a token of the proxy's, told on the
	// client's.
	up := upstreamToken(t, call)
	if up == "" || up == `"p7"` {
		t.Fatalf("the upstream got %s; want the call on a token of the proxy's", call)
	}
	for _, c := range []struct{ upstream, client string }{
		{`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p7","progress":0,"total":2,"message":"half"}}`,
			`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p7","progress":2,"total":4,"message":"half"}}`},
		{`[{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1.5,"progressToken":"p7"}}]`,
			`[{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":3.5,"progressToken":"p7"}}]`},
		{`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p8","progress":0}}`,
			`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p8","progress":0}}`},
	} {
		r.upstream.send(t, strings.Replace(c.upstream, `"progressToken":"p7"`, `"progressToken":`+up, 1))
		if got := r.client.next(t, "client"); got != c.client {
			t.Errorf("the upstream sent %s; the client got %s, want %s", c.upstream, got, c.client)
		}
	}
	// Readers would take it for two values, one of them going back.
	r.upstream.send(t, `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":`+up+`,"progress":9,"Progress":0}}`)
	passedToClient(t, r, "ambiguous progress on the proxy's token")
	r.upstream.answerCharged(t, call)
	r.client.next(t, "client")
}

// TestTaskProgressStaysRaised: a task's progress after its handle is
// still raised past the proxy's own progress on the call's token (its
// approval's wait), as before the answer: MCP asks progress on a token
// to increase, and the token is the task's for its lifetime.
func TestTaskProgressStaysRaised(t *testing.T) {
	r, a, call := askRig(t, Options{}, `{"elicitation":{}}`, `{"name":"charge_card","arguments":{"n":1},"task":{"ttl":60000},"_meta":{"progressToken":"p7"}}`)
	a.Progress("waiting for approval")
	a.Progress("still waiting")
	r.client.next(t, "client")
	r.client.next(t, "client")
	up := upstreamToken(t, call)
	r.upstream.send(t, progressOn(up, "1"))
	if got := r.client.next(t, "client"); got != progressOn(`"p7"`, "3") {
		t.Fatalf("before the handle, the client got %s; want progress 3", got)
	}
	var m struct{ ID json.RawMessage }
	json.Unmarshal([]byte(call), &m)
	r.upstream.send(t, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"task":{"taskId":"t1","status":"working","createdAt":"2026-01-01T00:00:00Z","ttl":60000}}}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"taskId":"t1"`) {
		t.Fatalf("the client got %s; want the task's handle", got)
	}
	r.upstream.send(t, progressOn(up, "2"))
	if got := r.client.next(t, "client"); got != progressOn(`"p7"`, "4") {
		t.Errorf("after the handle, the client got %s; want progress 4, raised as before", got)
	}
}
