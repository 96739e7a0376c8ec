package streamhttp

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"
)

// nextEvent returns the next SSE event with data from r, failing t if
// none comes within 5s.
func nextEvent(t *testing.T, r *sseReader) string {
	t.Helper()
	ch := make(chan string, 1)
	go func() {
		for {
			ev, err := r.next()
			if err != nil {
				close(ch)
				return
			}
			if len(ev.Data) > 0 {
				ch <- string(ev.Data)
				return
			}
		}
	}()
	select {
	case data, ok := <-ch:
		if !ok {
			t.Fatal("the stream ended while an event was expected")
		}
		return data
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s")
	}
	return ""
}

// TestServerRelatedGoesOnTheRequestsStream: a request of the server's
// that relates to a client request goes on that request's SSE stream,
// even while the GET stream is open, and the client's POSTed answer to it
// is accepted and handed to the proxy.
func TestServerRelatedGoesOnTheRequestsStream(t *testing.T) {
	srv, p, hs := newTestServer(t, ServerOptions{})
	sid := openSession(t, hs.URL)
	get := do(t, t.Context(), "GET", hs.URL, "", session(sid))
	defer get.Body.Close()
	if get.StatusCode != 200 {
		t.Fatalf("GET: %s", get.Status)
	}
	// The GET stream is open once the server has a writer for it: a
	// message the server starts goes there then.
	waitFor(t, func() bool {
		srv.mu.Lock()
		ss := srv.sessions[sid]
		srv.mu.Unlock()
		ss.mu.Lock()
		defer ss.mu.Unlock()
		return ss.get != nil && ss.get.writer != 0
	})

	resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":3,"method":"related"}`, session(sid))
	defer resp.Body.Close()
	r := newSSEReader(resp.Body, 1<<20)
	if ev := nextEvent(t, r); !strings.Contains(ev, `"method":"elicitation/create"`) {
		t.Fatalf("the request's stream got %s first; want the server's question", ev)
	}

	answer := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":"q1","result":{"action":"accept"}}`, session(sid))
	io.Copy(io.Discard, answer.Body)
	answer.Body.Close()
	if answer.StatusCode != 202 {
		t.Fatalf("the client's answer was met with %s; want 202", answer.Status)
	}
	waitFor(t, func() bool { return p.seen(`"id":"q1","result"`) == 1 })

	close(p.gate)
	if ev := nextEvent(t, r); !strings.Contains(ev, `"id":3`) {
		t.Fatalf("the request's stream got %s; want its answer", ev)
	}
}

// TestServerRelatedWithoutAStream: a message related to a request
// answered with one JSON body goes where the server's own messages go.
func TestServerRelatedWithoutAStream(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{JSONResponse: true})
	sid := openSession(t, hs.URL)
	done := make(chan string, 1)
	go func() {
		resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":3,"method":"related"}`, session(sid))
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- string(b)
	}()
	waitFor(t, func() bool { return p.seen(`"related"`) == 1 })
	get := do(t, t.Context(), "GET", hs.URL, "", session(sid))
	defer get.Body.Close()
	if ev := nextEvent(t, newSSEReader(get.Body, 1<<20)); !strings.Contains(ev, `"method":"elicitation/create"`) {
		t.Fatalf("the GET stream got %s; want the server's question", ev)
	}
	close(p.gate)
	if body := <-done; !strings.Contains(body, `"id":3`) {
		t.Fatalf("the request was answered %s", body)
	}
}

// TestServerStatelessProgress: progress the proxy writes under the token
// it saw on a stateless lane, which renames tokens, reaches the request's
// stream under the client's own token.
func TestServerStatelessProgress(t *testing.T) {
	_, _, hs := newTestServer(t, ServerOptions{})
	hdr := map[string]string{headerProtocolVersion: "2026-07-28", headerMcpMethod: "progress"}
	resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":1,"method":"progress","params":{"_meta":{"progressToken":"tok","io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, hdr)
	defer resp.Body.Close()
	msgs := readEvents(t, resp.Body)
	var progress, answer bool
	for _, m := range msgs {
		progress = progress || strings.Contains(m.data, `"method":"notifications/progress"`) && strings.Contains(m.data, `"progressToken":"tok"`)
		answer = answer || strings.HasPrefix(m.data, `{"jsonrpc":"2.0","id":1,"result"`)
	}
	if !progress || !answer {
		t.Fatalf("the stream carried %v; want the progress under the client's token, and the answer", msgs)
	}
}

