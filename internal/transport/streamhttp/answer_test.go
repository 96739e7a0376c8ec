package streamhttp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// TestServerAnswerWritten: an answer counts as written to the client when
// an HTTP response carried it (its own stream, a resumed one, or a JSON
// body), not when the session queued it: one the client dropped and did
// not resume never does, and counts as lost once the session is gone.
func TestServerAnswerWritten(t *testing.T) {
	next := func(ch chan string, what string) string {
		t.Helper()
		select {
		case id := <-ch:
			return id
		case <-time.After(5 * time.Second):
			t.Fatalf("no answer %s within 5s", what)
			return ""
		}
	}
	none := func(ch chan string, what string) {
		t.Helper()
		select {
		case id := <-ch:
			t.Fatalf("answer %s %s; want none", id, what)
		default:
		}
	}
	for _, jsonResponse := range []bool{false, true} {
		srv, p, hs := newTestServer(t, ServerOptions{JSONResponse: jsonResponse})
		// idle reports whether the server has seen every request of the
		// session end, a client's dropped one included.
		idle := func(sid string) bool {
			srv.mu.Lock()
			ss := srv.sessions[sid]
			srv.mu.Unlock()
			ss.mu.Lock()
			defer ss.mu.Unlock()
			return ss.active == 0
		}
		resp := do(t, t.Context(), "POST", hs.URL, initBody, nil)
		io.ReadAll(resp.Body)
		resp.Body.Close()
		sid := resp.Header.Get(headerSessionID)
		next(p.routed, "routed") // initialize's
		next(p.written, "written")

		// Read by the client: written.
		resp = do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":2,"method":"ping"}`, session(sid))
		io.ReadAll(resp.Body)
		resp.Body.Close()
		if id := next(p.written, "written"); id != "2" {
			t.Fatalf("written %s; want 2", id)
		}
		next(p.routed, "routed")

		// Dropped before the answer, never resumed: not written. (A JSON
		// response has no headers before its answer: the request waits
		// on a goroutine of its own.)
		ctx, cut := context.WithCancel(t.Context())
		primed := make(chan string, 1)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, "POST", hs.URL, strings.NewReader(`{"jsonrpc":"2.0","id":3,"method":"slow"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set(headerProtocolVersion, version)
			req.Header.Set(headerSessionID, sid)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				primed <- ""
				return
			}
			defer resp.Body.Close()
			ev, err := newSSEReader(resp.Body, 1<<20).next()
			if err != nil {
				primed <- ""
				return
			}
			primed <- ev.ID
		}()
		var priming string
		if jsonResponse {
			waitFor(t, func() bool { return p.seen(`"slow"`) > 0 })
		} else {
			priming = <-primed
		}
		cut()
		// The answer comes once the server has seen the request go, as it
		// would a long call later.
		waitFor(t, func() bool { return idle(sid) })
		close(p.gate)
		if id := next(p.routed, "routed"); id != "3" {
			t.Fatalf("routed %s; want 3", id)
		}
		none(p.written, "written after the client dropped its request")
		if jsonResponse {
			// No resumption: the answer is lost, as the session's end
			// tells.
			none(p.lost, "lost while the session lasts")
			resp = do(t, t.Context(), "DELETE", hs.URL, "", session(sid))
			resp.Body.Close()
			if id := next(p.lost, "lost at the session's end"); id != "3" {
				t.Fatalf("lost %s; want 3", id)
			}
			none(p.written, "written after the session ended")
			continue
		}
		// Resumed: written then.
		hdr := session(sid)
		hdr[headerLastEventID] = priming
		resp = do(t, t.Context(), "GET", hs.URL, "", hdr)
		readEvents(t, resp.Body)
		resp.Body.Close()
		if id := next(p.written, "written on the resumed stream"); id != "3" {
			t.Fatalf("written %s; want 3", id)
		}
		// Written: no longer waiting to be told lost.
		srv.mu.Lock()
		ss := srv.sessions[sid]
		srv.mu.Unlock()
		ss.mu.Lock()
		unread := len(ss.unread)
		ss.mu.Unlock()
		if unread != 0 {
			t.Fatalf("%d answers still unread after each was written; want none", unread)
		}
	}
}

// TestServerAnswerBeforeItsRecord: the client gets its answer (a JSON
// body here, which net/http would otherwise hold until the handler
// returns) before the delivery is recorded, however long that takes.
func TestServerAnswerBeforeItsRecord(t *testing.T) {
	_, _, hs := newTestServer(t, ServerOptions{JSONResponse: true})
	resp := do(t, t.Context(), "POST", hs.URL, initBody, nil)
	io.ReadAll(resp.Body)
	resp.Body.Close()
	sid := resp.Header.Get(headerSessionID)
	got := make(chan string, 1)
	go func() {
		resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":2,"method":"slowrecord"}`, session(sid))
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- string(b)
	}()
	select {
	case b := <-got:
		if !strings.Contains(b, `"id":2`) {
			t.Fatalf("got %s; want the answer to 2", b)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the answer waited for its delivery to be recorded")
	}
}

func TestServerProgressAndServerMessages(t *testing.T) {
	_, _, hs := newTestServer(t, ServerOptions{})
	sid := start(t, hs.URL, nil)
	resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":9,"method":"progress","params":{"_meta":{"progressToken":"tok"}}}`, session(sid))
	defer resp.Body.Close()
	msgs := readEvents(t, resp.Body)
	// With no GET stream open, the log message goes on the open POST
	// stream; progress goes on its request's stream.
	if len(msgs) != 3 || !strings.Contains(msgs[0].data, `"progressToken":"tok"`) || !strings.Contains(msgs[1].data, "notifications/message") || !strings.Contains(msgs[2].data, `"id":9`) {
		t.Fatalf("the stream held %v; want progress, the log message, then the answer", msgs)
	}
}

func TestServerJSONResponse(t *testing.T) {
	_, _, hs := newTestServer(t, ServerOptions{JSONResponse: true})
	resp := do(t, t.Context(), "POST", hs.URL, batchInitBody, nil)
	sid := resp.Header.Get(headerSessionID)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Header.Get("Content-Type") != "application/json" || !strings.Contains(string(b), `"method":"initialize"`) {
		t.Fatalf("initialize answered %s %q", resp.Header.Get("Content-Type"), b)
	}
	resp = do(t, t.Context(), "POST", hs.URL, `[{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","id":2,"method":"b"}]`, batchSession(sid))
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	var batch []json.RawMessage
	if err := json.Unmarshal(b, &batch); err != nil || len(batch) != 2 {
		t.Fatalf("a batch answered %q; want an array of two answers", b)
	}
}

// TestServerJSONBatchIsAnArray: in JSON mode a batch is answered with an
// array (JSON-RPC 2.0, section 6), even when it holds one request, and a
// single request with the bare answer.
func TestServerJSONBatchIsAnArray(t *testing.T) {
	_, _, hs := newTestServer(t, ServerOptions{JSONResponse: true})
	sid := openSessionWith(t, hs.URL, batchInitBody)
	tests := []struct {
		name string
		body string
		want []string // the ids answered, in an array; nil for one bare answer
	}{
		{"one request", `{"jsonrpc":"2.0","id":1,"method":"a"}`, nil},
		{"batch of one", `[{"jsonrpc":"2.0","id":2,"method":"a"}]`, []string{"2"}},
		{"batch of one request and a notification", `[{"jsonrpc":"2.0","id":3,"method":"a"},{"jsonrpc":"2.0","method":"notifications/x"}]`, []string{"3"}},
		{"batch of two", `[{"jsonrpc":"2.0","id":4,"method":"a"},{"jsonrpc":"2.0","id":5,"method":"b"}]`, []string{"4", "5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := do(t, t.Context(), "POST", hs.URL, tt.body, batchSession(sid))
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("%s %s", resp.Status, b)
			}
			if tt.want == nil {
				if m, err := jsonrpc.Decode(b); err != nil || m.Batch || string(m.ID) != "1" {
					t.Fatalf("answered %s; want the one answer to 1, not in an array", b)
				}
				return
			}
			checkBatchAnswer(t, b, tt.want)
		})
	}
}

