package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// terminate ends the server sessions of application app, and returns
// once they are gone: their FATAL message and close have reached the
// client.
func terminate(t *testing.T, app string) {
	t.Helper()
	ctx := t.Context()
	conn, err := connect(ctx, serverURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatalf("no session of %s to terminate", app)
	}
	for {
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond) // polled: the server gives no event for it
	}
}

// TestTerminatedSessionIsNotUsed: a pooled connection whose server
// session was ended (pg_terminate_backend, a server restart, a pooler
// that let it go) a moment after its last use is not given to the next
// operation. Else each step of an execution (its reservation, its
// dispatch, its outcome, its delivery) fails once per such connection,
// and a write then leaves the proxy unsure whether it was made.
func TestTerminatedSessionIsNotUsed(t *testing.T) {
	b := make([]byte, 6)
	rand.Read(b)
	app := "mcpi_test_" + hex.EncodeToString(b)
	s, err := Open(context.Background(), serverURL(t)+"&application_name="+app, Options{Schema: newSchema(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	if _, _, err := s.Reserve(ctx, newRecord("warm", time.Now()), record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	r := newRecord("k", time.Now())
	steps := []struct {
		name string
		do   func() error
	}{
		{"reserve", func() error { _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); return err }},
		{"dispatch", func() error { _, err := s.Update(ctx, r.ID, record.Change{To: record.Dispatched}); return err }},
		{"complete", func() error {
			_, err := s.Update(ctx, r.ID, record.Change{To: record.Completed, Result: []byte(`{"content":[]}`)})
			return err
		}},
		{"deliver", func() error {
			_, err := s.Update(ctx, r.ID, record.Change{To: record.Delivered, From: record.Completed})
			return err
		}},
		{"get", func() error { _, err := s.Get(ctx, r.ID); return err }},
	}
	for _, step := range steps {
		terminate(t, app)
		if err := step.do(); err != nil {
			t.Fatalf("%s after the session was terminated: %v", step.name, err)
		}
	}
	if got, err := s.Get(ctx, r.ID); err != nil || got.State != record.Delivered {
		t.Fatalf("record %v, %v; want delivered", got, err)
	}
}