// TestServerStatelessServerRequests: a request of the server's on a
// stateless lane, which no client can answer (it has no session to post
// the answer to), is answered in the client's place: a ping with an empty
// result, anything else with an error, so the call that waits on it ends.
// The client is not sent it.
func TestServerStatelessServerRequests(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{})
	hdr := map[string]string{headerProtocolVersion: "2026-07-28", headerMcpMethod: "asks"}
	resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":1,"method":"asks","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, hdr)
	defer resp.Body.Close()
	if got := nextEvent(t, newSSEReader(resp.Body, 1<<20)); !strings.HasPrefix(got, `{"jsonrpc":"2.0","id":1,"result"`) {
		t.Fatalf("the stream carried %s first; want the answer", got)
	}
	if n := p.seen(`{"jsonrpc":"2.0","id":"s1","result":{}}`); n != 1 {
		t.Errorf("the ping was answered %d times with an empty result; want once", n)
	}
	if n := p.seen(`{"jsonrpc":"2.0","id":"s2","error":{"code":-32601`); n != 1 {
		t.Errorf("roots/list was answered %d times with -32601; want once; the proxy read %q", n, p.frames)
	}
}

// TestServerStatelessUnrelated: on a stateless lane, a notification of the
// server's that names no request (a log line, a list change) reaches no
// client: the stream open may be another client's, which did not ask.
func TestServerStatelessUnrelated(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{})
	hdr := map[string]string{headerProtocolVersion: "2026-07-28", headerMcpMethod: "slow"}
	other := make(chan []testEvent, 1)
	go func() {
		resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":1,"method":"slow","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, hdr)
		defer resp.Body.Close()
		other <- readEvents(t, resp.Body)
	}()
	lane := <-p.started
	waitFor(t, func() bool { return p.seen(`"slow"`) == 1 })
	if err := lane.WriteFrame([]byte(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"not yours"}}`)); err != nil {
		t.Fatal(err)
	}
	close(p.gate)
	if msgs := <-other; len(msgs) != 1 || !strings.HasPrefix(msgs[0].data, `{"jsonrpc":"2.0","id":1,"result"`) {
		t.Fatalf("the request's stream carried %v; want its answer alone", msgs)
	}
}

// TestServerStatelessSubscription: on a stateless lane, a notification
// that names its subscription (_meta.subscriptionId, the id of the
// subscriptions/listen) goes on that request's stream, under the id as
// the client wrote it, not as the lane renamed it; so does the result
// that ends the subscription, which names it too.
func TestServerStatelessSubscription(t *testing.T) {
	_, _, hs := newTestServer(t, ServerOptions{})
	hdr := map[string]string{headerProtocolVersion: "2026-07-28", headerMcpMethod: "listen"}
	resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":"sub-1","method":"listen","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, hdr)
	defer resp.Body.Close()
	msgs := readEvents(t, resp.Body)
	if len(msgs) != 2 || !strings.Contains(msgs[0].data, `{"io.modelcontextprotocol/subscriptionId":"sub-1"}`) {
		t.Fatalf("the stream carried %v; want the acknowledgement naming sub-1, and the answer", msgs)
	}
	if !strings.Contains(msgs[1].data, `"_meta":{"io.modelcontextprotocol/subscriptionId":"sub-1"}`) {
		t.Fatalf("the subscription ended with %s; want its _meta to name sub-1", msgs[1].data)
	}
}

// TestServerStatelessSubscriptionMetaTwice: a notification whose params
// give _meta twice names two subscriptions, one for each way of reading
// it: it goes to neither.
func TestServerStatelessSubscriptionMetaTwice(t *testing.T) {
	_, _, hs := newTestServer(t, ServerOptions{})
	hdr := map[string]string{headerProtocolVersion: "2026-07-28", headerMcpMethod: "listen"}
	resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":"sub-1","method":"listen","params":{"twice":true,"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, hdr)
	defer resp.Body.Close()
	msgs := readEvents(t, resp.Body)
	if len(msgs) != 2 || strings.Contains(msgs[1].data, "list_changed") {
		t.Fatalf("the stream carried %v; want the acknowledgement and the answer", msgs)
	}
}

// TestServerStatelessSubscriptionCancelled: a stdio server ends a
// subscription by cancelling its subscriptions/listen. On a stateless
// lane the cancellation goes on that request's stream, under the id as
// the client wrote it, and the stream ends: no answer is coming.
func TestServerStatelessSubscriptionCancelled(t *testing.T) {
	_, _, hs := newTestServer(t, ServerOptions{})
	hdr := map[string]string{headerProtocolVersion: "2026-07-28", headerMcpMethod: "endlisten"}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	resp := do(t, ctx, "POST", hs.URL, `{"jsonrpc":"2.0","id":"sub-1","method":"endlisten","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, hdr)
	defer resp.Body.Close()
	msgs := readEvents(t, resp.Body)
	if ctx.Err() != nil {
		t.Fatalf("the stream did not end; it carried %v", msgs)
	}
	if len(msgs) != 1 || !strings.Contains(msgs[0].data, `"notifications/cancelled"`) || !strings.Contains(msgs[0].data, `"requestId":"sub-1"`) {
		t.Fatalf("the stream carried %v; want the cancellation of sub-1", msgs)
	}
}
