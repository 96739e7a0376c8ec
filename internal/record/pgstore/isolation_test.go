package pgstore

import (
	"context"
	"strings"
	"testing"
	"time"
)

// serializable is a URL's options= that makes every transaction
// SERIALIZABLE, as a role's or a database's default can.
const serializable = "options=-c%20default_transaction_isolation%3Dserializable"

// withParam returns rawURL with one more query parameter, given encoded.
func withParam(rawURL, param string) string {
	if strings.Contains(rawURL, "?") {
		return rawURL + "&" + param
	}
	return rawURL + "?" + param
}

// A store under a default of SERIALIZABLE still creates its schema while
// another proxy creates it: it reads the version after its lock, not from
// a snapshot taken before it (which, in SERIALIZABLE, made it create the
// tables again and fail with "relation records already exists").
func TestSetupUnderSerializableDefault(t *testing.T) {
	u, schema := serverURL(t), newSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	other, err := connect(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.WithoutCancel(ctx))
	maker := open(t, u, schema, nil)

	// The other proxy holds the lock and is creating the schema.
	tx, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockKey(schema)); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, maker.sql("CREATE SCHEMA {schema}; CREATE TABLE {schema}.schema_version (version integer NOT NULL)")); err != nil {
		t.Fatal(err)
	}
	for _, m := range append(migrations, notifyDDL) {
		if _, err := tx.Exec(ctx, maker.sql(m)); err != nil {
			t.Fatal(err)
		}
	}

	s := open(t, withParam(u, serializable), schema, nil)
	done := make(chan error, 1)
	go func() {
		_, err := s.Secret(ctx)
		done <- err
	}()
	// Commit once the store waits for the lock.
	for {
		var waits bool
		if err := maker.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted)").Scan(&waits); err != nil {
			t.Fatal(err)
		}
		if waits {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("Secret returned %v before the lock was released", err)
		case <-time.After(time.Millisecond):
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Secret under a SERIALIZABLE default, the schema made meanwhile: %v", err)
	}
	var level string
	if err := s.pool.QueryRow(ctx, "SHOW transaction_isolation").Scan(&level); err != nil {
		t.Fatal(err)
	}
	if level != "read committed" {
		t.Fatalf("the store's transactions are %s; want read committed", level)
	}
}

// A URL that asks for another isolation level itself is refused, naming
// the parameter, rather than given one it did not ask for.
func TestIsolationParamRefused(t *testing.T) {
	for _, v := range []string{"serializable", "repeatable%20read"} {
		_, err := Open(context.Background(), "postgres://u@127.0.0.1:1/db?default_transaction_isolation="+v, Options{})
		if err == nil || !strings.Contains(err.Error(), "default_transaction_isolation=") {
			t.Errorf("Open with default_transaction_isolation=%s: %v; want it refused, naming the parameter", v, err)
		}
	}
	s, err := Open(context.Background(), "postgres://u@127.0.0.1:1/db?default_transaction_isolation=read%20committed", Options{})
	if err != nil {
		t.Fatalf("Open with default_transaction_isolation=read committed: %v", err)
	}
	s.Close()
}

// A statement_timeout given in options= is refused: the store's default,
// a start parameter, would override it unseen.
func TestOptionsStatementTimeoutRefused(t *testing.T) {
	_, err := Open(context.Background(), "postgres://u@127.0.0.1:1/db?options=-c%20statement_timeout%3D60s", Options{})
	if err == nil || !strings.Contains(err.Error(), "statement_timeout=") {
		t.Errorf("Open with options=-c statement_timeout=60s: %v; want it refused, naming statement_timeout=", err)
	}
}
