package cli

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
)

// TestNoCredentialInMessages: a credential in a store or upstream URL (a
// password, a token as the user name, a query parameter) never reaches a
// message, nor the upstream's identity, which every record keeps.
func TestNoCredentialInMessages(t *testing.T) {
	for _, raw := range []string{
		"postgres://bob:s3cret@db.example:5432/app?sslmode=disable",
		"postgres://bob@db.example/app?password=s3cret",
		"postgres://bob:s3cr%t@db.example/app",            // does not parse
		"postgres://bob@db.example/app?password=s3cret;x", // a query it refuses
		"https://s3cret@mcp.example/mcp",
		"https://mcp.example/mcp?api_key=s3cret",
	} {
		if got := redact(raw); strings.Contains(got, "s3cr") {
			t.Errorf("redact(%q) = %q", raw, got)
		}
		if _, _, err := cutParam(raw, "schema"); err != nil && strings.Contains(err.Error(), "s3cr") {
			t.Errorf("cutParam(%q): %v", raw, err)
		}
	}
	if got := redact("sqlite:/var/lib/x.db"); got != "sqlite:/var/lib/x.db" {
		t.Errorf("redact of a path = %q; want it as it is", got)
	}
	h := fingerprint.NewRandom()
	discard := slog.New(slog.DiscardHandler)
	for _, raw := range []string{"https://s3cret@mcp.example/mcp", "https://mcp.example/mcp?api_key=s3cret"} {
		c, id, err := dialUpstream(context.Background(), raw, nil, h, discard, 0)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		if strings.Contains(id, "s3cret") || !strings.Contains(id, "credential:") {
			t.Errorf("the upstream id of %q is %q; want no credential, and a keyed reference to it", raw, id)
		}
	}
}
