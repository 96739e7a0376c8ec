package cli

import (
	"context"
	"log/slog"
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
