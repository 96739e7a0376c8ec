package sqlitestore_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/sqlitestore"
)

var benchResult = json.RawMessage(`{"content":[{"type":"text","text":"charged 10 EUR"}]}`)

// reserveComplete is one new execution: reserved, dispatched, completed and
// delivered.
func reserveComplete(b *testing.B, s *sqlitestore.Store) {
	ctx := context.Background()
	r := newRecord("")
	r.Key = r.ID // a new key each time
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
	s := open(b, dbPath(b), sqlitestore.Options{})
	ctx := context.Background()
	r := newRecord("replayed")
	if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil {
		b.Fatal(err)
	}
	for _, c := range []record.Change{{To: record.Dispatched}, {To: record.Completed, Result: benchResult}} {
		if _, err := s.Update(ctx, r.ID, c); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		got, won, err := s.Reserve(ctx, newRecord("replayed"), record.ReserveOptions{})
		if err != nil || won || got.State != record.Completed {
			b.Fatalf("Reserve = %v won=%v %v; want the completed record", got, won, err)
		}
	}
}
