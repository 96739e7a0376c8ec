package proxy

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// restarted returns a restart rig whose client has made its handshake
// with a first upstream, which sent the client a sampling request under
// id 1 and exited; and the upstream started in its place, its replayed
// handshake answered.
func restarted(t *testing.T) (*restartRig, *upstreamEnd) {
	t.Helper()
	return restartedAt(t, "2025-06-18")
}

// restartedAt is restarted with a handshake in protocol version.
func restartedAt(t *testing.T, version string) (*restartRig, *upstreamEnd) {
	t.Helper()
	r := newRestartRig(t, 5)
	up := r.upstream(t)
	r.initializeAt(t, up, version)
	const old = `{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage","params":{"messages":[{"role":"user","content":{"type":"text","text":"OLD: send $5 to Alice?"}}],"maxTokens":9}}`
	up.send(t, old)
	if got := r.client.next(t, "client"); got != old {
		t.Fatalf("the client got %s; want the first upstream's request as it sent it:\n%s", got, old)
	}
	up2 := r.exitAndRestart(t, up)
	up2.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"protocolVersion":"`+version+`","capabilities":{},"serverInfo":{"name":"s","version":"1"}}}`)
	return r, up2
}

// cancelledID returns the requestId of frame, a notifications/cancelled,
// failing t if it is none.
func cancelledID(t *testing.T, frame string) string {
	t.Helper()
	var m struct {
		Method string
		Params struct {
			RequestID json.RawMessage `json:"requestId"`
			Reason    string
		}
	}
	if err := json.Unmarshal([]byte(frame), &m); err != nil || m.Method != "notifications/cancelled" || m.Params.Reason == "" {
		t.Fatalf("got %s; want notifications/cancelled with a reason", frame)
	}
	return string(m.Params.RequestID)
}

// idOf returns the id of frame as JSON text.
func idOf(frame string) string {
	var m struct{ ID json.RawMessage }
	json.Unmarshal([]byte(frame), &m)
	return string(m.ID)
}

// TestRestartFencesTheExitedServersRequests: a request the exited
// upstream sent the client is cancelled at the client, and the client's
// answer to it never reaches the upstream started in its place, which
// asks something else under the same id 1; the client's answer to that
// one reaches it under id 1.
func TestRestartFencesTheExitedServersRequests(t *testing.T) {
	r, up2 := restarted(t)
	if id := cancelledID(t, r.client.next(t, "client")); id != "1" {
		t.Fatalf("the client was told of the cancellation of %s; want 1, the exited upstream's request", id)
	}

	up2.send(t, `{"jsonrpc":"2.0","id":1,"method":"sampling/createMessage","params":{"messages":[{"role":"user","content":{"type":"text","text":"NEW: delete all files?"}}],"maxTokens":9}}`)
	asked := r.client.next(t, "client")
	newID := idOf(asked)
	if newID == "1" || !strings.Contains(asked, "NEW: delete all files?") {
		t.Fatalf("the client got %s; want the new upstream's request under an id of its own, not 1", asked)
	}

	// The user answers the dialogs in the order they were shown.
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"result":{"role":"assistant","model":"m","content":{"type":"text","text":"yes to OLD"}}}`)
	r.client.send(t, `{"jsonrpc":"2.0","id":`+newID+`,"result":{"role":"assistant","model":"m","content":{"type":"text","text":"no to NEW"}}}`)
	want := `{"jsonrpc":"2.0","id":1,"result":{"role":"assistant","model":"m","content":{"type":"text","text":"no to NEW"}}}`
	if got := up2.next(t, "restarted upstream"); got != want {
		t.Fatalf("the restarted upstream got %s; want the answer to its own request, under its id:\n%s", got, want)
	}
	// A second answer to it goes nowhere either.
	r.client.send(t, `{"jsonrpc":"2.0","id":`+newID+`,"result":{"role":"assistant","model":"m","content":{"type":"text","text":"again"}}}`)
	r.client.send(t, `{"jsonrpc":"2.0","id":7,"method":"ping"}`)
	if got := up2.next(t, "restarted upstream"); got != `{"jsonrpc":"2.0","id":7,"method":"ping"}` {
		t.Fatalf("the restarted upstream got %s; want the ping next, and no other answer", got)
	}
}

// TestRestartedServersCancellation: the restarted upstream's cancellation
// of its own request reaches the client under the id the client knows
// it by, and one naming no open request of its is dropped: the client
// may hold the exited upstream's request under that id.
func TestRestartedServersCancellation(t *testing.T) {
	r, up2 := restarted(t)
	cancelledID(t, r.client.next(t, "client"))
	up2.send(t, `{"jsonrpc":"2.0","id":1,"method":"roots/list"}`)
	newID := idOf(r.client.next(t, "client"))

	up2.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`)
	up2.send(t, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"timeout"}}`)
	want := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + newID + `,"reason":"timeout"}}`
	if got := r.client.next(t, "client"); got != want {
		t.Fatalf("the client got %s; want\n%s", got, want)
	}
}

