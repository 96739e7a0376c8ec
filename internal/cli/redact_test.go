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

// TestStoreShownNamesPrefixAndSchema: of an execution the store lacks,
// a Redis prefix or PostgreSQL schema mistyped, or another deployment's,
// is the likely cause: the message names it, the default included,
// though redact hides the rest of the query.
func TestStoreShownNamesPrefixAndSchema(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://:s3cret@127.0.0.1:6379/0?prefix=ops:":                 `(prefix "ops:")`,
		"Redis://127.0.0.1:6379/0":                                     `(prefix "mcpi:")`,
		"postgres://bob@db.example/app?password=s3cret&schema=billing": `(schema "billing")`,
		"postgresql://bob@db.example/app?sslmode=disable":              `(schema "mcp_idempotent")`,
		"sqlite:/var/lib/x.db":                                         "sqlite:/var/lib/x.db",
		"postgres://bob@db.example/app?password=s3cret;x":              "postgres://***@db.example/app?***",
	} {
		got := storeShown(raw)
		if !strings.HasSuffix(got, want) || strings.Contains(got, "s3cr") {
			t.Errorf("storeShown(%q) = %q; want it to end in %q, and no credential", raw, got, want)
		}
	}
}
