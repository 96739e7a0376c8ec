package redisstore_test

import (
	"strings"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/redisstore"
)

// TestPipelinePoolOptOut: a negative pipeline_pool_size is go-redis's
// way, in a URL, to run pipelines on the main pool. It is no count of
// connections, and the store opens and works with it.
func TestPipelinePoolOptOut(t *testing.T) {
	url := serverURL(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	s, err := redisstore.Open(t.Context(), url+sep+"pipeline_pool_size=-1", redisstore.Options{Prefix: newPrefix(t, url)})
	if err != nil {
		t.Fatalf("pipeline_pool_size=-1: %v; want the store opened", err)
	}
	defer s.Close()
	if _, won, err := s.Reserve(t.Context(), newRecord("k"), record.ReserveOptions{}); err != nil || !won {
		t.Fatalf("Reserve = %v, %v; want it won", won, err)
	}
}