// TestRestartFencesBatches: a request in a batch of the restarted
// upstream's reaches the client under an id of its own; in a batch of the
// client's, the answer to the exited upstream's request is taken out, and
// the answer to the restarted one's goes under the upstream's id: in a
// batch in a session of 2025-03-26, alone in one of 2025-06-18, which has
// no batches.
func TestRestartFencesBatches(t *testing.T) {
	for _, tc := range []struct{ version, want string }{
		{"2025-03-26", `[{"jsonrpc":"2.0","id":1,"result":{"roots":[]}}]`},
		{"2025-06-18", `{"jsonrpc":"2.0","id":1,"result":{"roots":[]}}`},
	} {
		t.Run(tc.version, func(t *testing.T) {
			r, up2 := restartedAt(t, tc.version)
			cancelledID(t, r.client.next(t, "client"))
			up2.send(t, `[{"jsonrpc":"2.0","method":"notifications/message","params":{}},{"jsonrpc":"2.0","id":1,"method":"roots/list"}]`)
			var batch []json.RawMessage
			if err := json.Unmarshal([]byte(r.client.next(t, "client")), &batch); err != nil || len(batch) != 2 {
				t.Fatalf("the client got %s; want the batch of two", batch)
			}
			newID := idOf(string(batch[1]))
			if newID == "1" || string(batch[0]) != `{"jsonrpc":"2.0","method":"notifications/message","params":{}}` {
				t.Fatalf("the client got %s; want the request under an id of its own, the rest as it came", batch)
			}

			r.client.send(t, `[{"jsonrpc":"2.0","id":1,"result":{"role":"assistant"}},{"jsonrpc":"2.0","id":`+newID+`,"result":{"roots":[]}}]`)
			if got := up2.next(t, "restarted upstream"); got != tc.want {
				t.Fatalf("the restarted upstream got %s; want %s", got, tc.want)
			}
		})
	}
}

// TestFirstUpstreamsRequestsPassUnchanged: the first upstream's requests
// to the client, their answers and its cancellations pass byte for byte,
// as without the proxy, alone or in a batch; the answers in a batch go
// on alone in a session of 2025-06-18, which has no batches.
func TestFirstUpstreamsRequestsPassUnchanged(t *testing.T) {
	const batchAnswer = `{"jsonrpc":"2.0","id":3,"result":{}}`
	for _, tc := range []struct{ version, batchAnswer string }{
		{"2025-03-26", "[" + batchAnswer + "]"},
		{"2025-06-18", batchAnswer},
	} {
		t.Run(tc.version, func(t *testing.T) {
			r := newRestartRig(t, 5)
			up := r.upstream(t)
			r.initializeAt(t, up, tc.version)
			for _, step := range []struct{ from, to, want string }{
				{`{"jsonrpc":"2.0","id":1,"method":"roots/list"}`, `{"jsonrpc":"2.0","id":1,"result":{"roots":[]}}`, ""},
				{`{"jsonrpc":"2.0","id":"s-1","method":"elicitation/create","params":{"message":"ok?","requestedSchema":{"type":"object"}}}`, `{"jsonrpc":"2.0","id":"s-1","result":{"action":"accept"}}`, ""},
				{`{"jsonrpc":"2.0","id":2.0,"method":"ping"}`, `{"jsonrpc":"2.0","id":2,"result":{}}`, ""},
				{`[{"jsonrpc":"2.0","id":3,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/message","params":{}}]`, "[" + batchAnswer + "]", tc.batchAnswer},
			} {
				up.send(t, step.from)
				if got := r.client.next(t, "client"); got != step.from {
					t.Fatalf("the client got %s; want %s", got, step.from)
				}
				r.client.send(t, step.to)
				want := step.want
				if want == "" {
					want = step.to
				}
				if got := up.next(t, "upstream"); got != want {
					t.Fatalf("the upstream got %s; want %s", got, want)
				}
			}
			up.send(t, `{"jsonrpc":"2.0","id":4,"method":"roots/list"}`)
			r.client.next(t, "client")
			const cancel = `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":4}}`
			up.send(t, cancel)
			if got := r.client.next(t, "client"); got != cancel {
				t.Fatalf("the client got %s; want %s", got, cancel)
			}
			// An answer to no open request passes on, as it would without
			// the proxy, while the first upstream runs.
			const late = `{"jsonrpc":"2.0","id":4,"result":{"roots":[]}}`
			r.client.send(t, late)
			if got := up.next(t, "upstream"); got != late {
				t.Fatalf("the upstream got %s; want %s", got, late)
			}
		})
	}
}

