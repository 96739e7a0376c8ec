package streamhttp

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/jsonrpc"
)

// progressOn returns the progress tokens of the notifications/progress
// among msgs, as written.
func progressOn(msgs []testEvent) []string {
	var tokens []string
	for _, m := range msgs {
		if strings.Contains(m.data, `"method":"notifications/progress"`) {
			tokens = append(tokens, string(progressTokenValue(jsonrpc.Member([]byte(m.data), "params"))))
		}
	}
	return tokens
}

// openGet opens the session's GET stream and waits until the server
// writes to it: a message that goes nowhere else goes there then.
func openGet(t *testing.T, srv *Server, url, sid string) io.Closer {
	t.Helper()
	get := do(t, t.Context(), "GET", url, "", session(sid))
	if get.StatusCode != 200 {
		t.Fatalf("GET: %s", get.Status)
	}
	waitFor(t, func() bool {
		srv.mu.Lock()
		ss := srv.sessions[sid]
		srv.mu.Unlock()
		ss.mu.Lock()
		defer ss.mu.Unlock()
		return ss.get != nil && ss.get.writer != 0
	})
	return get.Body
}

// TestServerProgressRespelled: an upstream may write a request's progress
// token another way, as the same value (1.0 as 1, "a" as "\u0061"): the
// progress still goes on the request's own stream, under the token as
// the client wrote it, in a session with its GET stream open and on a
// stateless lane, which renames tokens.
func TestServerProgressRespelled(t *testing.T) {
	for _, token := range []string{`1.0`, `1`, `2e0`, `"a"`, `"a<b"`, `"é"`} {
		t.Run("session "+token, func(t *testing.T) {
			srv, _, hs := newTestServer(t, ServerOptions{})
			sid := openSession(t, hs.URL)
			defer openGet(t, srv, hs.URL, sid).Close()
			resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":2,"method":"respell","params":{"_meta":{"progressToken":`+token+`}}}`, session(sid))
			defer resp.Body.Close()
			msgs := readEvents(t, resp.Body)
			if got := progressOn(msgs); len(got) != 1 || got[0] != token {
				t.Fatalf("the request's stream carried %v; want the progress under %s, and the answer", msgs, token)
			}
		})
		t.Run("stateless "+token, func(t *testing.T) {
			_, _, hs := newTestServer(t, ServerOptions{})
			hdr := map[string]string{headerProtocolVersion: "2026-07-28", headerMcpMethod: "respell"}
			resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":2,"method":"respell","params":{"_meta":{"progressToken":`+token+`,"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, hdr)
			defer resp.Body.Close()
			msgs := readEvents(t, resp.Body)
			if got := progressOn(msgs); len(got) != 1 || got[0] != token {
				t.Fatalf("the request's stream carried %v; want the progress under %s, and the answer", msgs, token)
			}
		})
	}
}

// TestServerProgressNumberAndString: requests under way at once with the
// tokens 1 and "1", two tokens, each get their own progress.
func TestServerProgressNumberAndString(t *testing.T) {
	srv, p, hs := newTestServer(t, ServerOptions{})
	sid := openSession(t, hs.URL)
	defer openGet(t, srv, hs.URL, sid).Close()
	got := make(map[string]chan []string)
	for i, token := range []string{`1`, `"1"`} {
		ch := make(chan []string, 1)
		got[token] = ch
		go func() {
			resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":`+strconv.Itoa(2+i)+`,"method":"respell","params":{"hold":true,"_meta":{"progressToken":`+token+`}}}`, session(sid))
			defer resp.Body.Close()
			ch <- progressOn(readEvents(t, resp.Body))
		}()
	}
	waitFor(t, func() bool { return p.seen(`"respell"`) == 2 })
	close(p.gate)
	for token, ch := range got {
		if tokens := <-ch; len(tokens) != 1 || tokens[0] != token {
			t.Errorf("the request on token %s was told progress on %v; want its own, once", token, tokens)
		}
	}
}

