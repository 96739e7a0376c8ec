package proxy

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

func TestBatchless(t *testing.T) {
	for v, want := range map[string]bool{
		"2025-06-18":    true,
		"2025-11-25":    true,
		"2031-01-01":    true,
		"2025-03-26":    false,
		"2024-11-05":    false,
		"":              false, // no initialize result yet
		"2025-6-18":     false, // no date
		"DRAFT-2026-v1": false,
	} {
		if got := batchless(v); got != want {
			t.Errorf("batchless(%q) = %v; want %v", v, got, want)
		}
	}
}

// handshake makes the client's handshake on r: it asks for protocol
// asked, and the upstream's initialize result gives result (the whole
// "result" or "error" member and its value).
func (r *rig) handshake(t *testing.T, asked, result string) {
	t.Helper()
	r.client.send(t, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"`+asked+`","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`)
	r.upstream.next(t, "upstream")
	r.upstream.send(t, `{"jsonrpc":"2.0","id":0,`+result+`}`)
	r.client.next(t, "client")
}

// gives is the result member of an initialize result giving version.
func gives(version string) string {
	return `"result":{"protocolVersion":"` + version + `","capabilities":{},"serverInfo":{"name":"s","version":"1"}}`
}

// nextIs fails t unless p's next frame is want.
func nextIs(t *testing.T, p *peer, side, want, why string) {
	t.Helper()
	if got := p.next(t, side); got != want {
		t.Fatalf("the %s got %s; want %s", side, got, why)
	}
}

// TestBatchOfASessionVersion: a server of protocol 2025-06-18 or later
// fails on a batch (the go-sdk's exits, with every call under way on
// it). In a session of such a version a batch holding a request is
// refused whole, and nothing of it reaches the upstream; in one of
// 2025-03-26, or before the version is known, it passes as it came. The
// version is the one the upstream's initialize result gave the client.
func TestBatchOfASessionVersion(t *testing.T) {
	const batch = `[{"jsonrpc":"2.0","id":"b1","method":"ping"},{"jsonrpc":"2.0","method":"notifications/x"},{"jsonrpc":"2.0","id":2,"method":"tools/list"}]`
	for _, tc := range []struct {
		name, asked, result, refusedIn string
	}{
		{"2025-06-18", "2025-06-18", gives("2025-06-18"), "2025-06-18"},
		{"2025-11-25", "2025-11-25", gives("2025-11-25"), "2025-11-25"},
		{"given 2025-06-18 when 2025-03-26 was asked", "2025-03-26", gives("2025-06-18"), "2025-06-18"},
		{"2025-03-26", "2025-03-26", gives("2025-03-26"), ""},
		{"given 2025-03-26 when 2025-06-18 was asked", "2025-06-18", gives("2025-03-26"), ""},
		{"a version the proxy does not know (refused)", "2025-06-18", gives("DRAFT-2026-v1"), ""},
		{"an initialize that failed", "2025-06-18", `"error":{"code":-32602,"message":"unsupported"}`, ""},
		{"no initialize", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, 0)
			if tc.asked != "" {
				r.handshake(t, tc.asked, tc.result)
			}
			r.client.send(t, batch)
			if tc.refusedIn == "" {
				nextIs(t, r.upstream, "upstream", batch, "the batch as it came")
				return
			}
			var answers []struct {
				ID    json.RawMessage
				Error struct {
					Code    int
					Message string
				}
			}
			got := r.client.next(t, "client")
			if err := json.Unmarshal([]byte(got), &answers); err != nil || len(answers) != 2 ||
				string(answers[0].ID) != `"b1"` || string(answers[1].ID) != `2` {
				t.Fatalf("the client got %s; want an array of an answer to each request, under its id", got)
			}
			for _, a := range answers {
				if a.Error.Code != -32600 || !strings.Contains(a.Error.Message, "a session of protocol "+tc.refusedIn+" takes one message per line") {
					t.Fatalf("the client got %s; want -32600 saying protocol %s takes one message per line", got, tc.refusedIn)
				}
			}
			// What the upstream reads next is what came after the batch:
			// nothing of the batch reached it.
			const marker = `{"jsonrpc":"2.0","id":3,"method":"ping"}`
			r.client.send(t, marker)
			nextIs(t, r.upstream, "upstream", marker, "the ping sent after the batch, and nothing of the batch")
		})
	}
}

