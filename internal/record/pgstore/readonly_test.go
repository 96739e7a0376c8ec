package pgstore

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// TestReadOnlyServerSaysSo: a PostgreSQL that takes no writes
// (default_transaction_read_only, as a standby), where the schema or the
// secret is not made yet, answers: Secret and Check say the server takes
// no writes (record.ErrWritesRefused), for the proxy to log what happened
// rather than a store that cannot be reached.
func TestReadOnlyServerSaysSo(t *testing.T) {
	u := serverURL(t)
	readOnly := u + "&default_transaction_read_only=on"
	t.Run("no schema", func(t *testing.T) {
		s := open(t, readOnly, newSchema(t), nil)
		if err := s.Check(t.Context()); !errors.Is(err, record.ErrWritesRefused) {
			t.Fatalf("Check = %v; want it marked as a server that takes no writes", err)
		}
		_, err := s.Secret(t.Context())
		if !errors.Is(err, record.ErrWritesRefused) || !strings.Contains(err.Error(), "25006") {
			t.Fatalf("Secret = %v; want the server's 25006, marked as a server that takes no writes", err)
		}
	})
	t.Run("no secret", func(t *testing.T) {
		schema := newSchema(t)
		if err := open(t, u, schema, nil).Check(context.Background()); err != nil {
			t.Fatal(err)
		}
		_, err := open(t, readOnly, schema, nil).Secret(t.Context())
		if !errors.Is(err, record.ErrWritesRefused) || !strings.Contains(err.Error(), "25006") {
			t.Fatalf("Secret = %v; want the server's 25006, marked as a server that takes no writes", err)
		}
	})
}
