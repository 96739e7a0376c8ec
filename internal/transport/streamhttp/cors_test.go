package streamhttp

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestServerCORS: a browser page of an accepted origin can use the
// endpoint: its preflight is answered without a token, and every answer,
// refusals included, lets it read the body and Mcp-Session-Id. A page of
// another origin gets none of this.
func TestServerCORS(t *testing.T) {
	const app = "https://app.example.com"
	_, _, hs := newTestServer(t, ServerOptions{AllowOrigins: []string{app}, Tokens: map[string]string{"tok": "alice"}})
	preflightOf := func(origin string) *http.Response {
		req, _ := http.NewRequestWithContext(t.Context(), "OPTIONS", hs.URL, nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", "authorization,content-type,mcp-session-id,mcp-protocol-version")
		req.Header.Set("Access-Control-Request-Private-Network", "true")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}

	resp := preflightOf(app)
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != app ||
		!strings.Contains(resp.Header.Get("Access-Control-Allow-Methods"), "POST") ||
		!strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "authorization") ||
		resp.Header.Get("Access-Control-Allow-Private-Network") != "true" {
		t.Errorf("preflight from %s: %s %v; want 204 allowing the origin, POST, authorization and the private network", app, resp.Status, resp.Header)
	}
	if resp := preflightOf("https://evil.example"); resp.StatusCode != http.StatusForbidden || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("preflight from a foreign origin: %s %v; want 403 without CORS headers", resp.Status, resp.Header)
	}

	resp = do(t, t.Context(), "POST", hs.URL, initBody, map[string]string{"Origin": app})
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Access-Control-Allow-Origin") != app {
		t.Errorf("POST without a token: %s %v %s; want 401 the page can read", resp.Status, resp.Header, b)
	}
	resp = do(t, t.Context(), "POST", hs.URL, initBody, map[string]string{"Origin": app, "Authorization": "Bearer tok"})
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Access-Control-Allow-Origin") != app ||
		!strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), headerSessionID) || resp.Header.Get(headerSessionID) == "" {
		t.Errorf("initialize: %s %v; want 200 exposing Mcp-Session-Id to the page", resp.Status, resp.Header)
	}

	req, _ := http.NewRequestWithContext(t.Context(), "OPTIONS", hs.URL, nil)
	req.Header.Set("Authorization", "Bearer tok")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("OPTIONS that is not a preflight: %v %v; want 405", resp, err)
	} else {
		resp.Body.Close()
	}
}
