package proxy

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
)

// TestAnswerAfterTheCancelIsNotWritten: the interceptor looks at the
// caller's context, then writes its answer; a cancellation the session
// reads in between detaches the caller. The write must not go out then:
// the caller cancelled first and never takes the answer, so it must not
// count as delivered (under replay: undelivered its retry would run the
// action again).
func TestAnswerAfterTheCancelIsNotWritten(t *testing.T) {
	r := newRig(t, 0)
	r.client.send(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"charge_card","arguments":{}}}`)
	r.upstream.next(t, "upstream") // tools/list
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[]}}`)
	r.upstream.next(t, "upstream") // the call, left unanswered
	r.s.mu.Lock()
	c := r.s.calls["7"]
	r.s.mu.Unlock()
	if c == nil {
		t.Fatal("the call under way is not in the session's calls")
	}
	r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`)
	for deadline := time.Now().Add(10 * time.Second); !c.detached.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the cancellation never detached the call")
		}
	}
	a := intercept.Answer{Result: []byte(`{"content":[{"type":"text","text":"late"}]}`)}
	if err := c.Reply(a); !errors.Is(err, intercept.ErrCallerLeft) {
		t.Fatalf("Reply to a detached caller returned %v; want ErrCallerLeft", err)
	}
	if err := c.ReplyThen(a, func(error) {}); !errors.Is(err, intercept.ErrCallerLeft) {
		t.Fatalf("ReplyThen to a detached caller returned %v; want ErrCallerLeft", err)
	}
	r.client.send(t, `{"jsonrpc":"2.0","id":8,"method":"ping"}`)
	r.upstream.next(t, "upstream")
	r.upstream.send(t, `{"jsonrpc":"2.0","id":8,"result":{}}`)
	if got := r.client.next(t, "client"); strings.Contains(got, "late") {
		t.Fatalf("the client got %s after it cancelled; want no answer to the cancelled call", got)
	}
}

// TestPassThroughAfterTheCancelIsNotSent: a call whose tool passes
// through, routed on the queue's goroutine, may meet its cancellation
// between the check that it is still wanted and the send. Sent anyway,
// it would run upstream for a client that gave up on it, and hold its id,
// which the client may use again at once.
func TestPassThroughAfterTheCancelIsNotSent(t *testing.T) {
	r := newRig(t, 0)
	r.client.send(t, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"search","arguments":{}}}`)
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"method":"tools/list"`) {
		t.Fatalf("the upstream got %s; want the proxy's tools/list", got)
	}
	r.s.mu.Lock()
	c := r.s.calls["7"]
	r.s.mu.Unlock()
	if c == nil {
		t.Fatal("the call waiting for its tool is not in the session's calls")
	}
	r.client.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`)
	if got := r.upstream.next(t, "upstream"); !strings.Contains(got, `"method":"notifications/cancelled"`) {
		t.Fatalf("the upstream got %s; want the cancellation of the proxy's tools/list", got)
	}
	// Routed as the cancellation came: as the queue's goroutine would.
	r.s.passThrough(c, &c.call)
	r.client.send(t, `{"jsonrpc":"2.0","id":7,"method":"ping"}`)
	if got := r.upstream.next(t, "upstream"); got != `{"jsonrpc":"2.0","id":7,"method":"ping"}` {
		t.Fatalf("the upstream got %s; want the ping under the freed id, and not the cancelled call", got)
	}
}
