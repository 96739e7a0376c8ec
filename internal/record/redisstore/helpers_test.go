package redisstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/redisstore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/skipnote"
)

const howToRun = "MCPI_REDIS_URL=redis://127.0.0.1:6379/0 go test ./internal/record/redisstore"

// serverURL returns the URL of the Redis server the tests use, from
// MCPI_REDIS_URL. Without a reachable one the test is skipped, or fails
// when MCPI_REQUIRE_SERVICES=1.
func serverURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv("MCPI_REDIS_URL")
	if u == "" {
		unavailable(tb, "MCPI_REDIS_URL is not set")
	}
	opt, err := redis.ParseURL(u)
	if err != nil {
		tb.Fatalf("MCPI_REDIS_URL: %v", err)
	}
	c := redis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		unavailable(tb, fmt.Sprintf("no Redis server answers at %s (%v)", opt.Addr, err))
	}
	return u
}

func unavailable(tb testing.TB, why string) {
	tb.Helper()
	skipnote.Unavailable(tb, "Redis store", why+"; to run the Redis store tests: "+howToRun)
}

// newPrefix returns a key prefix of the test's own, and deletes every key
// under it when the test ends.
func newPrefix(tb testing.TB, url string) string {
	tb.Helper()
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	prefix := "mcpi-test-" + hex.EncodeToString(b) + ":"
	tb.Cleanup(func() { deleteKeys(tb, url, prefix) })
	return prefix
}

// deleteKeys deletes the keys under prefix, which has no glob characters.
func deleteKeys(tb testing.TB, url, prefix string) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		tb.Error(err)
		return
	}
	c := redis.NewClient(opt)
	defer c.Close()
	keys, err := keysUnder(c, prefix)
	if err != nil {
		tb.Errorf("listing the test's keys: %v", err)
	}
	for batch := range slices.Chunk(keys, 1000) {
		if err := c.Unlink(context.Background(), batch...).Err(); err != nil {
			tb.Errorf("deleting the test's keys: %v", err)
		}
	}
}

// keysUnder lists the keys under prefix, which has no glob characters,
// sorted.
func keysUnder(c redis.UniversalClient, prefix string) ([]string, error) {
	ctx := context.Background()
	var keys []string
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	slices.Sort(keys)
	return keys, iter.Err()
}

// open returns a store under prefix, closed when the test ends.
func open(tb testing.TB, url, prefix string, now func() time.Time) *redisstore.Store {
	tb.Helper()
	return openWith(tb, url, redisstore.Options{Now: now, Prefix: prefix})
}

// openWith returns a store with opts, closed when the test ends.
func openWith(tb testing.TB, url string, opts redisstore.Options) *redisstore.Store {
	tb.Helper()
	s, err := redisstore.Open(context.Background(), url, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return s
}

func newRecord(key string) *record.Record {
	return &record.Record{ID: record.NewID(time.Now()), Key: key, Fingerprint: key, Tool: "charge_card", Retention: time.Hour}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// counter counts round trips: a command, or a pipeline. It keeps their
// names, for a failure to show. The handshake of a new pooled connection
// (HELLO, CLIENT SETINFO), which go-redis sends through the hooks too, is
// the connection's, not the operation's, and is not counted.
type counter struct {
	n     atomic.Int64
	mu    sync.Mutex
	names []string
}

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !handshake[cmd.Name()] {
			c.count(cmd.Name())
		}
		return next(ctx, cmd)
	}
}

// handshake names the commands go-redis sends on a new connection.
var handshake = map[string]bool{"hello": true, "client": true, "auth": true, "select": true}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var names []string
		setup := true
		for _, cmd := range cmds {
			names = append(names, cmd.Name())
			setup = setup && handshake[cmd.Name()]
		}
		if !setup {
			c.count(fmt.Sprint(names))
		}
		return next(ctx, cmds)
	}
}

func (c *counter) count(name string) {
	c.n.Add(1)
	c.mu.Lock()
	c.names = append(c.names, name)
	c.mu.Unlock()
}

func (c *counter) reset() {
	c.mu.Lock()
	c.n.Store(0)
	c.names = nil
	c.mu.Unlock()
}

// seen returns the names of the round trips counted from the nth.
func (c *counter) seen(n int64) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.names[min(int(n), len(c.names)):])
}
