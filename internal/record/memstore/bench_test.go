package memstore_test

import (
	"context"
	"runtime"
	"runtime/metrics"
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

// BenchmarkRetained measures what the store holds for each settled record
// of a new tools/call with a 200-byte result: the live heap per record
// after a collection (heap-B/record) and the collector's CPU time for one
// collection over them (gc-ns/record), which every cycle pays for as long
// as the records are retained.
func BenchmarkRetained(b *testing.B) {
	const n = 100_000
	ctx := context.Background()
	var heapPer, gcPer float64
	for b.Loop() {
		b.StopTimer()
		base := liveHeap()
		s := memstore.New(memstore.Options{})
		w := recordtest.NewWorkload()
		b.StartTimer()
		for range n {
			if _, err := w.Execute(ctx, s); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		heapPer += float64(liveHeap()-base) / n
		gcPer += gcCPU() / n
		runtime.KeepAlive(s)
		b.StartTimer()
	}
	iters := float64(b.N)
	b.ReportMetric(heapPer/iters, "heap-B/record")
	b.ReportMetric(gcPer/iters, "gc-ns/record")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/iters/n, "ns/record")
	b.ReportMetric(0, "ns/op")
}

// liveHeap returns the bytes of live heap objects after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// gcCPU returns the CPU time, in nanoseconds, of one forced collection.
func gcCPU() float64 {
	sample := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(sample)
	before := sample[0].Value.Float64()
	runtime.GC()
	metrics.Read(sample)
	return (sample[0].Value.Float64() - before) * 1e9
}
