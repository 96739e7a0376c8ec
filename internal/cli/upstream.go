package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	neturl "net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/transport/streamhttp"
)

// headerFlags collects repeated --upstream-header values.
type headerFlags []string

func (h *headerFlags) String() string { return fmt.Sprintf("%d headers", len(*h)) }

// Set takes any value: check refuses bad ones, in words of its own. The
// flag package's error would quote the value, which may be a credential.
func (h *headerFlags) Set(v string) error {
	*h = append(*h, v)
	return nil
}

// check refuses a header that is not 'Name: value' or that net/http could
// not send, naming the header but never showing its value: checked here,
// not at the first request, since a request that cannot be built is one
// the upstream never saw.
func (h headerFlags) check() error {
	for i, v := range h {
		name, value, ok := strings.Cut(v, ":")
		switch {
		case !ok:
			return usagef("--upstream-header (number %d): want 'Name: value'", i+1)
		case !isToken(name):
			return usagef("--upstream-header (number %d): want 'Name: value', Name a header name (letters, digits and !#$%%&'*+-.^_`|~, no spaces)", i+1)
		case sentAnyway(name, value):
			// Copied from a curl example: what the proxy sends.
		case ownHeader(name) != "":
			return usagef("--upstream-header %s: %s", name, ownHeader(name))
		case strings.ContainsFunc(strings.TrimSpace(value), func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }):
			return usagef("--upstream-header %s: the value holds a control character (a line break?), which a header cannot", name)
		case !utf8.ValidString(value):
			// The upstream's identity holds its headers as JSON text,
			// where each byte that is not UTF-8 becomes U+FFFD: two
			// credentials that differ only there would be one upstream.
			return usagef("--upstream-header %s: the value is not UTF-8 text", name)
		}
	}
	return nil
}

// ownHeader says why a header named name cannot be given with
// --upstream-header, or "" if it can. net/http writes some from the
// request and drops a value given for them; the proxy sets others as
// MCP's transport asks, and its own value wins, or the one given goes
// where it must not (a session id on the initialize). Taken, the flag
// would be ignored: `Host: api.example.com` still sent the URL's host.
func ownHeader(name string) string {
	switch k := http.CanonicalHeaderKey(name); {
	case k == "Host":
		return "net/http sends the host of the --upstream URL, and drops this header: give the host in the URL"
	case k == "Content-Length" || k == "Transfer-Encoding" || k == "Trailer":
		return "net/http writes it from the request's body, and drops this header"
	case k == "Accept-Encoding":
		// Given, net/http leaves the answers encoded: each would be
		// taken for one that is not JSON, after the call ran.
		return "net/http asks for gzip itself and decodes it; with this header it decodes nothing, and the proxy cannot read the answers"
	case sentValues[k] != "":
		return "a header of MCP's HTTP transport: the proxy sets it itself, to " + strings.ReplaceAll(sentValues[k], ",", ", ")
	case slices.Contains(transportHeaders, k) || strings.HasPrefix(k, "Mcp-Param-"):
		return "a header of MCP's HTTP transport: the proxy sets it itself"
	}
	return ""
}

// sentValues are the values the proxy sends for the transport's headers
// that have one on every POST, canonical: media types in lower case,
// sorted.
var sentValues = map[string]string{
	"Content-Type": "application/json",
	"Accept":       "application/json,text/event-stream",
}

// sentAnyway reports whether the header name: value asks for what the
// proxy sends anyway, as curl examples of MCP servers give it: media
// types compared in any case, and Accept's list in any order and spacing.
func sentAnyway(name, value string) bool {
	want, ok := sentValues[http.CanonicalHeaderKey(name)]
	if !ok {
		return false
	}
	types := strings.Split(strings.ToLower(value), ",")
	for i, t := range types {
		types[i] = strings.TrimSpace(t)
	}
	slices.Sort(types)
	return strings.Join(slices.Compact(types), ",") == want
}

// warnSentAnyway says, at start, which headers given are ignored because
// the proxy sends them with that value anyway.
func (h headerFlags) warnSentAnyway(log *slog.Logger) {
	for _, v := range h {
		if name, value, _ := strings.Cut(v, ":"); sentAnyway(name, value) {
			log.Warn("--upstream-header " + strings.TrimSpace(name) + ": ignored: the proxy sets this header itself, to this value")
		}
	}
}

// transportHeaders are the headers MCP's Streamable HTTP transport
// defines, or the proxy sets for it, canonical (http.CanonicalHeaderKey).
var transportHeaders = []string{"Content-Type", "Accept", "Last-Event-Id", "Mcp-Session-Id", "Mcp-Protocol-Version", "Mcp-Method", "Mcp-Name"}

// isToken reports whether s is an HTTP token (RFC 9110 section 5.6.2),
// as a header name must be.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9':
		case strings.ContainsRune("!#$%&'*+-.^_`|~", r):
		default:
			return false
		}
	}
	return true
}

// upstreamClient sends every request to an HTTP upstream, for every
// session: one pool of connections. Each call in flight holds a connection
// for its answer's stream, so the pool keeps more idle connections than
// http.DefaultTransport's two, which under concurrent calls would open a
// new connection for nearly every call.
var upstreamClient = &http.Client{Transport: func() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	return t
}()}

