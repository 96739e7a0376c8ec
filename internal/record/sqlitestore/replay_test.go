package sqlitestore

import (
	"context"
	"database/sql"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
)

// TestReplay: Replay answers from a read only a key held by a delivered
// record of the call's action, counted as attached as Reserve counts it;
// anything else it leaves to Reserve, counting nothing, and it says when
// no record holds the key.
func TestReplay(t *testing.T) {
	s, _, done := executed(t)
	ctx := t.Context()
	probe := func(key, fp string) *record.Record { return &record.Record{Key: key, Fingerprint: fp} }

	rec, unheld, ok := s.Replay(ctx, probe("k", "k"), record.ReserveOptions{})
	if !ok || unheld || rec.ID != done.ID || rec.State != record.Delivered || rec.Attached != 1 || string(rec.Result) != string(recordtest.ExecutionResult) {
		t.Fatalf("Replay of the delivered record = %+v, unheld %v, ok %v; want it, attached to once", rec, unheld, ok)
	}
	// The next call's reservation counts on from there.
	r := &record.Record{ID: record.NewID(time.Now()), Key: "k", Fingerprint: "k", Tool: "charge_card", Retention: time.Hour}
	if got, won, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil || won || got.Attached != 2 {
		t.Fatalf("Reserve after the replay = %+v, won %v, %v; want the record, attached to twice", got, won, err)
	}

	if _, unheld, ok := s.Replay(ctx, probe("none", "none"), record.ReserveOptions{}); ok || !unheld {
		t.Errorf("Replay of a key no record holds: ok %v, unheld %v; want not ok, unheld", ok, unheld)
	}
	replace := record.ReserveOptions{Replace: []record.State{record.Completed, record.Delivered}}
	if _, unheld, ok := s.Replay(ctx, probe("k", "k"), replace); ok || unheld {
		t.Errorf("Replay for a tool whose calls replace a delivered record: ok %v, unheld %v; want neither", ok, unheld)
	}
	if _, unheld, ok := s.Replay(ctx, probe("k", "another action"), record.ReserveOptions{}); ok || unheld {
		t.Errorf("Replay of another action under the key: ok %v, unheld %v; want neither", ok, unheld)
	}

	dispatched := func(key string) *record.Record {
		t.Helper()
		r := &record.Record{ID: record.NewID(time.Now()), Key: key, Fingerprint: key, Tool: "charge_card", Retention: time.Hour,
			Owner: "proxy-1", LeaseUntil: time.Now().Add(time.Hour)}
		if _, won, err := s.Reserve(ctx, r, record.ReserveOptions{Dispatch: true}); err != nil || !won {
			t.Fatalf("Reserve %s: won %v, %v", key, won, err)
		}
		return r
	}
	flying := dispatched("f")
	if _, unheld, ok := s.Replay(ctx, probe("f", "f"), record.ReserveOptions{}); ok || unheld {
		t.Errorf("Replay of an execution under way: ok %v, unheld %v; want neither", ok, unheld)
	}
	// A completed record's replay records its delivery: Reserve's.
	completed := dispatched("c")
	if _, err := s.Update(ctx, completed.ID, record.Change{To: record.Completed, Result: recordtest.ExecutionResult}); err != nil {
		t.Fatal(err)
	}
	if _, unheld, ok := s.Replay(ctx, probe("c", "c"), record.ReserveOptions{}); ok || unheld {
		t.Errorf("Replay of a completed record: ok %v, unheld %v; want neither", ok, unheld)
	}
	for id, want := range map[string]int{done.ID: 2, flying.ID: 0, completed.ID: 0} {
		if got, err := s.Get(ctx, id); err != nil || got.Attached != want {
			t.Errorf("record %s attached %d, %v; want %d: only a replay answered counts", id, got.Attached, err, want)
		}
	}
}

// TestReserveUnheld: a reservation told that a read found the key unheld
// goes straight to its write, which finds a holder that came since: it
// matches it, counted once, as a reservation that read first does.
func TestReserveUnheld(t *testing.T) {
	s, _, done := executed(t)
	ctx := t.Context()
	r := &record.Record{ID: record.NewID(time.Now()), Key: "k", Fingerprint: "k", Tool: "charge_card", Retention: time.Hour}
	got, won, err := s.Reserve(ctx, r, record.ReserveOptions{Unheld: true})
	if err != nil || won || got.ID != done.ID || got.Attached != 1 {
		t.Fatalf("Reserve with Unheld of a held key = %+v, won %v, %v; want the holder, attached to once", got, won, err)
	}
	fresh := &record.Record{ID: record.NewID(time.Now()), Key: "new", Fingerprint: "new", Tool: "charge_card", Retention: time.Hour}
	if _, won, err := s.Reserve(ctx, fresh, record.ReserveOptions{Unheld: true}); err != nil || !won {
		t.Fatalf("Reserve with Unheld of a free key: won %v, %v; want it won", won, err)
	}
}

