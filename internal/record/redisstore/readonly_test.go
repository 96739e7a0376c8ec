package redisstore_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/redisstore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/servicetest"
)

// TestReplicaWithoutSecretSaysSo: a replica given as the URL, where no
// secret is stored yet, answers and takes no writes: Secret says so
// (record.ErrWritesRefused), for the proxy to log what happened rather
// than a store that cannot be reached.
func TestReplicaWithoutSecretSaysSo(t *testing.T) {
	// A replica of a master that is not there is read-only all the same.
	replica := startServer(t, "--replicaof", "127.0.0.1", servicetest.FreePort(t))
	s := openWith(t, "redis://127.0.0.1:"+replica.port+"/0", redisstore.Options{Prefix: "huntoutage-ro:"})
	_, err := s.Secret(t.Context())
	if err == nil || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("Secret on a replica = %v; want the server's READONLY", err)
	}
	if !errors.Is(err, record.ErrWritesRefused) {
		t.Fatalf("Secret on a replica = %v, not marked as a server that takes no writes", err)
	}
}
