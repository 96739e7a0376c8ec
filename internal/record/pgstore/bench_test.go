package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
)

func BenchmarkReserveComplete(b *testing.B) {
	s := newStore(b, nil)
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		execute(b, ctx, s, fmt.Sprint("k", i))
	}
}

func BenchmarkReserveCompleteParallel(b *testing.B) {
	s := newStore(b, nil)
	ctx := context.Background()
	var n atomic.Int64
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			execute(b, ctx, s, fmt.Sprint("k", n.Add(1)))
		}
	})
}

// execute runs one new execution through its life, as the other stores'
// benchmarks do. It may run on a goroutine of RunParallel, so it reports
// errors without FailNow.
func execute(b *testing.B, ctx context.Context, s *Store, key string) {
	if _, err := recordtest.Execute(ctx, s, key); err != nil {
		b.Error(err)
	}
}

func BenchmarkReplay(b *testing.B) {
	s := newStore(b, nil)
	ctx := context.Background()
	r, _, err := s.Reserve(ctx, newRecord("k", time.Now()), record.ReserveOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []record.Change{{To: record.Dispatched}, {To: record.Completed, Result: json.RawMessage(`{"content":[]}`)}} {
		if _, err := s.Update(ctx, r.ID, c); err != nil {
			b.Fatal(err)
		}
	}
	lsn := func() (n int64) {
		b.Helper()
		if err := s.pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}
	before, n := lsn(), 0
	for b.Loop() {
		got, won, err := s.Reserve(ctx, newRecord("k", time.Now()), record.ReserveOptions{})
		if err != nil || won || got.ID != r.ID {
			b.Fatalf("Reserve of a completed key = %v won=%v: %v", got, won, err)
		}
		n++
	}
	// The WAL the server wrote meanwhile, any other client's included:
	// run it on a quiet server. A replay that writes none commits
	// without waiting for a WAL flush.
	b.ReportMetric(float64(lsn()-before)/float64(n), "wal-B/op")
}
