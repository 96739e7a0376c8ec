//go:build unix

package torture

import (
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/servicetest"
	"github.com/mcp-idempotent/mcp-idempotent/internal/skipnote"
)

// sharedStores returns the stores several proxy processes can share, by
// name: sqlite always, Redis and PostgreSQL when MCPI_REDIS_URL and
// MCPI_POSTGRES_URL give them (required under MCPI_REQUIRE_SERVICES=1).
// Each is the test's own (a file, a key prefix, a schema) and is removed
// when the test ends.
func sharedStores(t *testing.T) map[string]string {
	t.Helper()
	stores := map[string]string{"sqlite": "sqlite:" + filepath.Join(t.TempDir(), "records.db")}
	tag := strings.ToLower(strings.NewReplacer("/", "_", "-", "_").Replace(t.Name())) + "_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if u := serviceURL(t, "MCPI_REDIS_URL"); u != "" {
		prefix := "mcpi-torture-" + tag + ":"
		stores["redis"] = withQuery(u, "prefix", prefix)
		t.Cleanup(func() { servicetest.DropKeys(t, u, prefix) })
	}
	if u := serviceURL(t, "MCPI_POSTGRES_URL"); u != "" {
		schema := "mcpi_torture_" + strconv.FormatInt(time.Now().UnixNano(), 36)
		stores["postgres"] = withQuery(u, "schema", schema)
		t.Cleanup(func() { servicetest.DropSchema(t, u, schema) })
	}
	return stores
}

// serviceURL returns the server URL in env, or "" after saying that the
// tests on it are skipped; under MCPI_REQUIRE_SERVICES=1 a missing one
// fails the test.
func serviceURL(t *testing.T, env string) string {
	t.Helper()
	if u := os.Getenv(env); u != "" {
		return u
	}
	if os.Getenv("MCPI_REQUIRE_SERVICES") == "1" {
		t.Fatalf("%s is not set and MCPI_REQUIRE_SERVICES=1", env)
	}
	t.Logf("%s is not set: the cases on that store are skipped", env)
	skipnote.Note("shared-store", env+" is not set")
	return ""
}

// withQuery adds name=value to a URL's query.
func withQuery(u, name, value string) string {
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	return u + sep + name + "=" + url.QueryEscape(value)
}
