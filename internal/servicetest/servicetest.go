// Package servicetest removes what a test made on the shared Redis and
// PostgreSQL servers: a key prefix, a schema. Each test that shares a
// store across processes works in one of its own, and drops it when it
// ends, so that runs leave nothing behind on the servers.
//
// It is imported by tests only.
package servicetest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// DropKeys removes the keys under prefix from the Redis server at url. A
// store's secret has no TTL, and its records would stay for their
// retention. A failure is logged, not fatal: the test itself is over.
func DropKeys(t testing.TB, url, prefix string) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Logf("dropping keys %s*: %v", prefix, err)
		return
	}
	c := redis.NewClient(opts)
	defer c.Close()
	ctx := context.Background()
	var keys []string
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Logf("dropping keys %s*: %v", prefix, err)
	}
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		if err := c.Unlink(ctx, keys[:n]...).Err(); err != nil {
			t.Logf("dropping keys %s*: %v", prefix, err)
			return
		}
		keys = keys[n:]
	}
}

// DropSchema removes schema from the PostgreSQL server at url, and all
// it holds.
func DropSchema(t testing.TB, url, schema string) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Logf("dropping schema %s: %v", schema, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		t.Logf("dropping schema %s: %v", schema, err)
	}
}