// TestServerJSONBatchAnsweredWhole: a batch answered with one JSON body
// gets every answer, though messages the server starts and another
// answer pass the session's buffer while it waits for its last: the
// answers it has are pinned, not evicted, so its array is never short.
func TestServerJSONBatchAnsweredWhole(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{JSONResponse: true, EventBuffer: 4})
	sid := openSessionWith(t, hs.URL, batchInitBody)
	answered := make(chan []byte, 1)
	go func() {
		resp := do(t, t.Context(), "POST", hs.URL, `[{"jsonrpc":"2.0","id":"s","method":"slow"},{"jsonrpc":"2.0","id":"a","method":"a"},{"jsonrpc":"2.0","id":"b","method":"b"}]`, batchSession(sid))
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answered <- b
	}()
	for n := 0; n < 2; {
		if id := <-p.routed; id == `"a"` || id == `"b"` {
			n++
		}
	}
	// Two messages the server starts (on the GET stream in JSON mode)
	// and an answer: five events for a buffer of four.
	resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":3,"method":"progress","params":{"_meta":{"progressToken":"t"}}}`, session(sid))
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("progress: %s %s", resp.Status, b)
	}
	close(p.gate)
	checkBatchAnswer(t, <-answered, []string{`"s"`, `"a"`, `"b"`})
}

