package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	neturl "net/url"
	"sort"
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

// dialUpstream connects to a Streamable HTTP upstream. Its identity, which
// enters every fingerprint, is the URL without credentials, plus a keyed
// hash of the headers given (which carry the credential): the same call
// made with two credentials is two executions, and no credential is ever
// stored or logged in clear.
func dialUpstream(ctx context.Context, rawURL string, headers headerFlags, h *fingerprint.Hasher, log *slog.Logger, maxMessage int) (*streamhttp.Client, string, error) {
	u, err := neturl.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, "", usagef("--upstream: %q is not an http:// or https:// URL", redact(rawURL))
	}
	hdr := http.Header{}
	for _, v := range headers {
		name, value, _ := strings.Cut(v, ":")
		hdr.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	// The URL's user and query may carry a credential (a token as the
	// user name, an api_key parameter): they enter the id only through the
	// keyed hash below.
	id := "http:" + (&neturl.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
	if len(hdr) > 0 || u.User != nil || u.RawQuery != "" {
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
			// could not be reached has not given yet. Say what to do:
			// the store's error alone reads as one the proxy waits out.
			return nil, "", errors.New("the upstream's identity, keyed by its credentials (--upstream-header, or the URL's user or query), " +
				"needs the fingerprint secret the store keeps, and the store cannot be reached: " +
				"set MCP_IDEMPOTENT_SECRET, or start again once the store answers")
		}
		if err != nil {
			return nil, "", fmt.Errorf("the upstream's identity, keyed by its credentials: %w", err)
		}
		id += " credential:" + ref[:16]
	}
	c, err := streamhttp.Dial(ctx, rawURL, streamhttp.Options{Header: hdr, Logger: log, MaxMessage: maxMessage, HTTPClient: upstreamClient})
	if err != nil {
		return nil, "", fmt.Errorf("--upstream %s: %w", redact(rawURL), err)
	}
	log.Debug("upstream", "upstream", id)
	return c, id, nil
}
