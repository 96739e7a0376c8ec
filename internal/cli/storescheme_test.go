package cli

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
)

// TestStoreSchemeIgnoresCase: a --store URL's scheme is read whatever
// its case, as any URL's is, rather than refused as not the scheme it
// names.
func TestStoreSchemeIgnoresCase(t *testing.T) {
	for _, url := range []string{
		"SQLite:" + filepath.Join(t.TempDir(), "records.db"),
		"Redis://127.0.0.1:1/0",
		"REDISS://127.0.0.1:1/0",
		"Postgres://127.0.0.1:1/db",
		"PostgreSQL://127.0.0.1:1/db",
	} {
		_, s, err := openStore(t.Context(), url, slog.New(slog.DiscardHandler), false, nil)
		if err != nil {
			t.Errorf("opening %s: %v; want the store its scheme names", url, err)
			continue
		}
		s.Close()
	}
}

// TestRedisURLWithoutHost: a Redis URL that names no host, as
// `redis://$HOST:6379` gives with HOST not set, is refused naming
// --store, not dialled at localhost, where a Redis of this host would
// keep the records the user believes shared.
func TestRedisURLWithoutHost(t *testing.T) {
	// Port 1, where nothing listens: a URL taken would give a store
	// that cannot be reached, which does not stop the proxy.
	for _, url := range []string{"redis://:1/0", "rediss://:1", "redis://user:s3cret@:1/0?prefix=p:"} {
		_, s, err := openStore(t.Context(), url, slog.New(slog.DiscardHandler), false, nil)
		if s != nil {
			s.Close()
		}
		if err == nil || ExitCode(err) != 2 || !strings.Contains(err.Error(), "--store: ") || !strings.Contains(err.Error(), "names no host") || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("opening %s: %v (exit %d); want exit 2 saying it names no host", url, err, ExitCode(err))
		}
	}
}
