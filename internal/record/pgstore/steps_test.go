package pgstore

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
)

// BenchmarkSteps runs recordtest.ExecutionSteps one at a time and
// reports the WAL syncs the server made for each (wal-syncs/op) and the
// WAL it wrote (wal-B/op), from pg_stat_wal. A server process adds its
// counts there when it ends, so each sub-benchmark's store is closed,
// and its processes gone, before the counts are read; a store of its own
// made the record replayed. What its Close writes (the attach counts of
// the replays) is counted once a run: bench/writes.sh subtracts it with
// runs of two lengths. Every process's WAL counts: run it on a quiet
// server.
func BenchmarkSteps(b *testing.B) {
	ctx := context.Background()
	for _, st := range recordtest.ExecutionSteps {
		b.Run(st.Name, func(b *testing.B) {
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
			for b.Loop() {
				if err := st.Do(ctx, s); err != nil {
					b.Fatal(err)
				}
			}
			s.Close()
			after := walStats(b, app)
			b.ReportMetric(float64(after.syncs-before.syncs)/float64(b.N), "wal-syncs/op")
			b.ReportMetric(float64(after.bytes-before.bytes)/float64(b.N), "wal-B/op")
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
	// pg_stat_wal counts a sync only where one is made, by fsync or
	// fdatasync; a commit waits for it only with synchronous_commit on.
	// Before 15 a process's counts reached it later than its end, and
	// from 18 they are in pg_stat_io.
	var version int
	var fsync, method, commit string
	err = conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int, current_setting('fsync'),
		current_setting('wal_sync_method'), current_setting('synchronous_commit')`).Scan(&version, &fsync, &method, &commit)
	switch {
	case err != nil:
		b.Fatal(err)
	case version < 150000 || version >= 180000:
		b.Fatalf("the server is PostgreSQL %d: the WAL syncs are counted from pg_stat_wal on 15 to 17 only", version/10000)
	case fsync != "on" || commit == "off" || method == "open_sync" || method == "open_datasync":
		b.Fatalf("fsync %s, synchronous_commit %s, wal_sync_method %s: pg_stat_wal would not count the syncs a commit waits for; want fsync on, synchronous_commit not off, and fsync or fdatasync",
			fsync, commit, method)
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
		b.Fatal(err)
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
