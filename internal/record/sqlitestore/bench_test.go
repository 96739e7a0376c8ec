package sqlitestore_test

import (
	"context"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/sqlitestore"
)

// reserveComplete is one new execution, as every backend's benchmark
// measures it.
func reserveComplete(b *testing.B, s *sqlitestore.Store) {
	if _, err := recordtest.Execute(context.Background(), s, ""); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkReserveComplete(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		s := open(b, dbPath(b), sqlitestore.Options{})
		for b.Loop() {
			reserveComplete(b, s)
		}
	})
	b.Run("parallel32", func(b *testing.B) {
		s := open(b, dbPath(b), sqlitestore.Options{})
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				reserveComplete(b, s)
			}
		})
	})
}

func BenchmarkReplay(b *testing.B) {
	for _, sync := range []string{"normal", "full"} {
		b.Run("sync="+sync, func(b *testing.B) {
			s := open(b, dbPath(b), sqlitestore.Options{Sync: sync})
			ctx := context.Background()
			if _, err := recordtest.Execute(ctx, s, "replayed"); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				got, won, err := s.Reserve(ctx, newRecord("replayed"), record.ReserveOptions{})
				if err != nil || won || got.State != record.Delivered {
					b.Fatalf("Reserve = %v won=%v %v; want the delivered record", got, won, err)
				}
			}
		})
	}
}

// BenchmarkSteps runs recordtest.ExecutionSteps one at a time, every
// commit synced (sync=full). It reports no syncs itself: bench/writes.sh
// counts the process's fsync calls around runs of two lengths.
func BenchmarkSteps(b *testing.B) {
	ctx := context.Background()
	for _, st := range recordtest.ExecutionSteps {
		b.Run(st.Name, func(b *testing.B) {
			s := open(b, dbPath(b), sqlitestore.Options{Sync: "full"})
			if _, err := recordtest.Execute(ctx, s, "replayed"); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if err := st.Do(ctx, s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReplayMiss is the read a new execution pays before its
// reservation: Replay of a key no record holds.
func BenchmarkReplayMiss(b *testing.B) {
	s := open(b, dbPath(b), sqlitestore.Options{})
	ctx := context.Background()
	for i := range 1000 {
		if _, err := recordtest.Execute(ctx, s, ""); err != nil {
			b.Fatal(err, i)
		}
	}
	r := newRecord("never-reserved")
	for b.Loop() {
		if _, unheld, ok := s.Replay(ctx, r, record.ReserveOptions{}); !unheld || ok {
			b.Fatalf("Replay = unheld %v, ok %v; want unheld", unheld, ok)
		}
	}
}
