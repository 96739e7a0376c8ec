package redisstore_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/redisstore"
)

// BenchmarkSteps runs, one at a time, the steps of a new execution before
// its answer (answer), all of them (execution), and a replay, and reports
// the round trips each made to the server (round-trips/op) and the keys
// it left under the store's prefix (keys/op): a replay leaves none
// (bench/writes.sh).
func BenchmarkSteps(b *testing.B) {
	ctx := context.Background()
	steps := []struct {
		name string
		do   func(*redisstore.Store) error
	}{
		{"answer", func(s *redisstore.Store) error { _, err := recordtest.Answer(ctx, s, ""); return err }},
		{"execution", func(s *redisstore.Store) error { _, err := recordtest.Execute(ctx, s, ""); return err }},
		{"replay", func(s *redisstore.Store) error { return recordtest.Replay(ctx, s, "replayed") }},
	}
	for _, st := range steps {
		b.Run(st.name, func(b *testing.B) {
			url := serverURL(b)
			prefix := newPrefix(b, url)
			s := open(b, url, prefix, nil)
			if _, err := recordtest.Execute(ctx, s, "replayed"); err != nil {
				b.Fatal(err)
			}
			var c counter
			client := redisstore.Client(s)
			client.AddHook(&c)
			keys := countKeys(b, client, prefix)
			trips, n := c.n.Load(), 0
			for b.Loop() {
				if err := st.do(s); err != nil {
					b.Fatal(err)
				}
				n++
			}
			b.ReportMetric(float64(c.n.Load()-trips)/float64(n), "round-trips/op")
			b.ReportMetric(float64(countKeys(b, client, prefix)-keys)/float64(n), "keys/op")
		})
	}
}

// countKeys counts the keys under prefix, which has no glob characters.
func countKeys(b *testing.B, client redis.UniversalClient, prefix string) int {
	b.Helper()
	n := 0
	iter := client.Scan(context.Background(), 0, prefix+"*", 1000).Iterator()
	for iter.Next(context.Background()) {
		n++
	}
	if err := iter.Err(); err != nil {
		b.Fatal(err)
	}
	return n
}
