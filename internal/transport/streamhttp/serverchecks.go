package streamhttp

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
)

// A token is a bearer token, kept as its SHA-256 so that every comparison
// takes the same time whatever the lengths.
type token struct {
	sum   [sha256.Size]byte
	actor string
}

// singleHeaders are the headers a Server reads one value of. A request
// that repeats one is refused: Get reads the first, and a proxy or server
// before or after this one may read the last (two Origin headers, loopback
// then foreign, were accepted). Go's server already refuses two Hosts.
var singleHeaders = []string{"Origin", "Authorization", "Content-Type", headerSessionID, headerProtocolVersion,
	headerLastEventID, headerMcpMethod, headerMcpName}

// checkSource applies the checks every request passes first, a CORS
// preflight included: no header the server reads given twice, Host, and
// Origin.
func (s *Server) checkSource(r *http.Request) *httpError {
	for _, name := range singleHeaders {
		if len(r.Header.Values(name)) > 1 {
			return refuse(http.StatusBadRequest, "the %s header is given %d times: send it once", name, len(r.Header.Values(name)))
		}
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if !s.hostAllowed(hostName(host)) {
		return refuse(http.StatusForbidden, "Host %q is not allowed: the proxy answers loopback names and the hosts given with --allow-host or --allow-origin", r.Host)
	}
	if origin := r.Header.Get("Origin"); origin != "" && !s.originAllowed(origin) {
		return refuse(http.StatusForbidden, "Origin %q is not allowed: give it with --allow-origin to accept it", origin)
	}
	return nil
}

// checkCaller applies the checks that follow checkSource: the bearer
// token, and the protocol version. It returns the request's actor.
func (s *Server) checkCaller(r *http.Request) (string, *httpError) {
	actor := s.opts.Actor
	if s.auth {
		var ok bool
		if actor, ok = s.authenticate(r); !ok {
			return "", &httpError{status: http.StatusUnauthorized, msg: "a valid bearer token is required (Authorization: Bearer TOKEN)",
				header: http.Header{"Www-Authenticate": {`Bearer realm="mcp-idempotent"`}}}
		}
	}
	// The versions an initialize through the proxy may agree on. A
	// request without the header is taken as 2025-03-26, as the spec says.
	if v := r.Header.Get(headerProtocolVersion); v != "" && !mcp.Negotiable(v) {
		return "", unsupportedVersion(headerProtocolVersion, v)
	}
	return actor, nil
}

// codeUnsupportedVersion is the JSON-RPC error code of a request naming
// a protocol version the server does not support (the 2026-07-28
// protocol's UnsupportedProtocolVersionError). Its data lists the
// versions supported, from which a client such as the go-sdk's picks one
// and asks again, where another code makes it fall back to initialize.
const codeUnsupportedVersion = -32022

// unsupportedVersion refuses a request that names, in where, the
// protocol version v, which the proxy may not agree on: it has not that
// version's rules.
func unsupportedVersion(where, v string) *httpError {
	e := refuse(http.StatusBadRequest, "unsupported %s %q: this proxy speaks %s", where, v, strings.Join(mcp.Versions, ", "))
	e.code = codeUnsupportedVersion
	e.data, _ = json.Marshal(struct {
		Supported []string `json:"supported"`
		Requested string   `json:"requested"`
	}{mcp.Versions, v})
	return e
}

// hostName is host as the Host and Origin checks compare it: lower case,
// without IPv6 brackets, and without a DNS name's final dot, for
// "a.example." and "a.example" are one host.
func hostName(host string) string {
	return strings.TrimSuffix(strings.Trim(strings.ToLower(host), "[]"), ".")
}

func isLoopbackName(host string) bool {
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (s *Server) hostAllowed(host string) bool {
	if host == "" {
		return false // an --allow-host of "." must not admit a request without a Host
	}
	if isLoopbackName(host) || slices.Contains(s.opts.AllowHosts, host) {
		return true
	}
	for _, o := range s.opts.AllowOrigins {
		if u, err := url.Parse(o); err == nil && hostName(u.Hostname()) == host {
			return true
		}
	}
	return false
}

func (s *Server) originAllowed(origin string) bool {
	for _, o := range s.opts.AllowOrigins {
		if o == "*" || strings.EqualFold(strings.TrimSuffix(o, "/"), origin) || sameOrigin(o, origin) {
			return true
		}
	}
	u, err := url.Parse(origin)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && isLoopbackName(hostName(u.Hostname()))
}

// authenticate finds the actor of the request's bearer token, comparing
// it with every token in constant time.
func (s *Server) authenticate(r *http.Request) (string, bool) {
	scheme, cred, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(cred)))
	actor, found := "", 0
	for _, t := range s.tokens {
		if subtle.ConstantTimeCompare(sum[:], t.sum[:]) == 1 {
			actor, found = t.actor, 1
		}
	}
	return actor, found == 1
}

// accepts reports whether the Accept header lists mediaType (or a range
// covering it). The most specific range that covers it decides, and one
// of weight q=0 says the client cannot take it (RFC 9110, section 12.5.1).
func accepts(r *http.Request, mediaType string) bool {
	major, _, _ := strings.Cut(mediaType, "/")
	best, ok := 0, false // how specific the deciding range is, and its say
	for _, v := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil {
				continue
			}
			rank := 0
			switch mt {
			case mediaType:
				rank = 3
			case major + "/*":
				rank = 2
			case "*/*":
				rank = 1
			}
			if rank > best {
				q, err := strconv.ParseFloat(params["q"], 64)
				best, ok = rank, err != nil || q > 0
			}
		}
	}
	return ok
}

// sameOrigin reports whether origins a and b are one, a default port
// given or not: a browser leaves out 443 for https and 80 for http, and
// an --allow-origin may name it.
func sameOrigin(a, b string) bool {
	ua, err1 := url.Parse(a)
	ub, err2 := url.Parse(b)
	if err1 != nil || err2 != nil || ua.Host == "" || ub.Host == "" {
		return false
	}
	port := func(u *url.URL) string {
		if p := u.Port(); p != "" {
			return p
		}
		return map[string]string{"http": "80", "https": "443"}[strings.ToLower(u.Scheme)]
	}
	return strings.EqualFold(ua.Scheme, ub.Scheme) && hostName(ua.Hostname()) == hostName(ub.Hostname()) && port(ua) == port(ub)
}
