package redisstore_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record/redisstore"
)

// The client speaks RESP2 unless the URL asks for another protocol.
func TestProtocol(t *testing.T) {
	for url, want := range map[string]int{"redis://127.0.0.1:1/0": 2, "redis://127.0.0.1:1/0?protocol=3": 3} {
		s, err := redisstore.Open(t.Context(), url, redisstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := redisstore.Client(s).(*redis.Client).Options().Protocol; got != want {
			t.Errorf("%s: protocol %d; want %d", url, got, want)
		}
		s.Close()
	}
}
