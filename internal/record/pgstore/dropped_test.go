package pgstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// TestRefusedReservationIsMarkedUnsent: a reservation the server refused
// with an error of its own (here: the schema was dropped under the
// proxy) made nothing, and says so (record.ErrNotSent): its caller has
// nothing to fail later, nor to wait for at exit.
func TestRefusedReservationIsMarkedUnsent(t *testing.T) {
	u, schema := serverURL(t), newSchema(t)
	s := open(t, u, schema, nil)
	ctx := t.Context()
	if _, _, err := s.Reserve(ctx, newRecord("k1", time.Now()), record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	conn, err := connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		t.Fatal(err)
	}
	_, _, err = s.Reserve(ctx, newRecord("k2", time.Now()), record.ReserveOptions{})
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Reserve with the schema dropped = %v; want the server's error", err)
	}
	if !errors.Is(err, record.ErrNotSent) {
		t.Fatalf("Reserve with the schema dropped = %v, not marked not sent; the server refused it, and made nothing", err)
	}
}
