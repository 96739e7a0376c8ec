package streamhttp

import (
	"net/http"
	"strings"
)

// corsExposed are the response headers, besides the CORS-safelisted ones,
// that a page of an accepted origin may read: without Mcp-Session-Id a
// browser client could open a session and never use it.
const corsExposed = "Mcp-Session-Id, Www-Authenticate, Retry-After, Allow"

// allowCORS lets the page that sent r read the answer. It is called once
// r's Origin has passed the check: a browser hides from the page any
// answer without Access-Control-Allow-Origin, refusals (401) included.
func allowCORS(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Add("Vary", "Origin")
	origin := r.Header.Get("Origin")
	if origin == "" {
		return
	}
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Expose-Headers", corsExposed)
}

// isPreflight reports whether r is a browser's CORS preflight. A browser
// sends one before every POST of JSON, and before any request with an
// Authorization, Mcp-Session-Id or MCP-Protocol-Version header, from a
// page of another origin (a loopback page on another port is one).
func isPreflight(r *http.Request) bool {
	return r.Method == http.MethodOptions && r.Header.Get("Origin") != "" &&
		r.Header.Get("Access-Control-Request-Method") != ""
}

// preflight answers a preflight whose Origin passed the check. It carries
// no credentials, so the bearer token is asked of the request it is for.
func preflight(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Add("Vary", "Access-Control-Request-Method")
	h.Add("Vary", "Access-Control-Request-Headers")
	h.Set("Access-Control-Allow-Methods", "GET, POST, DELETE")
	// The headers asked for are allowed as named: those the server does
	// not read are ignored, and the stateless protocol's Mcp-Param-*
	// names cannot be listed ahead.
	var names []string
	for _, v := range r.Header.Values("Access-Control-Request-Headers") {
		for name := range strings.SplitSeq(v, ",") {
			if name = strings.TrimSpace(name); isToken(name) {
				names = append(names, name)
			}
		}
	}
	if len(names) > 0 {
		h.Set("Access-Control-Allow-Headers", strings.Join(names, ", "))
	}
	// Chrome asks this of a public page's request to a loopback or
	// private address (Private Network Access): serve on loopback, used
	// from an --allow-origin site, is that case.
	if r.Header.Get("Access-Control-Request-Private-Network") == "true" {
		h.Set("Access-Control-Allow-Private-Network", "true")
	}
	h.Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
}
