package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/skipnote"
)

// runHint says how to run the tests that need a server.
const runHint = "MCPI_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test?sslmode=disable go test ./internal/record/pgstore"

var server struct {
	once sync.Once
	url  string
	err  error
}

// serverURL returns MCPI_POSTGRES_URL once a connection to it succeeded,
// and otherwise skips tb (fails it with MCPI_REQUIRE_SERVICES=1).
func serverURL(tb testing.TB) string {
	tb.Helper()
	server.once.Do(func() {
		u := os.Getenv("MCPI_POSTGRES_URL")
		if u == "" {
			server.err = errors.New("MCPI_POSTGRES_URL is not set")
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := connect(ctx, u)
		if err != nil {
			server.err = fmt.Errorf("PostgreSQL at MCPI_POSTGRES_URL is unreachable: %w", err)
			return
		}
		conn.Close(ctx)
		server.url = u
	})
	if server.err != nil {
		skipnote.Unavailable(tb, "PostgreSQL store", fmt.Sprintf("%v; to run these tests: %s", server.err, runHint))
	}
	return server.url
}

// connect opens a connection to the URL as Open understands it (with
// pgxpool's parameters).
func connect(ctx context.Context, rawURL string) (*pgx.Conn, error) {
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, err
	}
	return pgx.ConnectConfig(ctx, cfg.ConnConfig)
}

// newSchema returns a schema name of tb's own, dropped when tb ends.
func newSchema(tb testing.TB) string {
	tb.Helper()
	u := serverURL(tb)
	b := make([]byte, 6)
	rand.Read(b)
	schema := "mcpi_test_" + hex.EncodeToString(b)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := connect(ctx, u)
		if err != nil {
			tb.Errorf("dropping schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			tb.Errorf("dropping schema %s: %v", schema, err)
		}
	})
	return schema
}

// open returns a Store on schema, closed when tb ends.
func open(tb testing.TB, rawURL, schema string, now func() time.Time) *Store {
	tb.Helper()
	s, err := Open(context.Background(), rawURL, Options{Now: now, Schema: schema})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Error(err)
		}
	})
	return s
}

// newStore returns a Store on a schema of tb's own.
func newStore(tb testing.TB, now func() time.Time) *Store {
	tb.Helper()
	return open(tb, serverURL(tb), newSchema(tb), now)
}

func newRecord(key string, now time.Time) *record.Record {
	return &record.Record{ID: record.NewID(now), Key: key, Fingerprint: key, Actor: "alice", Scope: "session:1",
		Upstream: "stdio:server", Tool: "charge_card", Retention: time.Hour}
}

// waitFor runs Wait in the background; the returned channel yields its
// result.
func waitFor(s *Store, id string) <-chan *record.Record {
	done := make(chan *record.Record, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, _ := s.Wait(ctx, id)
		done <- r
	}()
	return done
}

// waiting blocks until id has n waiters registered and the listener is up.
func waiting(t *testing.T, s *Store, id string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.waiters.mu.Lock()
		g := s.waiters.m[id]
		got := 0
		if g != nil {
			got = g.refs
		}
		s.waiters.mu.Unlock()
		if got == n && listening(s) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters on %s; want %d", got, id, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// listening reports whether the store's listener has run LISTEN.
func listening(s *Store) bool {
	var n int
	err := s.pool.QueryRow(context.Background(),
		"SELECT count(*) FROM pg_stat_activity WHERE query = $1 AND datname = current_database()", "LISTEN "+s.quoted).Scan(&n)
	return err == nil && n > 0
}
