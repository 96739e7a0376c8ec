package proxy

import (
	"strings"
	"testing"
)

// TestUpstreamEndsAListen: a stdio upstream ends a 2026-07-28
// subscriptions/listen by cancelling it (notifications/cancelled naming
// the listen's id). The client is told, and the listen is over: the
// session's end does not answer it again.
func TestUpstreamEndsAListen(t *testing.T) {
	r := newRig(t, 0)
	r.client.send(t, `{"jsonrpc":"2.0","id":7,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true}}}`)
	r.upstream.next(t, "upstream")
	r.upstream.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"shutting down"}}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"notifications/cancelled"`) || !strings.Contains(got, `"requestId":7`) {
		t.Fatalf("client got %s; want the listen's cancellation", got)
	}
	// The listen is over: the end of the session answers it no more.
	r.clientW.Close()
	r.wait(t)
	r.client.nothingMore(t, "the ended listen wants no answer")
}

// TestRestartedUpstreamEndsAListen is TestUpstreamEndsAListen with an
// upstream started again, whose cancellations of no open request of its
// own are dropped.
func TestRestartedUpstreamEndsAListen(t *testing.T) {
	r := newRestartRig(t, 5)
	up := r.upstream(t)
	r.initializeAt(t, up, "2025-06-18")
	up2 := r.exitAndRestart(t, up)
	up2.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"s","version":"1"}}}`)
	r.client.send(t, `{"jsonrpc":"2.0","id":7,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true}}}`)
	up2.next(t, "restarted upstream")
	up2.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"shutting down"}}`)
	r.client.send(t, `{"jsonrpc":"2.0","id":8,"method":"ping"}`)
	up2.next(t, "restarted upstream")
	up2.send(t, `{"jsonrpc":"2.0","id":8,"result":{}}`)
	if got := r.client.next(t, "client"); !strings.Contains(got, `"notifications/cancelled"`) || !strings.Contains(got, `"requestId":7`) {
		t.Fatalf("client got %s; want the listen's cancellation", got)
	}
}
