package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	neturl "net/url"
	"sort"
	"strings"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/transport/streamhttp"
)

// headerFlags collects repeated --upstream-header values.
type headerFlags []string

func (h *headerFlags) String() string { return fmt.Sprintf("%d headers", len(*h)) }

func (h *headerFlags) Set(v string) error {
	name, _, ok := strings.Cut(v, ":")
	if !ok || strings.TrimSpace(name) == "" || strings.ContainsAny(name, " \t") {
		return fmt.Errorf("want 'Name: value'")
	}
	*h = append(*h, v)
	return nil
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
		if err != nil {
			return nil, "", err
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