// dialUpstream connects to a Streamable HTTP upstream, and returns it
// with its identity (upstreamIdentity).
func dialUpstream(ctx context.Context, rawURL string, headers headerFlags, h *fingerprint.Hasher, log *slog.Logger, maxMessage int) (*streamhttp.Client, string, error) {
	u, err := neturl.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, "", usagef("--upstream: %q is not an http:// or https:// URL", redact(rawURL))
	}
	hdr := http.Header{}
	for _, v := range headers {
		name, value, _ := strings.Cut(v, ":")
		if sentAnyway(name, value) {
			// Ignored, as warnSentAnyway said: sent twice otherwise, and
			// part of the identity, which it does not change.
			continue
		}
		hdr.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	id, err := upstreamIdentity(u, hdr, h)
	if err != nil {
		return nil, "", err
	}
	c, err := streamhttp.Dial(ctx, rawURL, streamhttp.Options{Header: hdr, Logger: log, MaxMessage: maxMessage, HTTPClient: upstreamClient})
	if err != nil {
		return nil, "", fmt.Errorf("--upstream %s: %w", redact(rawURL), err)
	}
	log.Debug("upstream", "upstream", id)
	return c, id, nil
}

// upstreamIdentity returns the identity of the upstream at u, which
// enters every fingerprint: the URL without credentials, normalised, plus
// a keyed hash of the headers given, the URL's user and its query (which
// may carry a credential). The same call made with two credentials is then
// two executions, and no credential is ever stored or logged in clear.
func upstreamIdentity(u *neturl.URL, hdr http.Header, h *fingerprint.Hasher) (string, error) {
	id := "http:" + normalURL(u)
	if len(hdr) == 0 && u.User == nil && u.RawQuery == "" {
		return id, nil
	}
	// A keyed hash, so the reference tells credentials apart without
	// being a guessable digest of them.
	names := make([]string, 0, len(hdr))
	for n := range hdr {
		names = append(names, n)
	}
	sort.Strings(names)
	cred, _ := json.Marshal(map[string]any{"headers": hdr, "order": names, "userinfo": u.User.String(), "query": u.RawQuery})
	ref, err := h.Sum(fingerprint.Action{Tool: "upstream credential", Extra: map[string]json.RawMessage{"credential": cred}})
	if errors.Is(err, fingerprint.ErrNoSecret) {
		// Its identity is keyed by the secret, which a store that
		// could not be reached, or could not store it, has not given yet. Say what to do:
		// the store's error alone reads as one the proxy waits out.
		return "", errors.New("the upstream's identity, keyed by its credentials (--upstream-header, or the URL's user or query), " +
			"needs the fingerprint secret the store keeps, and the store cannot be reached or takes no writes: " +
			"set MCP_IDEMPOTENT_SECRET, or start again once the store answers")
	}
	if err != nil {
		return "", fmt.Errorf("the upstream's identity, keyed by its credentials: %w", err)
	}
	return id + " credential:" + ref[:16], nil
}

// normalURL returns u's scheme, host and path, spelt as RFC 3986
// (6.2.2, 6.2.3) says the same resource may be: the host's ASCII letters
// in lower case, an IP address in its shortest form, the port without
// leading zeros and none where it is the scheme's own, "/" for an empty
// path, and percent-encoding as normalPath writes it. (url.Parse has put
// the scheme in lower case.) Proxies that share a store then share
// executions however each was given the URL.
func normalURL(u *neturl.URL) string {
	host, port := u.Hostname(), u.Port()
	if ip, err := netip.ParseAddr(host); err == nil {
		// The zone is left as given: it names an interface, and
		// interface names may differ only in case.
		host = ip.String()
		if ip.Is6() {
			host = "[" + host + "]"
		}
	} else {
		host = lowerASCII(host)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err == nil {
		port = strconv.FormatUint(n, 10) // ":080" is port 80, as dialled
	}
	if port != "" && !(u.Scheme == "http" && port == "80") && !(u.Scheme == "https" && port == "443") {
		host += ":" + port
	}
	return u.Scheme + "://" + host + normalPath(u.EscapedPath())
}

// lowerASCII returns s with its ASCII letters in lower case. Other
// letters stay: net/http dials a host by its IDNA form, which does not
// follow strings.ToLower ("İ" is "i" with a dot above there, "ẞ" is
// "ss"), and two hosts it dials apart must not be one upstream.
func lowerASCII(s string) string {
	return strings.Map(func(r rune) rune {
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, s)
}

// normalPath returns an escaped URL path with each percent-encoded
// unreserved character decoded and every other escape in upper case, or
// "/" for an empty one. Other escapes stay: "/a%2Fb" and "/a/b" may be
// two resources.
func normalPath(p string) string {
	if p == "" {
		return "/"
	}
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] != '%' || i+2 >= len(p) {
			b.WriteByte(p[i])
			continue
		}
		v, err := strconv.ParseUint(p[i+1:i+3], 16, 8)
		switch c := byte(v); {
		case err != nil:
			b.WriteByte(p[i])
			continue
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', strings.IndexByte("-._~", c) >= 0:
			b.WriteByte(c)
		default:
			b.WriteString(strings.ToUpper(p[i : i+3]))
		}
		i += 2
	}
	return b.String()
}