// checkBatchAnswer checks that body is a JSON array of answers to the
// requests ids, in any order (JSON-RPC 2.0 leaves it free).
func checkBatchAnswer(t *testing.T, body []byte, ids []string) {
	t.Helper()
	var batch []json.RawMessage
	if err := json.Unmarshal(body, &batch); err != nil || len(batch) != len(ids) {
		t.Fatalf("answered %s; want an array of the answers to %v", body, ids)
	}
	for _, raw := range batch {
		if m, err := jsonrpc.Decode(raw); err != nil || !m.IsResponse() || !slices.Contains(ids, string(m.ID)) {
			t.Fatalf("the array holds %s; want answers to %v", raw, ids)
		}
	}
}

// TestServerCancelledRequestEndsItsResponse: a request the client cancels
// gets no answer, and its response ends (an SSE stream with no answer, a
// 202 without a body) rather than staying open until the client gives up.
func TestServerCancelledRequestEndsItsResponse(t *testing.T) {
	for _, jsonResponse := range []bool{false, true} {
		t.Run(fmt.Sprintf("json=%v", jsonResponse), func(t *testing.T) {
			_, p, hs := newTestServer(t, ServerOptions{JSONResponse: jsonResponse})
			sid := openSession(t, hs.URL)
			type result struct {
				status int
				body   string
			}
			got := make(chan result, 1)
			go func() {
				resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":7,"method":"slow"}`, session(sid))
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				got <- result{resp.StatusCode, string(b)}
			}()
			waitFor(t, func() bool { return p.seen(`"slow"`) == 1 })
			resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`, session(sid))
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("the cancellation: %s, want 202", resp.Status)
			}
			select {
			case r := <-got:
				if strings.Contains(r.body, `"id":7`) {
					t.Errorf("the cancelled request was answered: %s", r.body)
				}
				if jsonResponse && r.status != http.StatusAccepted {
					t.Errorf("the cancelled request's response: %d %q; want 202", r.status, r.body)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the cancelled request's response is still open 5s after the cancellation")
			}
		})
	}
}

// TestServerAmbiguousCancellationCancelsNothing: a cancellation whose
// requestId comes in another case ("RequestId") is one the proxy refuses
// as naming two requests; the session reads it the same way, and the
// request it might name keeps its response and gets its answer.
func TestServerAmbiguousCancellationCancelsNothing(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{})
	sid := openSession(t, hs.URL)
	got := make(chan string, 1)
	go func() {
		resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":7,"method":"slow"}`, session(sid))
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got <- string(b)
	}()
	waitFor(t, func() bool { return p.seen(`"slow"`) == 1 })
	resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"RequestId":7}}`, session(sid))
	resp.Body.Close()
	waitFor(t, func() bool { return p.seen(`RequestId`) == 1 })
	close(p.gate)
	if body := <-got; !strings.Contains(body, `"id":7`) {
		t.Fatalf("the request's response ended with %q; want its answer", body)
	}
}

// TestServerIDsByValue: ids are matched by value, as the proxy and the
// upstream match them: 5.0 is in use while 5 is, and an answer under 5 is
// the answer to a request sent as 5.0.
func TestServerIDsByValue(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{})
	sid := start(t, hs.URL, nil)
	// The slow request stays open past the checks; it is cut and waited
	// for at the end, so it never reports after the test returns.
	slowCtx, stopSlow := context.WithCancel(t.Context())
	slowDone := make(chan struct{})
	defer func() { stopSlow(); <-slowDone }()
	go func() {
		defer close(slowDone)
		req, _ := http.NewRequestWithContext(slowCtx, "POST", hs.URL, strings.NewReader(`{"jsonrpc":"2.0","id":5,"method":"slow"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range session(sid) {
			req.Header.Set(k, v)
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	waitFor(t, func() bool { return p.seen(`"slow"`) == 1 })
	resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":5.0,"method":"ping"}`, session(sid))
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("a request under 5.0 while 5 runs: %s, want 400", resp.Status)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	resp = do(t, ctx, "POST", hs.URL, `{"jsonrpc":"2.0","id":7.0,"method":"asint"}`, session(sid))
	defer resp.Body.Close()
	if msgs := readEvents(t, resp.Body); len(msgs) != 1 || !strings.Contains(msgs[0].data, `"id":7,"result"`) {
		t.Fatalf("a request sent as 7.0 and answered as 7 got %v; want the answer", msgs)
	}
}

// TestEvictedBeforeWrittenEndsTheStream: an answer the session's bound
// evicted before a writer took it (a burst of messages behind it) does not
// leave the stream waiting for it for ever: the stream ends without it,
// and a JSON answer says to send the request again, not 202.
func TestEvictedBeforeWrittenEndsTheStream(t *testing.T) {
	for _, json := range []bool{false, true} {
		srv := NewServer(ServerOptions{EventBuffer: 2, Actor: "alice", Open: func(context.Context, *ServerSession) error { return nil }})
		ss := newServerSession(srv, "s", "alice", "", false)
		ss.mu.Lock()
		call := ss.newStreamLocked()
		call.isJSON = json
		ss.appendLocked(call, []byte(`{"jsonrpc":"2.0","id":1,"result":{}}`))
		ss.endLocked(call)
		get := ss.getStreamLocked()
		for range 3 {
			ss.appendLocked(get, []byte(`{"jsonrpc":"2.0","method":"notifications/message","params":{}}`))
		}
		evicted := len(call.events) == 0
		ss.mu.Unlock()
		if !evicted {
			t.Fatal("the burst did not evict the answer; the test needs it to")
		}
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/mcp", nil)
		ended := make(chan struct{})
		go func() {
			defer close(ended)
			if json {
				srv.answerJSON(rec, req, ss, call)
			} else {
				srv.pump(rec, req, ss, call, 0)
			}
		}()
		select {
		case <-ended:
		case <-time.After(5 * time.Second):
			t.Fatalf("json=%v: the stream still waits for an answer that was evicted", json)
		}
		if json && (rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "send the request again")) {
			t.Fatalf("json: %d %s; want 503 saying to send the request again", rec.Code, rec.Body)
		}
	}
}

