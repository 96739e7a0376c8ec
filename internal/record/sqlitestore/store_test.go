package sqlitestore_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/sqlitestore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// open opens the store at path and closes it when the test ends.
func open(t testing.TB, path string, opts sqlitestore.Options) *sqlitestore.Store {
	t.Helper()
	s, err := sqlitestore.Open(context.Background(), path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func dbPath(t testing.TB) string { return filepath.Join(t.TempDir(), "records.db") }

func TestSemantics(t *testing.T) {
	recordtest.Run(t, func(t *testing.T, now func() time.Time) record.Store {
		return open(t, dbPath(t), sqlitestore.Options{Now: now})
	})
}

func newRecord(key string) *record.Record {
	return &record.Record{
		ID:          record.NewID(time.Now()),
		Key:         key,
		Fingerprint: "f-" + key,
		Actor:       "alice",
		Scope:       "session:1",
		Upstream:    "stdio:server",
		Tool:        "charge_card",
		Retention:   time.Hour,
	}
}

func TestReopenKeepsRecords(t *testing.T) {
	ctx := t.Context()
	path := dbPath(t)
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 123456789, time.UTC))
	s, err := sqlitestore.Open(ctx, path, sqlitestore.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	r := newRecord("k")
	r.Owner, r.LeaseUntil = "proxy-1", clock.Now().Add(time.Minute)
	if _, won, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil || !won {
		t.Fatalf("Reserve = won %v, %v", won, err)
	}
	clock.Advance(time.Millisecond)
	if _, err := s.Update(ctx, r.ID, record.Change{To: record.Dispatched, Note: "sent"}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Microsecond)
	want, err := s.Update(ctx, r.ID, record.Change{To: record.Completed, Result: json.RawMessage(`{"content":[]}`)})
	if err != nil {
		t.Fatal(err)
	}
	secret, err := s.Secret(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, path, sqlitestore.Options{Now: clock.Now})
	got, err := s.Get(ctx, r.ID)
	if err != nil {
		t.Fatalf("after reopening: %v", err)
	}
	if !sameRecord(got, want) {
		t.Errorf("after reopening:\n got  %+v\n want %+v", got, want)
	}
	if got, won, err := s.Reserve(ctx, newRecord("k"), record.ReserveOptions{}); err != nil || won || got.ID != r.ID || got.Attached != 1 {
		t.Errorf("Reserve after reopening = %v won=%v %v; want %s matched, attached 1", got, won, err, r.ID)
	}
	again, err := s.Secret(ctx)
	if err != nil || !bytes.Equal(again, secret) {
		t.Errorf("Secret after reopening = %x, %v; want %x", again, err, secret)
	}
}

// sameRecord compares records field by field, times with Equal.
func sameRecord(a, b *record.Record) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return bytes.Equal(ja, jb)
}