// TestServerStatelessLateProgress: on a stateless lane, progress on a
// request already answered reaches no client: not another client's
// request stream, under a token the lane gave, which that client could
// take for its own.
func TestServerStatelessLateProgress(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{})
	post := func(id, method, token string) *http.Response {
		hdr := map[string]string{headerProtocolVersion: "2026-07-28", headerMcpMethod: method}
		return do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":`+id+`,"method":"`+method+`","params":{"_meta":{"progressToken":`+token+`,"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, hdr)
	}
	other := make(chan []testEvent, 1)
	go func() {
		resp := post("1", "slow", `"p2"`)
		defer resp.Body.Close()
		other <- readEvents(t, resp.Body)
	}()
	waitFor(t, func() bool { return p.seen(`"slow"`) == 1 })
	resp := post("1", "late", `"tok"`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	for id := range p.routed {
		if id == "late progress" {
			break
		}
	}
	close(p.gate)
	if msgs := <-other; len(progressOn(msgs)) != 0 {
		t.Fatalf("another client's request stream carried %v; want its answer alone", msgs)
	}
}

// TestServerTokenOnlyInMeta: a request's progress token is the one in its
// _meta. A member "progressToken" of its params is the request's own: on
// a stateless lane, which renames tokens, it goes upstream as it came.
func TestServerTokenOnlyInMeta(t *testing.T) {
	_, p, hs := newTestServer(t, ServerOptions{})
	hdr := map[string]string{headerProtocolVersion: "2026-07-28", headerMcpMethod: "echo"}
	resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":1,"method":"echo","params":{"progressToken":"mine","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, hdr)
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if p.seen(`"params":{"progressToken":"mine"`) != 1 {
		t.Errorf("the proxy read %q; want the params as the client sent them", p.frames)
	}
}

// TestServerProgressMetaFirst: a notifications/progress whose params give
// _meta before the token (as the go-sdk writes them) goes on the stream
// of the request whose token it names.
func TestServerProgressMetaFirst(t *testing.T) {
	srv, _, hs := newTestServer(t, ServerOptions{})
	sid := openSession(t, hs.URL)
	defer openGet(t, srv, hs.URL, sid).Close()
	resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":2,"method":"metafirst","params":{"_meta":{"progressToken":"tok"}}}`, session(sid))
	defer resp.Body.Close()
	msgs := readEvents(t, resp.Body)
	if got := progressOn(msgs); len(got) != 1 || got[0] != `"tok"` {
		t.Fatalf("the request's stream carried %v; want the progress, and the answer", msgs)
	}
}

// TestServerProgressTokenTwice: progress whose params give progressToken
// twice goes nowhere. Routed by the first, the request's, it would reach
// a client whose parser reads the last and files it under another
// request, or none.
func TestServerProgressTokenTwice(t *testing.T) {
	t.Run("session", func(t *testing.T) {
		srv, _, hs := newTestServer(t, ServerOptions{})
		sid := openSession(t, hs.URL)
		defer openGet(t, srv, hs.URL, sid).Close()
		resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":2,"method":"twotokens","params":{"_meta":{"progressToken":"tok"}}}`, session(sid))
		defer resp.Body.Close()
		if msgs := readEvents(t, resp.Body); len(progressOn(msgs)) != 0 {
			t.Fatalf("the request's stream carried %v; want the answer alone", msgs)
		}
	})
	t.Run("stateless", func(t *testing.T) {
		_, _, hs := newTestServer(t, ServerOptions{})
		hdr := map[string]string{headerProtocolVersion: "2026-07-28", headerMcpMethod: "twotokens"}
		resp := do(t, t.Context(), "POST", hs.URL, `{"jsonrpc":"2.0","id":2,"method":"twotokens","params":{"_meta":{"progressToken":"tok","io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, hdr)
		defer resp.Body.Close()
		if msgs := readEvents(t, resp.Body); len(progressOn(msgs)) != 0 {
			t.Fatalf("the request's stream carried %v; want the answer alone", msgs)
		}
	})
}
