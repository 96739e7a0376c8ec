package pgstore

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// TestReadOnlyServerGivesItsSecret: a PostgreSQL that takes no writes
// and holds the secret gives it, as a Redis replica does: replays are
// answered, and side-effecting calls fail closed naming the server's
// error, rather than every call waiting for a secret that is there.
func TestReadOnlyServerGivesItsSecret(t *testing.T) {
	u, schema := serverURL(t), newSchema(t)
	want, err := open(t, u, schema, nil).Secret(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ro := open(t, u+"&default_transaction_read_only=on", schema, nil)
	got, err := ro.Secret(t.Context())
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Secret from a read-only server = %x, %v; want the stored %x", got, err, want)
	}
	// A side effect fails closed, naming the server's error; nothing
	// was reserved.
	_, _, err = ro.Reserve(t.Context(), newRecord("k", time.Now()), record.ReserveOptions{})
	if !errors.Is(err, record.ErrNotSent) || !strings.Contains(err.Error(), "25006") {
		t.Fatalf("Reserve on a read-only server = %v; want its 25006, marked not sent", err)
	}
}
