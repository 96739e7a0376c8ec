package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
)

func benchRecord(key string) *record.Record {
	return &record.Record{ID: record.NewID(time.Now()), Key: key, Fingerprint: key, Tool: "charge_card", Retention: time.Hour}
}

// reserveComplete is one new execution: reserved, dispatched, completed and
// delivered.
func reserveComplete(b *testing.B, s *memstore.Store) {
	if _, err := recordtest.Execute(context.Background(), s, ""); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkReserveComplete(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		s := memstore.New(memstore.Options{})
		for b.Loop() {
			reserveComplete(b, s)
		}
	})
	b.Run("parallel32", func(b *testing.B) {
		s := memstore.New(memstore.Options{})
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				reserveComplete(b, s)
			}
		})
	})
}

func BenchmarkReplay(b *testing.B) {
	s := memstore.New(memstore.Options{})
	ctx := context.Background()
	if _, err := recordtest.Execute(ctx, s, "replayed"); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, won, err := s.Reserve(ctx, benchRecord("replayed"), record.ReserveOptions{}); err != nil || won {
			b.Fatalf("Reserve of a completed key = won %v, %v", won, err)
		}
	}
}