func TestSyncOption(t *testing.T) {
	for _, tt := range []struct {
		sync string
		want int // PRAGMA synchronous; 0: Open fails
	}{
		{"", 1},
		{"normal", 1},
		{"full", 2},
		{"FULL", 2},
		{"off", 0},
		{"fsync", 0},
	} {
		t.Run(tt.sync, func(t *testing.T) {
			s, err := sqlitestore.Open(t.Context(), dbPath(t), sqlitestore.Options{Sync: tt.sync})
			if tt.want == 0 {
				if err == nil {
					s.Close()
					t.Fatalf("Open with sync %q succeeded; want an error", tt.sync)
				}
				if !strings.Contains(err.Error(), `invalid sync "`+tt.sync+`"`) {
					t.Errorf("error %q does not name the bad sync value", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if n, err := s.Synchronous(t.Context()); err != nil || n != tt.want {
				t.Errorf("PRAGMA synchronous = %d, %v; want %d", n, err, tt.want)
			}
			if mode, err := s.JournalMode(t.Context()); err != nil || mode != "wal" {
				t.Errorf("journal_mode = %q, %v; want wal", mode, err)
			}
		})
	}
}

func TestOpenURL(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		url     string
		wantErr string // "" for success
	}{
		{"sqlite:" + filepath.Join(dir, "a.db"), ""},
		{"sqlite:" + filepath.Join(dir, "b.db") + "?sync=full", ""},
		{"sqlite:" + filepath.Join(dir, "c.db") + "?sync=normal", ""},
		{"sqlite:" + filepath.Join(dir, "d.db") + "?sync=sometimes", `invalid sync "sometimes"`},
		{"sqlite:" + filepath.Join(dir, "e.db") + "?cache=shared", `unknown parameter "cache"`},
		{"sqlite:", "no database path"},
		{"sqlite:?sync=full", "no database path"},
		{"sqlite://records.db", "sqlite:records.db for a path in the current directory"},
		{"postgres://localhost/db", "not a sqlite:PATH URL"},
	} {
		t.Run(tt.url, func(t *testing.T) {
			s, err := sqlitestore.OpenURL(t.Context(), tt.url, sqlitestore.Options{})
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				s.Close()
				return
			}
			if err == nil {
				s.Close()
				t.Fatalf("OpenURL(%q) succeeded; want an error", tt.url)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("OpenURL(%q) = %q; want it to say %q", tt.url, err, tt.wantErr)
			}
		})
	}
}

func TestOpenURLSyncFull(t *testing.T) {
	s, err := sqlitestore.OpenURL(t.Context(), "sqlite:"+dbPath(t)+"?sync=full", sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n, err := s.Synchronous(t.Context()); err != nil || n != 2 {
		t.Errorf("PRAGMA synchronous = %d, %v; want 2 (FULL)", n, err)
	}
}

func TestMissingDirectory(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no", "such", "dir")
	path := filepath.Join(missing, "records.db")
	_, err := sqlitestore.Open(t.Context(), path, sqlitestore.Options{})
	if err == nil {
		t.Fatal("Open in a missing directory succeeded")
	}
	if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), missing+" does not exist") {
		t.Errorf("error %q; want it to name %s and say its directory does not exist", err, path)
	}
}

func TestNewFileIsPrivate(t *testing.T) {
	path := dbPath(t)
	open(t, path, sqlitestore.Options{})
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("database file mode %v; want 0600, since it holds the secret", perm)
	}
}

