package proxy

import "testing"

// TestSecondAnswerToAServerRequestIsDropped: a client that answers a
// request of the upstream's twice (a user who accepts, then cancels; a
// POST sent again) has only its first answer passed on. Over HTTP the
// proxy posts each answer on its own, so a second one passed on could
// reach the server first and be the answer it takes.
func TestSecondAnswerToAServerRequestIsDropped(t *testing.T) {
	r := newRig(t, 0)
	const ask = `{"jsonrpc":"2.0","id":1,"method":"elicitation/create","params":{"message":"charge?","requestedSchema":{"type":"object"}}}`
	r.upstream.send(t, ask)
	if got := r.client.next(t, "client"); got != ask {
		t.Fatalf("the client got %s; want %s", got, ask)
	}
	const first = `{"jsonrpc":"2.0","id":1,"result":{"action":"accept"}}`
	r.client.send(t, first)
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"result":{"action":"cancel"}}`)
	const marker = `{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}`
	r.client.send(t, marker)
	if got := r.upstream.next(t, "upstream"); got != first {
		t.Fatalf("the upstream got %s; want the first answer %s", got, first)
	}
	if got := r.upstream.next(t, "upstream"); got != marker {
		t.Fatalf("the upstream got %s; want the second answer dropped, and %s next", got, marker)
	}
	// An answer to a request the upstream never sent passes as it came,
	// as it would without the proxy.
	const stray = `{"jsonrpc":"2.0","id":99,"result":{}}`
	r.client.send(t, stray)
	if got := r.upstream.next(t, "upstream"); got != stray {
		t.Fatalf("the upstream got %s; want %s", got, stray)
	}
}

// TestSecondAnswerInABatchIsDropped: so too in a batch of the client's,
// where the first answer stays and the second is taken out.
func TestSecondAnswerInABatchIsDropped(t *testing.T) {
	r := newRig(t, 0)
	const ask = `{"jsonrpc":"2.0","id":1,"method":"roots/list"}`
	r.upstream.send(t, ask)
	r.client.next(t, "client")
	r.client.send(t, `[{"jsonrpc":"2.0","id":1,"result":{"roots":[]}},{"jsonrpc":"2.0","id":1,"result":{"roots":[{"uri":"file:///x"}]}},{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}]`)
	const want = `[{"jsonrpc":"2.0","id":1,"result":{"roots":[]}},{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}]`
	if got := r.upstream.next(t, "upstream"); got != want {
		t.Fatalf("the upstream got %s; want %s", got, want)
	}
}