// TestReplayWaitsForNoWrite: while a write of the attach counts waits for
// another connection's write lock, Replay answers at once, not ok,
// counting nothing: the proxy calls it on the goroutine that reads a
// session, which must not wait for a lock.
func TestReplayWaitsForNoWrite(t *testing.T) {
	s, path, done := executed(t)
	ctx := t.Context()
	probe := &record.Record{Key: "k", Fingerprint: "k"}

	// Another connection holds the write lock; a write of the counts,
	// whoever starts it, waits.
	other, err := sql.Open("sqlite", fileURI(path))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := s.Replay(ctx, probe, record.ReserveOptions{}); !ok {
		t.Fatal("Replay of the delivered record: not ok")
	}
	flushed := make(chan error, 1)
	go func() { flushed <- s.attaches.Flush(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, ok := s.attaches.TryBegin(); !ok {
			break // the write is under way
		}
		if time.Now().After(deadline) {
			t.Fatal("no write of the counts began")
		}
	}
	if ok, returned := replayAtOnce(s, probe); !returned {
		t.Error("Replay waited for the write of the counts, which waits for another connection's lock")
	} else if ok {
		t.Error("Replay during a write of the counts: ok; want not ok")
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, done.ID); err != nil || got.Attached != 1 {
		t.Errorf("attached %d, %v; want 1: the refused replay counted nothing", got.Attached, err)
	}
}

// TestReplayTakesNoTurn: Replay reads on connections of its own that
// never wait for a lock, and when all are taken it answers nothing at
// once, where the read pool would have it wait for one.
func TestReplayTakesNoTurn(t *testing.T) {
	s, _, _ := executed(t)
	ctx := t.Context()
	for db, want := range map[*sql.DB]int{s.p: 0, s.r: int(busyTimeout.Milliseconds())} {
		var got int
		if err := db.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&got); err != nil || got != want {
			t.Errorf("busy_timeout %d, %v; want %d", got, err, want)
		}
	}
	probe := &record.Record{Key: "k", Fingerprint: "k"}
	// Every connection of the read pool taken: Replay has its own.
	var held []*sql.Conn
	for range max(4, runtime.GOMAXPROCS(0)) {
		c, err := s.r.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	if ok, returned := replayAtOnce(s, probe); !returned {
		t.Error("Replay waited for a connection of the read pool")
	} else if !ok {
		t.Error("Replay with the read pool taken: not ok")
	}
	for _, c := range held {
		c.Close()
	}
	for range replayConns {
		s.replays <- struct{}{}
	}
	if _, unheld, ok := s.Replay(ctx, probe, record.ReserveOptions{}); ok || unheld {
		t.Errorf("Replay with every connection taken: ok %v, unheld %v; want neither", ok, unheld)
	}
	for range replayConns {
		<-s.replays
	}
	if rec, _, ok := s.Replay(ctx, probe, record.ReserveOptions{}); !ok || rec.Attached != 2 {
		t.Errorf("Replay with a connection free: ok %v; want the record, attached to twice: the refused one counted nothing", ok)
	}
}

// replayAtOnce runs s.Replay of probe and reports whether it answered,
// and whether it returned within 3 s: one that waits is stuck behind
// what the test holds, and returns once the test lets it go.
func replayAtOnce(s *Store, probe *record.Record) (ok, returned bool) {
	replayed := make(chan bool, 1)
	go func() {
		_, _, ok := s.Replay(context.Background(), probe, record.ReserveOptions{})
		replayed <- ok
	}()
	select {
	case ok = <-replayed:
		return ok, true
	case <-time.After(3 * time.Second):
		return false, false
	}
}

// executed opens a store in a new file, at path, in which the call of
// key "k" ran and was delivered, and returns it with that record.
func executed(t *testing.T) (s *Store, path string, done *record.Record) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "records.db")
	s, err := Open(t.Context(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if done, err = recordtest.Execute(t.Context(), s, "k"); err != nil { // fingerprint "k"
		t.Fatal(err)
	}
	return s, path, done
}
