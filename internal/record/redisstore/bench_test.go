package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/redisstore"
)

// The benchmarks report, beside the time, the Redis server's CPU time per
// execution (server-us/op): with 32 executions in flight the server is
// the part that runs one at a time, so what it spends on each bounds how
// many the store can make a second. The figure is the whole server's, so
// other clients of the same server count in it.

// execute is one new execution, as every backend's benchmark measures it:
// Reserve with its dispatch, then completed and delivered.
func execute(ctx context.Context, s *redisstore.Store) error {
	_, err := recordtest.Execute(ctx, s, "")
	return err
}

func BenchmarkReserveComplete(b *testing.B) {
	url := serverURL(b)
	s := open(b, url, newPrefix(b, url), nil)
	raw := rawClient(b, url)
	ctx := b.Context()
	b.Run("serial", func(b *testing.B) {
		defer reportServerCPU(b, raw)()
		for b.Loop() {
			if err := execute(ctx, s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel32", func(b *testing.B) {
		defer reportServerCPU(b, raw)()
		defer reportClientCPU(b)()
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := execute(ctx, s); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkFloor sends the commands the scripts of one new execution run
// (MONITOR shows them), bare: no script, no reply read into a record,
// in pipelines of 32 executions, so the server does nothing but those
// commands and the reading and writing of them. Its server-us/op is what
// the store's layout of a record costs the server, whatever the store's
// code does; BenchmarkReserveComplete/parallel32's is that and the rest.
func BenchmarkFloor(b *testing.B) {
	url := serverURL(b)
	prefix := newPrefix(b, url)
	raw := rawClient(b, url)
	ctx := b.Context()
	const batch = 32
	send := func(from, to int) {
		for step := range 3 {
			p := raw.Pipeline()
			for n := from; n < to; n++ {
				floorStep(ctx, p, prefix, n, step)
			}
			// The reservation's GET of the holder finds none: redis.Nil.
			if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
				b.Fatal(err)
			}
		}
	}
	defer reportServerCPU(b, raw)()
	n, sent := 0, 0
	for b.Loop() {
		if n++; n-sent == batch {
			send(sent, n)
			sent = n
		}
	}
	send(sent, n)
}

// floorStep queues on p the commands of execution n's step: 0, reserved
// and dispatched; 1, completed; 2, delivered.
func floorStep(ctx context.Context, p redis.Pipeliner, prefix string, n, step int) {
	id := fmt.Sprintf("exe_%026d", n) // as long as a record.NewID
	tag := fmt.Sprintf("%032x", n)
	rk, hk, ik := prefix+"{"+tag+"}:r:"+id, prefix+"{"+tag+"}:k", prefix+"i:"+id
	now := strconv.FormatInt(time.Now().UnixNano(), 10)
	hist := `[["accepted","` + now + `",""],["dispatched","` + now + `",""]]`
	const ttl = time.Hour + time.Minute
	switch step {
	case 0:
		p.Get(ctx, hk)
		p.Exists(ctx, rk)
		p.HSet(ctx, rk, "id", id, "key", id, "fingerprint", id, "actor", "", "scope", "", "upstream", "",
			"tool", "charge_card", "state", "dispatched", "history", hist, "attempts", "1", "attached", "0",
			"retention", "3600000000000", "expires_at", "", "owner", "bench", "lease_until", now)
		p.Set(ctx, hk, id, ttl)
		p.PExpire(ctx, rk, ttl)
		p.Set(ctx, ik, tag, 24*time.Hour)
	case 1, 2:
		p.HMGet(ctx, rk, "state", "history", "retention", "lease_until", "owner", "attached")
		if step == 1 {
			p.HSet(ctx, rk, "state", "completed", "history", hist, "result", string(recordtest.ExecutionResult),
				"expires_at", now, "lease_until", "")
		} else {
			p.HSet(ctx, rk, "state", "delivered", "history", hist, "expires_at", now, "lease_until", "")
		}
		p.PExpire(ctx, rk, ttl)
		p.Get(ctx, hk)
		p.PExpire(ctx, hk, ttl)
		if step == 1 {
			p.Publish(ctx, prefix+"settled", id)
		}
		p.Set(ctx, ik, tag, ttl)
	}
}

// rawClient returns a plain client of the server at url.
func rawClient(tb testing.TB, url string) *redis.Client {
	tb.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		tb.Fatal(err)
	}
	c := redis.NewClient(opt)
	tb.Cleanup(func() { c.Close() })
	return c
}

// reportServerCPU reads the server's CPU time, and returns a function
// that reports what it spent since per b.N, an execution, as
// server-us/op.
func reportServerCPU(b *testing.B, c *redis.Client) func() {
	before := serverCPU(b, c)
	return func() {
		if b.N > 0 {
			spent := serverCPU(b, c) - before
			b.ReportMetric(spent.Seconds()*1e6/float64(b.N), "server-us/op")
		}
	}
}

// reportClientCPU reads this process's CPU time, and returns a function
// that reports what it spent since per b.N as client-us/op.
func reportClientCPU(b *testing.B) func() {
	before := processCPU(b)
	return func() {
		if b.N > 0 {
			spent := processCPU(b) - before
			b.ReportMetric(spent.Seconds()*1e6/float64(b.N), "client-us/op")
		}
	}
}

// serverCPU returns the CPU time the server has used, user and system.
func serverCPU(tb testing.TB, c *redis.Client) time.Duration {
	tb.Helper()
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			s, err := strconv.ParseFloat(v, 64)
			if err != nil {
				tb.Fatalf("INFO cpu: %s: %v", line, err)
			}
			total += s
		}
	}
	return time.Duration(total * float64(time.Second))
}