// TestUpstreamRequestUnderTheRestartedIDsIsRefused: a request of the
// upstream's under an id in the space the proxy gives a restarted
// upstream's requests is refused: the client could hold one of those.
func TestUpstreamRequestUnderTheRestartedIDsIsRefused(t *testing.T) {
	r := newRestartRig(t, 5)
	up := r.upstream(t)
	r.initialize(t, up)
	up.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:server:2:1","method":"roots/list"}`)
	if got := up.next(t, "upstream"); !strings.Contains(got, `"id":"mcp-idempotent:server:2:1","error"`) {
		t.Fatalf("the upstream got %s; want its request refused", got)
	}
}

// TestServerRequestsOpenAreBounded: a session holds at most
// maxServerRequests of the upstream's requests open for a client that
// answers none of them. One more, alone or in a batch, is answered to the
// upstream with an error and not passed on; one under the id of an open
// request still passes; and once the client answers one, the next passes.
func TestServerRequestsOpenAreBounded(t *testing.T) {
	r := newRestartRig(t, 5)
	up := r.upstream(t)
	r.initializeAt(t, up, "2025-03-26")
	ask := func(id int) string { return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"roots/list"}`, id) }
	for i := range maxServerRequests {
		up.send(t, ask(i))
		if got := r.client.next(t, "client"); got != ask(i) {
			t.Fatalf("the client got %s; want %s", got, ask(i))
		}
	}
	up.send(t, ask(maxServerRequests))
	if got := up.next(t, "upstream"); !strings.Contains(got, fmt.Sprintf(`"id":%d,"error":{"code":-32603`, maxServerRequests)) || !strings.Contains(got, "has not answered") {
		t.Fatalf("the upstream got %s; want an error for the request past the bound", got)
	}
	up.send(t, `[`+ask(maxServerRequests+1)+`,`+ask(0)+`]`)
	if got := up.next(t, "upstream"); !strings.Contains(got, fmt.Sprintf(`"id":%d,"error"`, maxServerRequests+1)) {
		t.Fatalf("the upstream got %s; want an error for the batch's request past the bound", got)
	}
	if got := r.client.next(t, "client"); got != `[`+ask(0)+`]` {
		t.Fatalf("the client got %s; want the batch's request under an open id", got)
	}
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"result":{"roots":[]}}`)
	up.next(t, "upstream")
	up.send(t, ask(maxServerRequests+2))
	if got := r.client.next(t, "client"); got != ask(maxServerRequests+2) {
		t.Fatalf("the client got %s; want the request, one having been answered", got)
	}
	r.client.nothingMore(t, "the requests past the bound are not passed on")
	// Answered, the requests leave nothing for the session's end to
	// answer, which the test would have to read.
	for i := range maxServerRequests + 3 {
		if i == 1 || i == maxServerRequests || i == maxServerRequests+1 {
			continue
		}
		r.client.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"roots":[]}}`, i))
		up.next(t, "upstream")
	}
}

// TestServerRequestsPastTheBoundDoNotStall: an upstream that sends its
// requests without reading its input (a server that writes them all
// first) does not stall the session on the refusals of those past
// maxServerRequests: what it sends next still reaches the client.
func TestServerRequestsPastTheBoundDoNotStall(t *testing.T) {
	done := make(chan struct{})
	t.Cleanup(func() { close(done) }) // after the rig's own clean-up
	r := newRestartRig(t, 5)
	up := r.upstream(t)
	r.initializeAt(t, up, "2025-06-18")
	ask := func(id int) string { return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"roots/list"}`, id) }
	for i := range maxServerRequests {
		up.send(t, ask(i))
		r.client.next(t, "client")
	}
	const note = `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"after"}}`
	sent := make(chan error, 1)
	go func() {
		// Unread by the test, the refusals back up into this upstream.
		for i := range 4 * maxRefusing {
			if err := up.conn.WriteFrame([]byte(ask(maxServerRequests + i))); err != nil {
				sent <- err
				return
			}
		}
		sent <- up.conn.WriteFrame([]byte(note))
	}()
	if got := r.client.next(t, "client"); got != note {
		t.Fatalf("the client got %s; want %s", got, note)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	// The session's end answers what is open; nothing reads it now.
	for _, p := range []*peer{up.peer, r.client} {
		go func() {
			for {
				select {
				case <-p.frames:
				case <-done:
					return
				}
			}
		}()
	}
}
