package torture

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

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
		t.Cleanup(func() { dropKeys(t, u, prefix) })
	}
	if u := serviceURL(t, "MCPI_POSTGRES_URL"); u != "" {
		schema := "mcpi_torture_" + strconv.FormatInt(time.Now().UnixNano(), 36)
		stores["postgres"] = withQuery(u, "schema", schema)
		t.Cleanup(func() { dropSchema(t, u, schema) })
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

// dropSchema removes a test's PostgreSQL schema.
func dropSchema(t *testing.T, raw, schema string) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, raw)
	if err != nil {
		t.Logf("dropping schema %s: %v", schema, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		t.Logf("dropping schema %s: %v", schema, err)
	}
}

// dropKeys removes a test's Redis keys, which would otherwise stay for
// their retention.
func dropKeys(t *testing.T, raw, prefix string) {
	opts, err := redis.ParseURL(raw)
	if err != nil {
		t.Logf("dropping keys %s*: %v", prefix, err)
		return
	}
	c := redis.NewClient(opts)
	defer c.Close()
	ctx := context.Background()
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		c.Del(ctx, keys[:n]...)
		keys = keys[n:]
	}
	if err := iter.Err(); err != nil {
		t.Logf("dropping keys %s*: %v", prefix, err)
	}
}