// TestBatchlessLogCountsNotifications: the warning for a refused batch
// counts the notifications that were not sent, not its requests, which
// the client is answered for.
func TestBatchlessLogCountsNotifications(t *testing.T) {
	var log syncBuffer
	r := newRigOptions(t, 0, Options{Logger: slog.New(slog.NewTextHandler(&log, nil))})
	r.handshake(t, "2025-06-18", gives("2025-06-18"))
	r.client.send(t, `[{"jsonrpc":"2.0","id":"b1","method":"ping"},{"jsonrpc":"2.0","id":"b2","method":"ping"},`+
		`{"jsonrpc":"2.0","method":"notifications/x"}]`)
	r.client.next(t, "client")
	if got := log.String(); !strings.Contains(got, "notifications_dropped=1") {
		t.Fatalf("the log says %q; want notifications_dropped=1 for a batch of two requests and a notification", got)
	}
}

// TestBatchlessAnswersGoAlone: the client's answers to the server's
// requests, in a batch in a session of 2025-06-18, reach the upstream
// one per line, in order, with the notifications of a batch without a
// request; in a batch with one, the answers still go, and its
// notification does not.
func TestBatchlessAnswersGoAlone(t *testing.T) {
	r := newRig(t, 0)
	r.handshake(t, "2025-06-18", gives("2025-06-18"))
	const (
		roots    = `{"jsonrpc":"2.0","id":0,"method":"roots/list"}`
		sampling = `{"jsonrpc":"2.0","id":"s","method":"sampling/createMessage","params":{"messages":[],"maxTokens":9}}`
		rootsAns = `{"jsonrpc":"2.0","id":0,"result":{"roots":[]}}`
		sampAns  = `{"jsonrpc":"2.0","id":"s","result":{"role":"assistant","model":"m","content":{"type":"text","text":"hi"}}}`
		note     = `{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}`
	)
	for _, req := range []string{roots, sampling} {
		r.upstream.send(t, req)
		nextIs(t, r.client, "client", req, "the server's request as it sent it")
	}
	r.client.send(t, `[`+rootsAns+`,`+note+`,`+sampAns+`]`)
	for _, want := range []string{rootsAns, note, sampAns} {
		nextIs(t, r.upstream, "upstream", want, want+", one message per line, in the batch's order")
	}
	r.s.mu.Lock()
	open := len(r.s.serverReqs)
	r.s.mu.Unlock()
	if open != 0 {
		t.Fatalf("%d requests of the server's are still open; want both answered", open)
	}

	const elicit = `{"jsonrpc":"2.0","id":1,"method":"elicitation/create","params":{"message":"ok?","requestedSchema":{"type":"object"}}}`
	const elicitAns = `{"jsonrpc":"2.0","id":1,"result":{"action":"accept"}}`
	r.upstream.send(t, elicit)
	r.client.next(t, "client")
	r.client.send(t, `[{"jsonrpc":"2.0","id":7,"method":"ping"},`+elicitAns+`,`+note+`]`)
	if got := r.client.next(t, "client"); !strings.HasPrefix(got, `[{"jsonrpc":"2.0","id":7,"error":{"code":-32600`) {
		t.Fatalf("the client got %s; want its ping refused", got)
	}
	nextIs(t, r.upstream, "upstream", elicitAns, "the answer, alone")
	const marker = `{"jsonrpc":"2.0","id":8,"method":"ping"}`
	r.client.send(t, marker)
	nextIs(t, r.upstream, "upstream", marker, "the ping sent after the batch: neither its ping nor its notification")
}

// TestBatchlessCancellation: in a session of 2025-06-18, a cancellation
// in a batch cancels what it names, as alone, and goes upstream alone;
// a refused request under an id in use is answered under a null id.
func TestBatchlessCancellation(t *testing.T) {
	r := newRig(t, 0)
	r.handshake(t, "2025-06-18", gives("2025-06-18"))
	const read = `{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"file:///a"}}`
	r.client.send(t, read)
	nextIs(t, r.upstream, "upstream", read, "the read")

	r.client.send(t, `[{"jsonrpc":"2.0","id":3,"method":"ping"},{"jsonrpc":"2.0","id":4,"method":"ping"}]`)
	got := r.client.next(t, "client")
	if !strings.HasPrefix(got, `[{"jsonrpc":"2.0","id":null,"error":{"code":-32600`) || !strings.Contains(got, `{"jsonrpc":"2.0","id":4,"error":{"code":-32600`) {
		t.Fatalf("the client got %s; want id 3, which the read holds, refused under null, and 4 under 4", got)
	}

	const (
		cancel   = `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3,"reason":"user"}}`
		progress = `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":1}}`
	)
	r.client.send(t, `[`+cancel+`,`+progress+`]`)
	nextIs(t, r.upstream, "upstream", cancel, "the cancellation, alone")
	nextIs(t, r.upstream, "upstream", progress, "the progress, alone")
	// The read is cancelled: its id is free again.
	r.client.send(t, read)
	nextIs(t, r.upstream, "upstream", read, "the read again, its id free")
}

