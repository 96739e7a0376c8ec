package proxy

import "testing"

// TestRestartReplaysInitializedSentInABatch: in a protocol with batches
// (2025-03-26), a client may send notifications/initialized in one. The
// upstream started again is given it after the replayed initialize all
// the same: a server that takes no request before it (the Python SDK's)
// would refuse every request of the client's from then on.
func TestRestartReplaysInitializedSentInABatch(t *testing.T) {
	r := newRestartRig(t, 5)
	up := r.upstream(t)
	r.initializeAt(t, up, "2025-03-26")
	const batch = `[{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","id":2,"method":"ping"}]`
	r.client.send(t, batch)
	if got := up.next(t, "upstream"); got != batch {
		t.Fatalf("the upstream got %s; want the batch as it came", got)
	}
	up.send(t, `[{"jsonrpc":"2.0","id":2,"result":{}}]`)
	r.client.next(t, "client")

	up2 := r.exitAndRestart(t, up)
	up2.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"protocolVersion":"2025-03-26","capabilities":{},"serverInfo":{"name":"s","version":"1"}}}`)
	if got := up2.next(t, "restarted upstream"); got != `{"jsonrpc":"2.0","method":"notifications/initialized"}` {
		t.Fatalf("after initialize the restarted upstream got %s; want notifications/initialized", got)
	}
}
