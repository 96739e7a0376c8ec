package cli

import (
	"log/slog"
	"path/filepath"
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
