package memstore_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

var benchResult = json.RawMessage(`{"content":[{"type":"text","text":"charged 10 EUR"}]}`)

func benchRecord(key string) *record.Record {
	id := record.NewID(time.Now())
	if key == "" {
		key = id
	}
	return &record.Record{ID: id, Key: key, Fingerprint: key, Tool: "charge_card", Retention: time.Hour}
}

// reserveComplete is one new execution: reserved, dispatched, completed and
// delivered.
func reserveComplete(b *testing.B, s *memstore.Store) {
	ctx := context.Background()
	r := benchRecord("")
	if _, won, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil || !won {
		b.Fatalf("Reserve = won %v, %v", won, err)
	}
	for _, c := range []record.Change{{To: record.Dispatched}, {To: record.Completed, Result: benchResult}, {To: record.Delivered}} {
		if _, err := s.Update(ctx, r.ID, c); err != nil {
			b.Fatal(err)
		}
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
	r := benchRecord("replayed")
	if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil {
		b.Fatal(err)
	}
	for _, c := range []record.Change{{To: record.Dispatched}, {To: record.Completed, Result: benchResult}} {
		if _, err := s.Update(ctx, r.ID, c); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if _, won, err := s.Reserve(ctx, benchRecord("replayed"), record.ReserveOptions{}); err != nil || won {
			b.Fatalf("Reserve of a completed key = won %v, %v", won, err)
		}
	}
}
