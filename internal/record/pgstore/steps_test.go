package pgstore

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
)

// BenchmarkSteps runs, one at a time, the steps of a new execution before
// its answer (answer), all of them (execution), and a replay, and reports
// the WAL syncs the server made for each (wal-syncs/op) and the WAL it
// wrote (wal-B/op), from pg_stat_wal. A server process adds its counts
// there when it ends, so each sub-benchmark's store is closed, and its
// processes gone, before the counts are read; a store of its own made
// the record replayed. Run it on a quiet server: every process's WAL is
// counted (bench/writes.sh).
func BenchmarkSteps(b *testing.B) {
	ctx := context.Background()
	steps := []struct {
		name string
		do   func(*Store) error
	}{
		{"answer", func(s *Store) error { _, err := recordtest.Answer(ctx, s, ""); return err }},
		{"execution", func(s *Store) error { _, err := recordtest.Execute(ctx, s, ""); return err }},
		{"replay", func(s *Store) error { return recordtest.Replay(ctx, s, "replayed") }},
	}
	for _, st := range steps {
		b.Run(st.name, func(b *testing.B) {
			schema := newSchema(b)
			app := "mcpi-steps-" + schema
			rawURL := withApplication(b, serverURL(b), app)
			first := open(b, rawURL, schema, nil)
			if _, err := recordtest.Execute(ctx, first, "replayed"); err != nil {
				b.Fatal(err)
			}
			first.Close()
			before := walStats(b, app)
			s := open(b, rawURL, schema, nil)
			n := 0
			for b.Loop() {
				if err := st.do(s); err != nil {
					b.Fatal(err)
				}
				n++
			}
			s.Close()
			after := walStats(b, app)
			b.ReportMetric(float64(after.syncs-before.syncs)/float64(n), "wal-syncs/op")
			b.ReportMetric(float64(after.bytes-before.bytes)/float64(n), "wal-B/op")
		})
	}
}

// walCounts are pg_stat_wal's counts of WAL syncs and bytes.
type walCounts struct{ syncs, bytes int64 }

// walStats waits until no server process of the application app is left,
// so that every one has added its counts, and reads pg_stat_wal.
func walStats(b *testing.B, app string) walCounts {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := connect(ctx, serverURL(b))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	var method string
	if err := conn.QueryRow(ctx, "SHOW wal_sync_method").Scan(&method); err != nil {
		b.Fatal(err)
	}
	if method == "open_sync" || method == "open_datasync" {
		// pg_stat_wal counts no sync then: each write syncs itself.
		b.Fatalf("wal_sync_method is %s, whose syncs pg_stat_wal does not count", method)
	}
	for {
		var left int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&left); err != nil {
			b.Fatal(err)
		}
		if left == 0 {
			break
		}
		select {
		case <-ctx.Done():
			b.Fatalf("%d server processes of the store still running after its Close", left)
		case <-time.After(10 * time.Millisecond):
		}
	}
	var c walCounts
	if err := conn.QueryRow(ctx, "SELECT wal_sync, wal_bytes::bigint FROM pg_stat_wal").Scan(&c.syncs, &c.bytes); err != nil {
		b.Fatalf("reading pg_stat_wal (PostgreSQL 14 or later): %v", err)
	}
	return c
}

// withApplication returns rawURL with its application_name set to app.
func withApplication(b *testing.B, rawURL, app string) string {
	b.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		b.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return u.String()
}
