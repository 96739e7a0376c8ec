package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// initializeBody is a 2025-11-25 initialize request, as a client POSTs it.
const initializeBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"mcpi-e2e-raw","version":"0.0.1"}}}`

// rawReply is serve's answer to one plain HTTP request.
type rawReply struct {
	status int
	header http.Header
	body   string
}

// rawRequest sends one HTTP request to url with the headers given ("Host"
// sets the Host header) and reads the whole answer.
func rawRequest(t *testing.T, ctx context.Context, hc *http.Client, method, url string, header map[string]string, body string) rawReply {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, url, err)
	}
	return rawReply{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// postHeaders are the headers of a well-formed POST, plus extra; an extra
// header with value "" is left out.
func postHeaders(extra map[string]string) map[string]string {
	h := map[string]string{
		"Content-Type":         "application/json",
		"Accept":               "application/json, text/event-stream",
		"Mcp-Protocol-Version": "2025-11-25",
	}
	for k, v := range extra {
		if v == "" {
			delete(h, k)
		} else {
			h[k] = v
		}
	}
	return h
}

// errorCode is the JSON-RPC error code in a refusal's body, or 0.
func errorCode(body string) int {
	var m struct {
		Error *struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(body), &m) != nil || m.Error == nil {
		return 0
	}
	return m.Error.Code
}

// bearer is an http.RoundTripper that presents a bearer token.
type bearer struct {
	next  http.RoundTripper
	token string
}

func (b *bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(req)
}

// TestServeBearerTokens: with --auth-token-file, a request without a
// valid token is refused 401 with a WWW-Authenticate challenge; each
// token works, and acts for its own actor. With --scope actor, a second
// session of one actor attaches to that actor's charge, while the same
// call from the other actor is its own charge; and an actor cannot use
// another's session.
func TestServeBearerTokens(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("# token actor\ntok-alice-0123456789 alice\ntok-bob-0123456789 bob\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := serveCharge(t, []string{"--auth-token-file", tokens, "--scope", "actor"})
	if !strings.Contains(s.stderr.String(), "auth=true") {
		t.Errorf("serve's first line does not say auth=true:\n%s", s.stderr)
	}
	hc := httpClient(t)

	for _, tc := range []struct {
		name, method, auth string
	}{
		{"POST without a token", http.MethodPost, ""},
		{"POST with a wrong token", http.MethodPost, "Bearer tok-mallory"},
		{"POST with a token in the wrong scheme", http.MethodPost, "Basic tok-alice-0123456789"},
		{"GET without a token", http.MethodGet, ""},
		{"DELETE without a token", http.MethodDelete, ""},
	} {
		rep := rawRequest(t, ctx, hc, tc.method, s.url, postHeaders(map[string]string{"Authorization": tc.auth}), initializeBody)
		if rep.status != http.StatusUnauthorized {
			t.Errorf("%s: status %d, want 401; body %s", tc.name, rep.status, rep.body)
		}
		if got := rep.header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
			t.Errorf("%s: WWW-Authenticate = %q, want a Bearer challenge", tc.name, got)
		}
	}
	if strings.Contains(s.stderr.String(), "tok-") {
		t.Errorf("a token appears in serve's log:\n%s", s.stderr)
	}

	as := func(token string) *http.Client {
		base := httpClient(t)
		return &http.Client{Transport: &bearer{next: base.Transport, token: token}}
	}
	alice := connectHTTP(t, ctx, s, s.url, "2025-11-25", nil, as("tok-alice-0123456789"))
	first := charge(t, ctx, alice, "4242", 100)
	if got, want := firstText(first), "charged 100 to card 4242 (charge #1)"; got != want || replayed(first) {
		t.Fatalf("alice's charge: %q (replayed %v), want %q run", got, replayed(first), want)
	}

	// alice again, in a new session with its own upstream: the same
	// intent, so it attaches.
	alice2 := connectHTTP(t, ctx, s, s.url, "2025-11-25", nil, as("tok-alice-0123456789"))
	again := charge(t, ctx, alice2, "4242", 100)
	if !replayed(again) || answer(again) != answer(first) {
		t.Errorf("alice's second session: %s (replayed %v), want alice's charge replayed: %s", answer(again), replayed(again), answer(first))
	}
	if n := executions(t, ctx, alice2); n != 0 {
		t.Errorf("alice's second upstream charged %d times, want 0", n)
	}

	// bob, the same call: another actor, another intent.
	bob := connectHTTP(t, ctx, s, s.url, "2025-11-25", nil, as("tok-bob-0123456789"))
	bobs := charge(t, ctx, bob, "4242", 100)
	if got, want := firstText(bobs), "charged 100 to card 4242 (charge #1)"; got != want || replayed(bobs) {
		t.Errorf("bob's charge: %q (replayed %v), want %q run", got, replayed(bobs), want)
	}
	if n := executions(t, ctx, alice) + executions(t, ctx, bob); n != 2 {
		t.Errorf("two actors made the identical call: %d charges, want 2", n)
	}

	// bob's token on alice's session: as unknown to bob as a session that
	// never was.
	rep := rawRequest(t, ctx, hc, http.MethodPost, s.url, postHeaders(map[string]string{
		"Authorization":  "Bearer tok-bob-0123456789",
		"Mcp-Session-Id": alice.ID(),
	}), `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"charges","arguments":{}}}`)
	if rep.status != http.StatusNotFound {
		t.Errorf("bob's token on alice's session: status %d, want 404; body %s", rep.status, rep.body)
	}

	// Host and Origin are checked before the token.
	for name, h := range map[string]map[string]string{
		"foreign Origin": {"Origin": "https://evil.example"},
		"foreign Host":   {"Host": "evil.example"},
	} {
		h["Authorization"] = "Bearer tok-alice-0123456789"
		rep := rawRequest(t, ctx, hc, http.MethodPost, s.url, postHeaders(h), initializeBody)
		if rep.status != http.StatusForbidden {
			t.Errorf("%s with a valid token: status %d, want 403; body %s", name, rep.status, rep.body)
		}
	}
}

// TestServeRefusesBadRequests: each malformed or unwelcome request gets
// its HTTP status and a JSON-RPC error body, and serve goes on serving.
func TestServeRefusesBadRequests(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s := serveCharge(t, []string{"--max-message-size", "64KiB"})
	hc := httpClient(t)
	big := `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"` + strings.Repeat("x", 65<<10) + `"}}`
	ping := `{"jsonrpc":"2.0","id":1,"method":"ping"}`

	for _, tc := range []struct {
		name   string
		header map[string]string
		body   string
		status int
		code   int // the JSON-RPC error code in the body
	}{
		{"wrong Content-Type", map[string]string{"Content-Type": "text/plain"}, initializeBody, http.StatusUnsupportedMediaType, -32600},
		{"no Accept", map[string]string{"Accept": ""}, initializeBody, http.StatusNotAcceptable, -32600},
		{"Accept without text/event-stream", map[string]string{"Accept": "application/json"}, initializeBody, http.StatusNotAcceptable, -32600},
		{"body over --max-message-size", nil, big, http.StatusRequestEntityTooLarge, -32600},
		{"not JSON", nil, `{"jsonrpc":"2.0",`, http.StatusBadRequest, -32700},
		{"unknown session", map[string]string{"Mcp-Session-Id": "0123456789abcdef0123456789abcdef"}, ping, http.StatusNotFound, -32600},
		{"unsupported protocol version", map[string]string{"Mcp-Protocol-Version": "2099-01-01"}, initializeBody, http.StatusBadRequest, -32022},
		{"foreign Origin", map[string]string{"Origin": "https://evil.example"}, initializeBody, http.StatusForbidden, -32600},
		{"foreign Host", map[string]string{"Host": "evil.example:80"}, initializeBody, http.StatusForbidden, -32600},
		{"foreign Origin named like loopback", map[string]string{"Origin": "http://localhost.evil.example"}, initializeBody, http.StatusForbidden, -32600},
		{"foreign Host named like loopback", map[string]string{"Host": "127.0.0.1.evil.example"}, initializeBody, http.StatusForbidden, -32600},
		{"no session, not initialize", map[string]string{"Mcp-Protocol-Version": ""}, ping, http.StatusBadRequest, -32600},
	} {
		rep := rawRequest(t, ctx, hc, http.MethodPost, s.url, postHeaders(tc.header), tc.body)
		if rep.status != tc.status {
			t.Errorf("%s: status %d, want %d; body %s", tc.name, rep.status, tc.status, rep.body)
		}
		if got := errorCode(rep.body); got != tc.code {
			t.Errorf("%s: body %s, want a JSON-RPC error with code %d", tc.name, rep.body, tc.code)
		}
		if rep.header.Get("Mcp-Session-Id") != "" {
			t.Errorf("%s: a refused request was given a session", tc.name)
		}
	}

	for _, tc := range []struct {
		method string
		allow  string
	}{
		{http.MethodGet, "POST"}, // no session, so no stream
		{http.MethodPut, "GET, POST, DELETE"},
	} {
		rep := rawRequest(t, ctx, hc, tc.method, s.url, postHeaders(map[string]string{"Accept": "text/event-stream"}), "")
		if rep.status != http.StatusMethodNotAllowed || rep.header.Get("Allow") != tc.allow {
			t.Errorf("%s without a session: status %d, Allow %q; want 405, Allow %q", tc.method, rep.status, rep.header.Get("Allow"), tc.allow)
		}
	}

	// A loopback page is a welcome Origin, and serve still works.
	rep := rawRequest(t, ctx, hc, http.MethodPost, s.url, postHeaders(map[string]string{"Origin": "http://localhost:3000"}), initializeBody)
	if rep.status != http.StatusOK || rep.header.Get("Mcp-Session-Id") == "" {
		t.Errorf("initialize from a loopback Origin: status %d, session %q; want 200 and a session; body %s", rep.status, rep.header.Get("Mcp-Session-Id"), rep.body)
	}
	p := connectHTTP(t, ctx, s, s.url, "2025-11-25", nil, hc)
	charge(t, ctx, p, "4242", 1)
}

// rawSession is a session a test drives by hand, one HTTP request at a
// time.
type rawSession struct {
	t   *testing.T
	hc  *http.Client
	url string
	id  string
}

// openRawSession initialises a 2025-11-25 session by hand.
func openRawSession(t *testing.T, ctx context.Context, hc *http.Client, url string) *rawSession {
	t.Helper()
	return openRawSessionAfter(t, ctx, hc, url, rawRequest(t, ctx, hc, http.MethodPost, url, postHeaders(nil), initializeBody))
}

// openRawSessionWhenFree is openRawSession for a serve at its
// --max-sessions: it initialises again while it is told 503, as a client
// honouring Retry-After would (here every 50 ms).
func openRawSessionWhenFree(t *testing.T, ctx context.Context, hc *http.Client, url string) *rawSession {
	t.Helper()
	for {
		rep := rawRequest(t, ctx, hc, http.MethodPost, url, postHeaders(nil), initializeBody)
		if rep.status != http.StatusServiceUnavailable {
			return openRawSessionAfter(t, ctx, hc, url, rep)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("initialize: still 503 (%s) when the test timed out", rep.body)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// openRawSessionAfter completes the session rep, the answer to
// initialize, opened.
func openRawSessionAfter(t *testing.T, ctx context.Context, hc *http.Client, url string, rep rawReply) *rawSession {
	t.Helper()
	if rep.status != http.StatusOK || rep.header.Get("Mcp-Session-Id") == "" {
		t.Fatalf("initialize: status %d, session %q; body %s", rep.status, rep.header.Get("Mcp-Session-Id"), rep.body)
	}
	rs := &rawSession{t: t, hc: hc, url: url, id: rep.header.Get("Mcp-Session-Id")}
	if rep := rs.post(ctx, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); rep.status != http.StatusAccepted {
		t.Fatalf("notifications/initialized: status %d, want 202; body %s", rep.status, rep.body)
	}
	return rs
}

func (rs *rawSession) headers() map[string]string {
	return postHeaders(map[string]string{"Mcp-Session-Id": rs.id})
}

// post sends body in the session and reads the whole answer.
func (rs *rawSession) post(ctx context.Context, body string) rawReply {
	rs.t.Helper()
	return rawRequest(rs.t, ctx, rs.hc, http.MethodPost, rs.url, rs.headers(), body)
}

// stream sends req (POST with body, or GET) in the session and returns the
// answer with its body still open, for reading event by event.
func (rs *rawSession) stream(ctx context.Context, method, body string, extra map[string]string) *http.Response {
	rs.t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, rs.url, strings.NewReader(body))
	if err != nil {
		rs.t.Fatal(err)
	}
	for k, v := range rs.headers() {
		req.Header.Set(k, v)
	}
	for k, v := range extra {
		req.Header.Set(k, v)
	}
	resp, err := rs.hc.Do(req)
	if err != nil {
		rs.t.Fatalf("%s: %v", method, err)
	}
	return resp
}

// TestServeBrowserPage: a browser page of an --allow-origin site can use
// serve, as a browser asks: its CORS preflight is answered without a
// token, and the answers let the page read the body and Mcp-Session-Id.
// An --allow-host given in capitals matches the Host as browsers send it.
func TestServeBrowserPage(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	const app = "https://app.example.com"
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("tok-page-0123456789 page\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := serveCharge(t, []string{"--auth-token-file", tokens, "--allow-origin", app, "--allow-host", "MCP.Example.org"})
	hc := httpClient(t)

	rep := rawRequest(t, ctx, hc, http.MethodOptions, s.url, map[string]string{
		"Origin":                         app,
		"Access-Control-Request-Method":  "POST",
		"Access-Control-Request-Headers": "authorization, content-type, mcp-protocol-version",
	}, "")
	if rep.status != http.StatusNoContent || rep.header.Get("Access-Control-Allow-Origin") != app ||
		!strings.Contains(rep.header.Get("Access-Control-Allow-Headers"), "authorization") {
		t.Errorf("preflight: %d %v %s; want 204 allowing %s and its headers", rep.status, rep.header, rep.body, app)
	}

	rep = rawRequest(t, ctx, hc, http.MethodPost, s.url, postHeaders(map[string]string{
		"Origin":        app,
		"Authorization": "Bearer tok-page-0123456789",
		"Host":          "mcp.example.org",
	}), initializeBody)
	if rep.status != http.StatusOK || rep.header.Get("Access-Control-Allow-Origin") != app ||
		!strings.Contains(rep.header.Get("Access-Control-Expose-Headers"), "Mcp-Session-Id") || rep.header.Get("Mcp-Session-Id") == "" {
		t.Errorf("initialize from the page: %d %v %s; want 200 the page can read, with its session id", rep.status, rep.header, rep.body)
	}
}

// TestServeAnyOriginWarns: --allow-origin * lets any web page read the
// answers, so without a token file serve says so when it starts.
func TestServeAnyOriginWarns(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s := serveCharge(t, []string{"--allow-origin", "*"})
	rep := rawRequest(t, ctx, httpClient(t), http.MethodPost, s.url, postHeaders(map[string]string{"Origin": "https://any.example"}), initializeBody)
	if rep.status != http.StatusOK || rep.header.Get("Access-Control-Allow-Origin") != "https://any.example" {
		t.Errorf("initialize from any page: %d %v; want 200 the page can read", rep.status, rep.header)
	}
	if !strings.Contains(s.stderr.String(), "--allow-origin * without --auth-token-file") {
		t.Errorf("serve's log does not warn of --allow-origin * without a token file:\n%s", s.stderr)
	}
}
