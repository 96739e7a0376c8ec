package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/batch"
)

// openStore opens a store in a new file, closed when the test ends.
func openStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "records.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// holdWrites starts a write that holds the process's turn at the write
// lock, and the writer, until the channel returned is closed; the writes
// made meanwhile wait.
func holdWrites(s *Store) chan<- struct{} {
	hold, held := make(chan struct{}), make(chan struct{})
	go s.write(context.Background(), func(context.Context, *sql.Tx, time.Time) error {
		close(held)
		<-hold
		return nil
	})
	<-held
	return hold
}

// TestWritesWaitingGoTogether: the writes that wait while one runs go in
// one transaction; one that fails there fails alone, and the others are
// committed.
func TestWritesWaitingGoTogether(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	var mu sync.Mutex
	var sizes []int
	s.writes.Close()
	s.writes = batch.Start(maxWrites, 1, func(ctx context.Context, calls []*batch.Call[*write]) {
		mu.Lock()
		sizes = append(sizes, len(calls))
		mu.Unlock()
		s.sendWrites(ctx, calls)
	})
	reserve := func(key string) (*record.Record, bool, error) {
		r := &record.Record{ID: record.NewID(time.Now()), Key: key, Fingerprint: "f-" + key, Tool: "charge_card", Retention: time.Hour}
		return s.Reserve(ctx, r, record.ReserveOptions{Dispatch: true, Lease: time.Minute})
	}
	done, _, err := reserve("done")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, done.ID, record.Change{To: record.Completed, Result: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	sent, _, err := reserve("sent")
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	sizes = nil
	mu.Unlock()

	hold := holdWrites(s)
	const reserves = 10
	var wg sync.WaitGroup
	won := make([]bool, reserves)
	errs := make([]error, reserves+2)
	for i := range reserves {
		wg.Go(func() {
			_, won[i], errs[i] = reserve(fmt.Sprint("k", i))
		})
	}
	wg.Go(func() { // a transition the record's state does not allow
		_, errs[reserves] = s.Update(ctx, done.ID, record.Change{To: record.Dispatched})
	})
	wg.Go(func() {
		_, errs[reserves+1] = s.Update(ctx, sent.ID, record.Change{To: record.Completed, Result: []byte(`{}`)})
	})
	for s.writes.Queued() < reserves+2 {
		time.Sleep(time.Millisecond)
	}
	close(hold)
	wg.Wait()

	if want := []int{1, reserves + 2}; fmt.Sprint(sizes) != fmt.Sprint(want) {
		t.Fatalf("batches of %v; want %v: the held write alone, then all that waited", sizes, want)
	}
	for i := range reserves {
		if errs[i] != nil || !won[i] {
			t.Errorf("reservation %d: won %v, %v; want won", i, won[i], errs[i])
		}
	}
	if !errors.Is(errs[reserves], record.ErrConflict) {
		t.Errorf("the transition not allowed returned %v; want ErrConflict", errs[reserves])
	}
	if errs[reserves+1] != nil {
		t.Errorf("the transition allowed returned %v", errs[reserves+1])
	}
	// Committed: a reader on another connection sees them.
	if got, err := s.Get(ctx, sent.ID); err != nil || got.State != record.Completed {
		t.Errorf("the execution completed in the batch reads as %v, %v", got, err)
	}
	recs, err := s.List(ctx, record.Filter{State: record.Dispatched})
	if err != nil || len(recs) != reserves {
		t.Errorf("%d dispatched executions, %v; want the batch's %d", len(recs), err, reserves)
	}
}

// TestRenewTakesItsTurn: a renewal waiting while a batch runs goes before
// the next batch, which writes beside it always waiting would otherwise
// take the write lock for again at once, while the renewal sleeps in
// SQLite's busy handler: the process's leases would lapse under load.
func TestRenewTakesItsTurn(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	r := &record.Record{ID: record.NewID(time.Now()), Key: "k", Fingerprint: "f", Tool: "charge_card", Owner: "p1", Retention: time.Hour}
	if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{Dispatch: true, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(time.Hour).Round(0).UTC()

	hold := holdWrites(s)
	renewed := make(chan error, 1)
	go func() { renewed <- s.Renew(ctx, "p1", until) }()
	var lease sql.NullInt64
	next := make(chan error, 1)
	go func() {
		next <- s.write(ctx, func(ctx context.Context, tx *sql.Tx, _ time.Time) error {
			return tx.QueryRowContext(ctx, "SELECT lease_until FROM records WHERE id = ?", r.ID).Scan(&lease)
		})
	}()
	for s.writes.Queued() < 1 {
		time.Sleep(time.Millisecond)
	}
	// Past a millisecond of waiting, a sync.Mutex hands over in order.
	time.Sleep(5 * time.Millisecond)
	close(hold)
	if err := <-renewed; err != nil {
		t.Fatal(err)
	}
	if err := <-next; err != nil {
		t.Fatal(err)
	}
	if !lease.Valid || lease.Int64 != until.UnixNano() {
		t.Fatalf("the write after the held batch read the lease %v; want the renewal's, %d: it went first", lease, until.UnixNano())
	}
}

// TestFailureThatEndsTheTransactionEndsTheBatch: an update goes without a
// savepoint, but when SQLite answers its statement by rolling back the
// whole transaction (here a trigger's RAISE(ROLLBACK); a full disk can
// too), the writes after it in the batch must not commit one by one while
// the batch reports them failed. Each write is told it failed exactly
// when its change is not there.
func TestFailureThatEndsTheTransactionEndsTheBatch(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	var ids []string
	for _, key := range []string{"first", "second"} {
		r := &record.Record{ID: record.NewID(time.Now()), Key: key, Fingerprint: "f-" + key, Tool: "charge_card", Retention: time.Hour}
		if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{Dispatch: true, Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	trigger := fmt.Sprintf(`CREATE TRIGGER fail_first BEFORE UPDATE ON records WHEN OLD.id = '%s'
		BEGIN SELECT RAISE(ROLLBACK, 'the whole transaction'); END`, ids[0])
	if _, err := s.w.ExecContext(ctx, trigger); err != nil {
		t.Fatal(err)
	}

	hold := holdWrites(s)
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			_, errs[i] = s.Update(ctx, id, record.Change{To: record.Completed, Result: []byte(`{}`)})
		})
		for s.writes.Queued() < i+1 { // in this order in the batch
			time.Sleep(time.Millisecond)
		}
	}
	close(hold)
	wg.Wait()

	if errs[0] == nil {
		t.Fatal("the update the trigger rolls back returned no error")
	}
	for i, id := range ids {
		got, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if changed := got.State == record.Completed; changed != (errs[i] == nil) {
			t.Errorf("update %d returned %v, and the record is %s", i, errs[i], got.State)
		}
	}
}