// TestJSONBatchShortOfAnAnswerIsRefused: a batch answered with one JSON
// body, one of whose answers the session's bound evicted before it was
// written, gets a 503 saying to send the request again, not an array
// short of that answer, which the client could not tell from a whole one.
func TestJSONBatchShortOfAnAnswerIsRefused(t *testing.T) {
	srv := NewServer(ServerOptions{EventBuffer: 2, Actor: "alice", Open: func(context.Context, *ServerSession) error { return nil }})
	ss := newServerSession(srv, "s", "alice", "", false)
	ss.mu.Lock()
	call := ss.newStreamLocked()
	call.isJSON, call.isBatch = true, true
	ss.appendLocked(call, []byte(`{"jsonrpc":"2.0","id":1,"result":{}}`))
	ss.appendLocked(call, []byte(`{"jsonrpc":"2.0","id":2,"result":{}}`))
	ss.endLocked(call)
	ss.appendLocked(ss.getStreamLocked(), []byte(`{"jsonrpc":"2.0","method":"notifications/message","params":{}}`))
	held := len(call.events)
	ss.mu.Unlock()
	if held != 1 {
		t.Fatalf("the stream holds %d answers; the test needs one of the two evicted", held)
	}
	rec := httptest.NewRecorder()
	srv.answerJSON(rec, httptest.NewRequest(http.MethodPost, "/mcp", nil), ss, call)
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "1 of the 2 answers") || !strings.Contains(rec.Body.String(), "send the request again") {
		t.Fatalf("%d %s; want 503 saying 1 of the 2 answers was dropped", rec.Code, rec.Body)
	}
}