func TestSecretIsSharedAndCreatedOnce(t *testing.T) {
	path := dbPath(t)
	const stores = 4
	secrets := make([][]byte, stores)
	var wg sync.WaitGroup
	for i := range stores {
		s := open(t, path, sqlitestore.Options{})
		wg.Go(func() {
			var err error
			if secrets[i], err = s.Secret(t.Context()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if len(secrets[0]) != 32 {
		t.Fatalf("secret is %d bytes; want 32", len(secrets[0]))
	}
	for i, s := range secrets {
		if !bytes.Equal(s, secrets[0]) {
			t.Fatalf("store %d has secret %x, store 0 %x; all must agree", i, s, secrets[0])
		}
	}
	other, err := open(t, dbPath(t), sqlitestore.Options{}).Secret(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(other, secrets[0]) {
		t.Error("two databases have the same secret")
	}
}

func TestPurge(t *testing.T) {
	ctx := t.Context()
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	s := open(t, dbPath(t), sqlitestore.Options{Now: clock.Now})
	var ids []string
	for i := range 100 {
		r := newRecord("k" + string(rune('a'+i%26)) + time.Duration(i).String())
		r.Retention = time.Minute
		if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Update(ctx, r.ID, record.Change{To: record.Failed}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	inFlight := newRecord("still running")
	if _, _, err := s.Reserve(ctx, inFlight, record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Purge(ctx, 1000); err != nil || n != 0 {
		t.Fatalf("Purge before the retention ran out = %d, %v; want 0", n, err)
	}
	clock.Advance(time.Minute)
	if n, err := s.Purge(ctx, 60); err != nil || n != 60 {
		t.Fatalf("Purge(60) = %d, %v; want 60, the limit", n, err)
	}
	// Reservations purge the rest a batch at a time.
	for range 64 {
		if _, _, err := s.Reserve(ctx, newRecord("fresh"+record.NewID(clock.Now())), record.ReserveOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		if _, err := s.Get(ctx, id); !errors.Is(err, record.ErrNotFound) {
			t.Fatalf("Get(%s) after its retention = %v; want ErrNotFound", id, err)
		}
	}
	if _, err := s.Get(ctx, inFlight.ID); err != nil {
		t.Errorf("a record in flight was purged: %v", err)
	}
}

func TestWaitSeesAnotherStoresChange(t *testing.T) {
	ctx := t.Context()
	path := dbPath(t)
	a := open(t, path, sqlitestore.Options{})
	b := open(t, path, sqlitestore.Options{})
	r, _, err := a.Reserve(ctx, newRecord("k"), record.ReserveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan *record.Record)
	go func() {
		got, err := a.Wait(ctx, r.ID)
		if err != nil {
			t.Error(err)
		}
		done <- got
	}()
	// b cannot wake a's waiters; a must see the change by polling.
	if _, err := b.Update(ctx, r.ID, record.Change{To: record.Failed, Note: "upstream not started"}); err != nil {
		t.Fatal(err)
	}
	if got := <-done; got == nil || got.State != record.Failed {
		t.Fatalf("Wait = %+v; want the record failed by the other store", got)
	}
}

// TestManyWaitsSeeAnotherStoresChanges: a Store's poller reads the
// records of all its Waits, however many, a few hundred a statement.
func TestManyWaitsSeeAnotherStoresChanges(t *testing.T) {
	ctx := t.Context()
	path := dbPath(t)
	a := open(t, path, sqlitestore.Options{})
	b := open(t, path, sqlitestore.Options{})
	const n = 1200 // more than two statements' worth
	ids := make([]string, n)
	for i := range ids {
		r, _, err := a.Reserve(ctx, newRecord(fmt.Sprint("k", i)), record.ReserveOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = r.ID
	}
	var wg sync.WaitGroup
	waiting := make(chan struct{}, n)
	for _, id := range ids {
		wg.Go(func() {
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			waiting <- struct{}{}
			if got, err := a.Wait(wctx, id); err != nil || got.State != record.Failed {
				t.Errorf("Wait(%s) = %+v, %v; want it failed by the other store", id, got, err)
			}
		})
	}
	for range n {
		<-waiting
	}
	for _, id := range ids {
		if _, err := b.Update(ctx, id, record.Change{To: record.Failed}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}

func TestCloseEndsWaits(t *testing.T) {
	s, err := sqlitestore.Open(t.Context(), dbPath(t), sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := s.Reserve(t.Context(), newRecord("k"), record.ReserveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		_, err := s.Wait(t.Context(), r.ID)
		done <- err
	}()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatal("Wait returned no error after Close")
	}
}

func TestPathWithURICharacters(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a?b#c%20d e")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "records.db")
	s := open(t, path, sqlitestore.Options{})
	if _, _, err := s.Reserve(t.Context(), newRecord("k"), record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("the database is not at the path given: %v", err)
	}
	if _, err := os.Stat(path + "-wal"); err != nil {
		t.Errorf("no WAL beside the database: %v", err)
	}
}

func TestAllowances(t *testing.T) {
	recordtest.RunAllowances(t, func(t *testing.T) (recordtest.AllowanceStore, recordtest.AllowanceStore) {
		path := dbPath(t)
		return open(t, path, sqlitestore.Options{}), open(t, path, sqlitestore.Options{})
	})
}

// TestAllowancesInAnOlderFile opens a file an older build made, without
// the allowances table: opening it adds the table.
func TestAllowancesInAnOlderFile(t *testing.T) {
	path := dbPath(t)
	s, err := sqlitestore.Open(t.Context(), path, sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("DROP TABLE allowances"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	a := retry.Allowance{Rate: 1, Burst: 1}
	if ok, _, err := open(t, path, sqlitestore.Options{}).TakeAllowance(t.Context(), "bank", a, time.Now()); !ok || err != nil {
		t.Fatalf("TakeAllowance on a reopened older file = %v, %v; want room", ok, err)
	}
}

// TestRemovedFileFailsClosed: a database file removed or replaced under an
// open Store is found out at the next Renew, and reservations then fail
// closed: a process opening the path now has a store of its own, and the
// two would each run a call the other ran.
//
// So with the -wal or the -shm file removed: a process opening the path
// then makes them anew, and shares neither this one's writes nor its
// locks.
func TestRemovedFileFailsClosed(t *testing.T) {
	for _, tt := range []struct{ how, suffix string }{
		{"removed", ""}, {"replaced", ""}, {"removed", "-wal"}, {"removed", "-shm"}, {"replaced", "-shm"},
	} {
		t.Run(tt.how+tt.suffix, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "records.db")
			s := open(t, path, sqlitestore.Options{})
			ctx := context.Background()
			if err := s.Renew(ctx, "p", time.Now().Add(time.Minute)); err != nil {
				t.Fatalf("Renew of a file in place: %v", err)
			}
			if err := os.Remove(path + tt.suffix); err != nil {
				t.Fatal(err)
			}
			if tt.how == "replaced" {
				open(t, path, sqlitestore.Options{}) // another process makes it anew
			}
			if err := s.Renew(ctx, "p", time.Now().Add(time.Minute)); !errors.Is(err, sqlitestore.ErrFileLost) || !strings.Contains(err.Error(), path+tt.suffix) {
				t.Fatalf("Renew after %s%s was %s: %v; want ErrFileLost naming it", path, tt.suffix, tt.how, err)
			}
			r := &record.Record{ID: record.NewID(time.Now()), Key: "k", Tool: "t"}
			if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); !errors.Is(err, sqlitestore.ErrFileLost) {
				t.Fatalf("Reserve after %s%s was %s: %v; want ErrFileLost", path, tt.suffix, tt.how, err)
			}
		})
	}
}

// TestPeersClosingKeepTheFile: other stores on the file, a reader's
// too, that close while this one is open leave its -wal and -shm in
// place: the store does not take their close for a removal.
func TestPeersClosingKeepTheFile(t *testing.T) {
	ctx := t.Context()
	path := dbPath(t)
	s := open(t, path, sqlitestore.Options{})
	for _, opts := range []sqlitestore.Options{{}, {ReadOnly: true}} {
		peer, err := sqlitestore.Open(ctx, path, opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := peer.List(ctx, record.Filter{}); err != nil {
			t.Fatal(err)
		}
		if err := peer.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Renew(ctx, "p", time.Now().Add(time.Minute)); err != nil {
		t.Fatalf("Renew once the peers closed: %v", err)
	}
	if _, _, err := s.Reserve(ctx, newRecord("k"), record.ReserveOptions{}); err != nil {
		t.Fatalf("Reserve once the peers closed: %v", err)
	}
}

// TestAnotherApplicationsFile: a database file that another
// application made is refused, naming the file and its tables, and left
// as it was: not switched to WAL, no table added.
func TestAnotherApplicationsFile(t *testing.T) {
	path := dbPath(t)
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO users VALUES (1, 'alice')"); err != nil {
		t.Fatal(err)
	}
	s, err := sqlitestore.Open(t.Context(), path, sqlitestore.Options{})
	if err == nil {
		s.Close()
		t.Fatal("Open of another application's database succeeded")
	}
	if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "(users)") {
		t.Errorf("Open of another application's database: %v; want it to name the file and its tables", err)
	}
	var mode string
	var tables int
	if err := db.QueryRow("SELECT (SELECT journal_mode FROM pragma_journal_mode), (SELECT count(*) FROM sqlite_master WHERE type = 'table')").Scan(&mode, &tables); err != nil {
		t.Fatal(err)
	}
	if mode != "delete" || tables != 1 {
		t.Errorf("the file is in journal mode %q with %d tables; want delete and 1, as it was", mode, tables)
	}
}

// TestRenewDoesNotQueueBehindWrites: the leases of a process's executions
// are renewed while its writer is busy. Behind a long queue of writes the
// renewal would come after the leases lapsed, and live executions would
// be taken for a dead process's.
func TestRenewDoesNotQueueBehindWrites(t *testing.T) {
	ctx := t.Context()
	s := open(t, dbPath(t), sqlitestore.Options{})
	r := newRecord("k")
	r.Owner, r.LeaseUntil = "proxy-1", time.Now().Add(time.Minute)
	if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	release, err := s.HoldWriter(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	renewCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	until := time.Now().Add(time.Hour)
	if err := s.Renew(renewCtx, "proxy-1", until); err != nil {
		t.Fatalf("Renew while the writer is busy: %v", err)
	}
	if got, err := s.Get(ctx, r.ID); err != nil || !got.LeaseUntil.Equal(until.Round(0).UTC()) {
		t.Fatalf("after Renew the lease runs until %v (%v); want %v", got.LeaseUntil, err, until)
	}
}

// hog writes to the file at path from a connection of its own until stop
// is closed: it takes the write lock, holds it for hold, and commits if
// commit is set, then takes it again at once.
func hog(t *testing.T, path string, hold time.Duration, commit bool, stop <-chan struct{}) (done <-chan struct{}) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec("CREATE TABLE IF NOT EXISTS hog (n INTEGER)"); err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	locked, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		defer conn.Close()
		for first := true; ; first = false {
			if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
				t.Error(err)
				return
			}
			conn.ExecContext(context.Background(), "INSERT INTO hog VALUES (1)")
			if first {
				close(locked)
			}
			select {
			case <-stop:
				conn.ExecContext(context.Background(), "COMMIT")
				return
			case <-time.After(hold):
			}
			end := "ROLLBACK"
			if commit {
				end = "COMMIT"
			}
			conn.ExecContext(context.Background(), end)
			if !commit {
				<-stop
				return
			}
		}
	}()
	<-locked
	return finished
}

// busyStore opens a store with a busy timeout of 200 ms, for the test's
// length, and reserves one execution: its file's path and the id.
func busyStore(t *testing.T) (s *sqlitestore.Store, path, id string) {
	t.Helper()
	t.Cleanup(sqlitestore.SetBusyTimeout(200 * time.Millisecond))
	path = dbPath(t)
	s = open(t, path, sqlitestore.Options{})
	r, _, err := s.Reserve(t.Context(), newRecord("k"), record.ReserveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s, path, r.ID
}

// TestBusyWithOthersWritesWaits: a write that finds the file's write
// lock taken and given again by another process, which commits, for
// longer than the busy timeout is under load: it waits its turn instead
// of failing.
func TestBusyWithOthersWritesWaits(t *testing.T) {
	s, path, id := busyStore(t)
	stop := make(chan struct{})
	done := hog(t, path, 20*time.Millisecond, true, stop)
	time.AfterFunc(time.Second, func() { close(stop) })
	_, err := s.Update(t.Context(), id, record.Change{To: record.Failed})
	<-done
	if err != nil {
		t.Fatalf("Update while another process writes and commits: %v; want it to wait its turn", err)
	}
}

// TestBusyWithAStuckPeerFails: a write lock held by a process that does
// not commit makes a write fail, in a couple of busy timeouts, rather than
// hang: the proxy fails closed.
func TestBusyWithAStuckPeerFails(t *testing.T) {
	s, path, id := busyStore(t)
	stop := make(chan struct{})
	done := hog(t, path, time.Minute, false, stop)
	_, err := s.Update(t.Context(), id, record.Change{To: record.Failed})
	close(stop)
	<-done
	if err == nil || !strings.Contains(err.Error(), "SQLITE_BUSY") {
		t.Fatalf("Update while another process holds the lock: %v; want SQLITE_BUSY", err)
	}
}

// TestOpenWhileAStuckPeerHoldsTheLock: a file whose schema is current
// opens while another process holds its write lock, as a store that does
// not answer lets the proxy start; its writes fail closed until the lock
// is free.
func TestOpenWhileAStuckPeerHoldsTheLock(t *testing.T) {
	t.Cleanup(sqlitestore.SetBusyTimeout(200 * time.Millisecond))
	path := dbPath(t)
	first, err := sqlitestore.Open(t.Context(), path, sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	stop := make(chan struct{})
	done := hog(t, path, time.Minute, false, stop)
	s := open(t, path, sqlitestore.Options{})
	if _, _, err := s.Reserve(t.Context(), newRecord("k"), record.ReserveOptions{}); err == nil || !strings.Contains(err.Error(), "SQLITE_BUSY") {
		t.Fatalf("Reserve while another process holds the lock: %v; want SQLITE_BUSY", err)
	}
	close(stop)
	<-done
	if _, _, err := s.Reserve(t.Context(), newRecord("k"), record.ReserveOptions{}); err != nil {
		t.Fatalf("Reserve once the lock is free: %v", err)
	}
}

// TestDecisions runs recordtest.RunDecisions on two Stores that share
// one file, as two processes do.
func TestDecisions(t *testing.T) {
	recordtest.RunDecisions(t, func(t *testing.T) (record.Store, record.Store) {
		path := dbPath(t)
		return open(t, path, sqlitestore.Options{}), open(t, path, sqlitestore.Options{})
	})
}

func TestPurgeTellsOfOrphans(t *testing.T) {
	recordtest.RunPurgeTellsOfOrphans(t, func(t *testing.T, now func() time.Time, orphaned func(*record.Record)) record.Store {
		return open(t, dbPath(t), sqlitestore.Options{Now: now, Orphaned: orphaned})
	})
}
