package redisstore_test

import (
	"context"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/redisstore"
)

// BenchmarkSteps runs recordtest.ExecutionSteps one at a time and
// reports the round trips each made to the server (round-trips/op) and
// the keys it left under the store's prefix (keys/op): a replay leaves
// none (bench/writes.sh).
func BenchmarkSteps(b *testing.B) {
	ctx := context.Background()
	for _, st := range recordtest.ExecutionSteps {
		b.Run(st.Name, func(b *testing.B) {
			url := serverURL(b)
			prefix := newPrefix(b, url)
			s := open(b, url, prefix, nil)
			if _, err := recordtest.Execute(ctx, s, "replayed"); err != nil {
				b.Fatal(err)
			}
			var c counter
			client := redisstore.Client(s)
			client.AddHook(&c)
			keys := countKeys(b, s, prefix)
			trips := c.n.Load()
			for b.Loop() {
				if err := st.Do(ctx, s); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(c.n.Load()-trips)/float64(b.N), "round-trips/op")
			b.ReportMetric(float64(countKeys(b, s, prefix)-keys)/float64(b.N), "keys/op")
		})
	}
}

// countKeys counts the keys under prefix.
func countKeys(b *testing.B, s *redisstore.Store, prefix string) int {
	b.Helper()
	keys, err := keysUnder(redisstore.Client(s), prefix)
	if err != nil {
		b.Fatal(err)
	}
	return len(keys)
}