// TestBatchlessNotificationsWaitTheirTurn: the notifications of a batch
// in a session of 2025-06-18 reach the upstream one per line after what
// came before the batch, a call waiting for the proxy's tool listing.
func TestBatchlessNotificationsWaitTheirTurn(t *testing.T) {
	r := newRig(t, 0)
	r.handshake(t, "2025-06-18", gives("2025-06-18"))
	const (
		changed = `{"jsonrpc":"2.0","method":"notifications/roots/list_changed"}`
		other   = `{"jsonrpc":"2.0","method":"notifications/x"}`
	)
	r.client.send(t, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"append","arguments":{"v":"a"}}}`)
	r.client.send(t, `[`+changed+`,`+other+`]`)
	processed(t, r)
	nextIs(t, r.upstream, "upstream", `{"jsonrpc":"2.0","id":"mcp-idempotent:1","method":"tools/list"}`, "the proxy's listing, and nothing sent after the call before it")
	r.upstream.send(t, `{"jsonrpc":"2.0","id":"mcp-idempotent:1","result":{"tools":[{"name":"append","inputSchema":{"type":"object"}}]}}`)
	call := r.upstream.next(t, "upstream")
	if !strings.Contains(call, `"v":"a"`) {
		t.Fatalf("the upstream got %s; want the call first", call)
	}
	nextIs(t, r.upstream, "upstream", changed, "the batch's first notification, alone")
	nextIs(t, r.upstream, "upstream", other, "the batch's second notification, alone")
	r.upstream.answerCharged(t, call)
	r.client.next(t, "client")
}

// TestBatchlessAfterABatchedInitialize: the version an initialize
// result gives counts when the result came in a batch, to a batch of a
// session whose version was not known yet.
func TestBatchlessAfterABatchedInitialize(t *testing.T) {
	r := newRig(t, 0)
	const initialize = `[{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}]`
	r.client.send(t, initialize)
	nextIs(t, r.upstream, "upstream", initialize, "the batch as it came: the version is not known yet")
	r.upstream.send(t, `[{"jsonrpc":"2.0","id":0,`+gives("2025-06-18")+`}]`)
	r.client.next(t, "client")
	r.client.send(t, `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`)
	if got := r.client.next(t, "client"); !strings.Contains(got, "a session of protocol 2025-06-18 takes one message per line") {
		t.Fatalf("the client got %s; want the batch refused", got)
	}
}

// TestRefusedBatchAnswersGoOn: a batch refused for a request in it (a
// tools/call) or for its ids (one given twice) still delivers its answers
// to the server's requests, which would otherwise wait for ever; its
// requests get the refusal.
func TestRefusedBatchAnswersGoOn(t *testing.T) {
	const (
		roots    = `{"jsonrpc":"2.0","id":"r","method":"roots/list"}`
		rootsAns = `{"jsonrpc":"2.0","id":"r","result":{"roots":[]}}`
		ping     = `{"jsonrpc":"2.0","id":5,"method":"ping"}`
	)
	for _, tt := range []struct {
		name, rest, refusal string
	}{
		{"a tools/call", `{"jsonrpc":"2.0","method":"notifications/roots/list_changed"},{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"x"}}`,
			"tools/call cannot be sent in a batch"},
		{"an id twice", ping + `,` + ping, "twice in the batch"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, 0)
			r.handshake(t, "2025-03-26", gives("2025-03-26"))
			r.upstream.send(t, roots)
			nextIs(t, r.client, "client", roots, "the server's request as it sent it")
			r.client.send(t, `[`+rootsAns+`,`+tt.rest+`]`)
			if got := r.client.next(t, "client"); !strings.Contains(got, `"id":5,"error"`) && !strings.Contains(got, `"id":null,"error"`) || !strings.Contains(got, tt.refusal) {
				t.Fatalf("the client got %s; want its requests refused, saying %q", got, tt.refusal)
			}
			nextIs(t, r.upstream, "upstream", `[`+rootsAns+`]`, "the batch's answer to the server's request")
			r.s.mu.Lock()
			open := len(r.s.serverReqs)
			r.s.mu.Unlock()
			if open != 0 {
				t.Fatalf("%d requests of the server's are still open; want roots/list answered", open)
			}
		})
	}
}
