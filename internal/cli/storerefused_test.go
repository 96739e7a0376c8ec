package cli

import (
	"errors"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// serviceURL returns the URL in env, or skips the test without it.
func serviceURL(t *testing.T, env string) *neturl.URL {
	t.Helper()
	u := os.Getenv(env)
	if u == "" {
		if os.Getenv("MCPI_REQUIRE_SERVICES") != "" {
			t.Fatalf("%s is not set, and MCPI_REQUIRE_SERVICES is", env)
		}
		t.Skipf("%s is not set", env)
	}
	parsed, err := neturl.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return parsed
}

// TestStoreRefusedAtStart: a store whose server answers and refuses the
// URL (a database that does not exist, an unknown role, a run-time
// parameter it does not know or a value it does not take, a Redis database
// out of range, cluster=true for a server not in a Cluster) stops the
// proxy at start, naming --store and what the server said, before the
// upstream starts: no wait would end it, and the proxy would otherwise
// run refusing every side effect. With MCP_IDEMPOTENT_SECRET set too,
// when the secret needs no store.
func TestStoreRefusedAtStart(t *testing.T) {
	pg := serviceURL(t, "MCPI_POSTGRES_URL")
	rd := serviceURL(t, "MCPI_REDIS_URL")
	noDB, noRole, noParam, badValue, redisDB, cluster := *pg, *pg, *pg, *pg, *rd, *rd
	noDB.Path = "/mcpi_no_such_database"
	noRole.User = neturl.User("mcpi_no_such_role")
	noParam.RawQuery = addQuery(pg.RawQuery, "schem=x")                 // a mistyped schema=
	badValue.RawQuery = addQuery(pg.RawQuery, "statement_timeout=soon") // not a duration PostgreSQL reads
	redisDB.Path = "/987654"
	cluster.Path, cluster.RawQuery = "/0", "cluster=true" // a server not in a Cluster
	for _, tt := range []struct {
		url, said string
	}{
		{noDB.String(), `database "mcpi_no_such_database" does not exist`},
		{noRole.String(), `role "mcpi_no_such_role" does not exist`},
		{noParam.String(), `unrecognized configuration parameter "schem"`},
		{badValue.String(), `invalid value for parameter "statement_timeout"`},
		{redisDB.String(), "DB index is out of range"},
		{cluster.String(), "cluster support disabled"},
	} {
		for _, secret := range []string{"", "0123456789abcdef0123456789abcdef"} {
			t.Setenv("MCP_IDEMPOTENT_SECRET", secret)
			if secret == "" {
				os.Unsetenv("MCP_IDEMPOTENT_SECRET") // set but empty is refused
			}
			started := filepath.Join(t.TempDir(), "started")
			var stdout, stderr strings.Builder
			err := Run(t.Context(), []string{"--store", tt.url, "--", "sh", "-c", "touch " + started}, strings.NewReader(""), &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), "--store") || !strings.Contains(err.Error(), tt.said) {
				t.Errorf("--store %s, secret %q: %v; want an error naming --store and saying %s\n%s", redact(tt.url), secret, err, tt.said, stderr.String())
			}
			if _, ok := errors.AsType[*usageError](err); ok {
				t.Errorf("--store %s: a usage error (exit 2); want exit 1: the URL parses", redact(tt.url))
			}
			if _, serr := os.Stat(started); serr == nil {
				t.Errorf("--store %s, secret %q: the upstream started", redact(tt.url), secret)
			}
		}
	}
}

// addQuery appends kv, escaped, to the URL query q.
func addQuery(q, kv string) string {
	k, v, _ := strings.Cut(kv, "=")
	if q != "" {
		q += "&"
	}
	return q + neturl.QueryEscape(k) + "=" + neturl.QueryEscape(v)
}
