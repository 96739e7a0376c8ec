package redisstore_test

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record/redisstore"
)

// The client speaks RESP2 unless the URL asks for another protocol.
func TestProtocol(t *testing.T) {
	for url, want := range map[string]int{"redis://127.0.0.1:1/0": 2, "redis://127.0.0.1:1/0?protocol=3": 3} {
		s, err := redisstore.Open(t.Context(), url, redisstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := redisstore.Client(s).(*redis.Client).Options().Protocol; got != want {
			t.Errorf("%s: protocol %d; want %d", url, got, want)
		}
		s.Close()
	}
}

// A protocol no Redis speaks is refused when the store opens, naming it,
// rather than failing every connection's HELLO after.
func TestProtocolRefused(t *testing.T) {
	for _, q := range []string{"/0?protocol=4", "/0?protocol=1", "?cluster=true&protocol=4", "/0?master_name=m&protocol=4"} {
		s, err := redisstore.Open(t.Context(), "redis://127.0.0.1:1"+q, redisstore.Options{})
		if err == nil {
			s.Close()
			t.Errorf("%s: opened; want it refused", q)
			continue
		}
		if !strings.Contains(err.Error(), "protocol=") || !strings.Contains(err.Error(), "2 (RESP2) or 3 (RESP3)") {
			t.Errorf("%s: %v; want an error naming protocol= and what it may be", q, err)
		}
	}
}

// A timeout that is not above zero, which go-redis takes for none, is
// refused when the store opens: a server that hangs would hold every
// call for ever.
func TestNoTimeoutRefused(t *testing.T) {
	for _, q := range []string{"/0?read_timeout=-1", "/0?dial_timeout=0s", "/0?write_timeout=-2", "/0?master_name=m&read_timeout=-1", "?cluster=true&pool_timeout=0"} {
		s, err := redisstore.Open(t.Context(), "redis://127.0.0.1:1"+q, redisstore.Options{})
		if err == nil {
			s.Close()
			t.Errorf("%s: opened; want it refused", q)
			continue
		}
		if !strings.Contains(err.Error(), "want a duration above zero") {
			t.Errorf("%s: %v; want an error naming the timeout and what it may be", q, err)
		}
	}
}

// A count of connections go-redis cannot make a pool of is refused when
// the store opens, naming it, rather than a panic of go-redis's.
func TestPoolSizeRefused(t *testing.T) {
	for _, q := range []string{"/0?pool_size=-1", "/0?min_idle_conns=5000000000", "/0?max_idle_conns=-3", "/0?max_active_conns=2147483648",
		"/0?pipeline_pool_size=5000000000", "/0?master_name=m&pool_size=-1", "?cluster=true&pool_size=-1"} {
		s, err := redisstore.Open(t.Context(), "redis://127.0.0.1:1"+q, redisstore.Options{})
		if err == nil {
			s.Close()
			t.Errorf("%s: opened; want it refused", q)
			continue
		}
		if !strings.Contains(err.Error(), "want a number of connections") {
			t.Errorf("%s: %v; want an error naming the count and what it may be", q, err)
		}
	}
}

// A database number below zero, which go-redis would take for database
// 0, is refused when the store opens, naming it.
func TestNegativeDatabaseRefused(t *testing.T) {
	for _, q := range []string{"/-1", "/-2?master_name=m"} {
		s, err := redisstore.Open(t.Context(), "redis://127.0.0.1:1"+q, redisstore.Options{})
		if err == nil {
			s.Close()
			t.Errorf("%s: opened; want it refused", q)
			continue
		}
		if !strings.Contains(err.Error(), "want a number from 0") {
			t.Errorf("%s: %v; want an error naming the database and what it may be", q, err)
		}
	}
}

// A port no server can have is refused when the store opens, naming it,
// rather than taken for a server that cannot be reached yet: no wait
// ends it. So is one in an addr= of a Sentinel or a Cluster.
func TestPortRefused(t *testing.T) {
	for _, u := range []string{"redis://127.0.0.1:99999/0", "redis://127.0.0.1:0/0", "redis://127.0.0.1:1/0?master_name=m&addr=127.0.0.1:70000",
		"redis://127.0.0.1:1?cluster=true&addr=127.0.0.1:x"} {
		s, err := redisstore.Open(t.Context(), u, redisstore.Options{})
		if err == nil {
			s.Close()
			t.Errorf("%s: opened; want it refused", u)
			continue
		}
		if !strings.Contains(err.Error(), "port") {
			t.Errorf("%s: %v; want an error naming the port", u, err)
		}
	}
}
