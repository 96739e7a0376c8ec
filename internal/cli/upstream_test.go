package cli

import (
	"context"
	"log/slog"
	"net/http"
	neturl "net/url"
	"strings"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
)

// TestUpstreamCredentialsWithoutSecret: an --upstream with credentials,
// while the store that keeps the secret cannot be reached, stops the
// start (docs/http.md, Identity). The error says why and what to do,
// not only that a secret is missing, which reads as a wait.
func TestUpstreamCredentialsWithoutSecret(t *testing.T) {
	discard := slog.New(slog.DiscardHandler)
	for _, c := range []struct {
		url     string
		headers headerFlags
	}{
		{"https://mcp.example/mcp", headerFlags{"Authorization: Bearer s3cret"}},
		{"https://mcp.example/mcp?api_key=s3cret", nil},
	} {
		_, _, err := dialUpstream(context.Background(), c.url, c.headers, fingerprint.Pending(), discard, 0)
		if err == nil {
			t.Fatalf("dialUpstream(%q) with no secret yet: no error", c.url)
		}
		for _, want := range []string{"store cannot be reached", "MCP_IDEMPOTENT_SECRET"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("dialUpstream(%q) with no secret yet: %v; want it to say %q", c.url, err, want)
			}
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("dialUpstream(%q): %v; want no credential in it", c.url, err)
		}
	}
}

// TestUpstreamIdentityNormalised: URLs that RFC 3986 reads as one
// resource give one upstream identity, so that proxies sharing a store
// share its executions however each was given the URL (DESIGN.md:
// "its command line or URL, normalised"); URLs that may differ do not.
func TestUpstreamIdentityNormalised(t *testing.T) {
	secret, err := fingerprint.New([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	identity := func(raw string) string {
		t.Helper()
		u, err := neturl.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		id, err := upstreamIdentity(u, http.Header{}, secret)
		if err != nil {
			t.Fatalf("upstreamIdentity(%q): %v", raw, err)
		}
		return id
	}
	for _, same := range [][]string{
		{"http://example.com/mcp", "HTTP://Example.COM/mcp", "http://example.com:80/mcp", "http://example.com:/mcp", "http://example.com/m%63p", "http://example.com:080/mcp"},
		{"http://example.com:8080/mcp", "http://example.com:08080/mcp"},
		{"https://example.com/", "https://EXAMPLE.com:443", "https://example.com"},
		{"http://[::1]:8080/mcp", "http://[0:0::1]:8080/mcp"},
		{"http://127.0.0.1:8080/mcp", "http://127.0.0.1:8080/mcp#part"},
		{"http://example.com/a%2Fb%C3%A9", "http://example.com/a%2fb%c3%a9", "http://example.com/a%2F%62%C3%A9"},
		{"http://bücher.example/mcp", "http://BüCHER.example/mcp", "http://B%C3%BCcher.example/mcp"},
		{"http://[fe80::1%25eth0]:8080/mcp", "http://[FE80::1%25eth0]:8080/mcp"},
	} {
		want := identity(same[0])
		for _, raw := range same[1:] {
			if got := identity(raw); got != want {
				t.Errorf("identity of %q is %q; want %q, as for %q", raw, got, want, same[0])
			}
		}
	}
	distinct := []string{
		"http://example.com/mcp", "https://example.com/mcp", "http://example.com:8080/mcp",
		"https://example.com:80/mcp", "http://example.com/MCP", "http://example.com/mcp/",
		"http://example.com/a%2Fb", "http://example.com/a/b",
		"http://example.org/mcp", "http://example.com/mcp?k=1", "http://u@example.com/mcp",
		// net/http dials these hosts apart: IDNA maps İ to i with a dot
		// above, and ẞ to ss, where ToLower gives i and ß. A zone is an
		// interface name, which Linux spells in either case.
		"http://i.example/mcp", "http://İ.example/mcp", "http://ß.example/mcp", "http://ẞ.example/mcp",
		"http://[fe80::1%25eth0]:8080/mcp", "http://[fe80::1%25ETH0]:8080/mcp",
	}
	seen := map[string]string{}
	for _, raw := range distinct {
		id := identity(raw)
		if other, ok := seen[id]; ok {
			t.Errorf("%q and %q share the identity %q", raw, other, id)
		}
		seen[id] = raw
	}
}

// TestUpstreamHeaderSentAnyway: an Accept or Content-Type header copied
// from a curl example of an MCP server, asking for what the proxy sends
// anyway, starts the proxy with a warning that it is ignored, and leaves
// the upstream's identity as without it; one asking for something else
// is refused, naming the flag and what the proxy sends.
func TestUpstreamHeaderSentAnyway(t *testing.T) {
	for _, tt := range []struct {
		header string
		want   []string // each in the error; none: it starts, with a warning
	}{
		{"Accept: application/json, text/event-stream", nil},
		{"accept:text/event-stream,Application/JSON", nil},
		{"Accept:  application/json ,  text/event-stream ", nil},
		{"Content-Type: application/json", nil},
		{"content-type: APPLICATION/JSON", nil},
		{"Accept: text/html", []string{"--upstream-header Accept", "the proxy sets it itself", "application/json, text/event-stream"}},
		{"Accept: text/event-stream", []string{"--upstream-header Accept", "the proxy sets it itself"}},
		{"Accept: application/json, text/event-stream, text/html", []string{"--upstream-header Accept", "the proxy sets it itself"}},
		{"Content-Type: text/plain", []string{"--upstream-header Content-Type", "the proxy sets it itself", "application/json"}},
		{"Content-Type: application/json; charset=utf-8", []string{"--upstream-header Content-Type", "the proxy sets it itself"}},
	} {
		t.Run(tt.header, func(t *testing.T) {
			_, stderr, err := run(t, "--upstream", "http://127.0.0.1:1/mcp", "--upstream-header", tt.header)
			if tt.want == nil {
				name, _, _ := strings.Cut(tt.header, ":")
				if err != nil || !strings.Contains(stderr, "--upstream-header "+name+": ignored") {
					t.Errorf("Run = %v, stderr %q; want a start, warning that --upstream-header %s is ignored", err, stderr, name)
				}
				return
			}
			if err == nil {
				t.Fatalf("Run: no error; want one saying %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Run = %v; want it to say %q", err, w)
				}
			}
		})
	}
	// Ignored: the same upstream, and the same executions, as without it.
	secret, err := fingerprint.New([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	discard := slog.New(slog.DiscardHandler)
	id := func(h headerFlags) string {
		c, id, err := dialUpstream(t.Context(), "http://127.0.0.1:1/mcp", h, secret, discard, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		return id
	}
	if with, without := id(headerFlags{"Accept: application/json, text/event-stream", "X-A: b"}), id(headerFlags{"X-A: b"}); with != without {
		t.Errorf("identity with the Accept the proxy sends: %q; want %q, as without it", with, without)
	}
}
