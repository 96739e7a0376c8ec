package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
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
	go s.write(context.Background(), func(context.Context, *wtx, time.Time) error {
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
	release := sync.OnceFunc(func() { close(hold) })
	defer release() // before the Store's Close, should the test fail
	renewed := make(chan error, 1)
	go func() { renewed <- s.Renew(ctx, "p1", until) }()
	var lease sql.NullInt64
	next := make(chan error, 1)
	go func() {
		next <- s.write(ctx, func(ctx context.Context, tx *wtx, _ time.Time) error {
			return tx.QueryRowContext(ctx, "SELECT lease_until FROM records WHERE id = ?", r.ID).Scan(&lease)
		})
	}()
	for s.writes.Queued() < 1 {
		time.Sleep(time.Millisecond)
	}
	waitBlocked(t, "(*Store).Renew(", "select")
	release()
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

// waitBlocked waits until a goroutine whose stack holds fn is blocked
// in state, as runtime.Stack shows them: a goroutine's stack is the
// only place that says it waits, and not merely that it is about to.
func waitBlocked(t *testing.T, fn, state string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		for g := range strings.SplitSeq(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			header, _, _ := strings.Cut(g, "\n")
			if strings.Contains(header, "["+state) && strings.Contains(g, fn) {
				return
			}
		}
	}
	t.Fatalf("no goroutine in %s was blocked in %s within 10 s", fn, state)
}

// Updates go without a savepoint (runBeside). Each of the tests below puts
// updates of dispatched records in one batch, in order, makes one of them
// fail, and checks that each update is told it failed exactly when its
// change is not there.

// TestFailureThatEndsTheTransactionEndsTheBatch: when SQLite answers an
// update's statement by rolling back the whole transaction (here a
// trigger's RAISE(ROLLBACK); a full disk can too), the writes after it
// must not commit one by one while the batch reports them failed.
func TestFailureThatEndsTheTransactionEndsTheBatch(t *testing.T) {
	s := openStore(t)
	ids := reserveDispatched(t, s, "first", "second")
	failUpdates(t, s, ids[0], "RAISE(ROLLBACK, 'the whole transaction')")
	errs := completeInOneBatch(s, ids)
	if errs[0] == nil || errs[1] == nil {
		t.Fatalf("updates returned %v; want both failed: the batch ends with the transaction", errs)
	}
	checkToldFailed(t, s, ids, errs)

	// The transaction stillOpen began to find out was rolled back: the
	// writer goes on.
	if _, err := s.w.ExecContext(context.Background(), "DROP TRIGGER fail"); err != nil {
		t.Fatal(err)
	}
	errs = completeInOneBatch(s, ids)
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("after the rolled-back batch, updates returned %v", errs)
	}
	checkToldFailed(t, s, ids, errs)
}

// TestFailingUpdateFailsAlone: an update that fails before its change
// fails alone; the reservation before it and the update after it in its
// batch are committed. It may fail in SQLite, which refuses its statement
// without ending the transaction (here a trigger's RAISE(ABORT); a value
// too big does the same), or in Go, on a record it cannot read.
func TestFailingUpdateFailsAlone(t *testing.T) {
	for _, c := range []struct {
		name  string
		spoil string
	}{
		{"statement refused", ""},
		{"record unreadable", "UPDATE records SET history = 'not JSON' WHERE id = ?"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			s := openStore(t)
			ids := reserveDispatched(t, s, "failing", "next")
			if c.spoil == "" {
				failUpdates(t, s, ids[0], "RAISE(ABORT, 'this one only')")
			} else if _, err := s.w.ExecContext(ctx, c.spoil, ids[0]); err != nil {
				t.Fatal(err)
			}
			errs := inOneBatch(s,
				func() error {
					r := &record.Record{ID: record.NewID(time.Now()), Key: "new", Fingerprint: "f-new", Tool: "charge_card", Retention: time.Hour}
					_, _, err := s.Reserve(ctx, r, record.ReserveOptions{Dispatch: true, Lease: time.Minute})
					return err
				},
				complete(s, ids[0]),
				complete(s, ids[1]),
			)
			if errs[0] != nil || errs[1] == nil || errs[2] != nil {
				t.Fatalf("reserve, update, update returned %v; want only the failing update to fail", errs)
			}
			checkToldFailed(t, s, ids, errs[1:])
		})
	}
}

// TestChangeThenFailureIsNotCommitted: a write that made its change and
// then failed (errChanged: an update of a known record whose count of
// changed rows could not be read) must not be committed, since it is
// told it failed.
func TestChangeThenFailureIsNotCommitted(t *testing.T) {
	s := openStore(t)
	ids := reserveDispatched(t, s, "changed, then failed", "next")
	errs := inOneBatch(s,
		func() error {
			return s.write(context.Background(), func(ctx context.Context, tx *wtx, _ time.Time) error {
				if _, err := tx.ExecContext(ctx, "UPDATE records SET state = ? WHERE id = ?", record.Completed, ids[0]); err != nil {
					return err
				}
				return errChanged{errors.New("the count of changed rows cannot be read")}
			})
		},
		complete(s, ids[1]),
	)
	if errs[0] == nil {
		t.Fatal("the write that failed after its change returned no error")
	}
	checkToldFailed(t, s, ids, errs)
}

// TestFailedWriteInASavepointIsUndone: a write that opened a savepoint
// (wtx.save: a reservation that makes more than one change) and fails
// after making changes has them undone, and the writes beside it in the
// batch are committed; twice in one batch, as the savepoint's statements
// are used again.
func TestFailedWriteInASavepointIsUndone(t *testing.T) {
	s := openStore(t)
	ids := reserveDispatched(t, s, "failed 1", "kept 1", "failed 2", "kept 2")
	write := func(id string, fail bool) func() error {
		return func() error {
			return s.write(context.Background(), func(ctx context.Context, tx *wtx, _ time.Time) error {
				if err := tx.save(ctx); err != nil {
					return err
				}
				if _, err := tx.ExecContext(ctx, "UPDATE records SET state = ? WHERE id = ?", record.Completed, id); err != nil {
					return err
				}
				if fail {
					return errors.New("failed after its change")
				}
				return nil
			})
		}
	}
	errs := inOneBatch(s, write(ids[0], true), write(ids[1], false), write(ids[2], true), write(ids[3], false))
	if errs[0] == nil || errs[2] == nil || errs[1] != nil || errs[3] != nil {
		t.Errorf("the writes returned %v; want the first and third to fail alone", errs)
	}
	checkToldFailed(t, s, ids, errs)
}

// reserveDispatched reserves and dispatches a record for each key, and
// returns their ids.
func reserveDispatched(t *testing.T, s *Store, keys ...string) []string {
	t.Helper()
	var ids []string
	for _, key := range keys {
		r := &record.Record{ID: record.NewID(time.Now()), Key: key, Fingerprint: "f-" + key, Tool: "charge_card", Retention: time.Hour}
		if _, _, err := s.Reserve(context.Background(), r, record.ReserveOptions{Dispatch: true, Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	return ids
}

// failUpdates makes every update of the record id run raise, an SQLite
// RAISE(...) expression.
func failUpdates(t *testing.T, s *Store, id, raise string) {
	t.Helper()
	trigger := fmt.Sprintf("CREATE TRIGGER fail BEFORE UPDATE ON records WHEN OLD.id = '%s' BEGIN SELECT %s; END", id, raise)
	if _, err := s.w.ExecContext(context.Background(), trigger); err != nil {
		t.Fatal(err)
	}
}

// complete returns a call that completes the record id.
func complete(s *Store, id string) func() error {
	return func() error {
		_, err := s.Update(context.Background(), id, record.Change{To: record.Completed, Result: []byte(`{}`)})
		return err
	}
}

// completeInOneBatch completes the records ids in one batch, in order.
func completeInOneBatch(s *Store, ids []string) []error {
	var calls []func() error
	for _, id := range ids {
		calls = append(calls, complete(s, id))
	}
	return inOneBatch(s, calls...)
}

// inOneBatch makes the calls, each one write, while the writer is held,
// each queued before the next starts, so that they go in one batch in
// this order; it returns their errors.
func inOneBatch(s *Store, calls ...func() error) []error {
	hold := holdWrites(s)
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, call := range calls {
		wg.Go(func() { errs[i] = call() })
		for s.writes.Queued() < i+1 {
			time.Sleep(time.Millisecond)
		}
	}
	close(hold)
	wg.Wait()
	return errs
}

// checkToldFailed checks that the update of each record ids[i] returned
// errs[i] exactly when the record is not completed.
func checkToldFailed(t *testing.T, s *Store, ids []string, errs []error) {
	t.Helper()
	for i, id := range ids {
		// The state alone: a record may hold what does not scan.
		var state record.State
		if err := s.r.QueryRowContext(context.Background(), "SELECT state FROM records WHERE id = ?", id).Scan(&state); err != nil {
			t.Fatal(err)
		}
		if changed := state == record.Completed; changed != (errs[i] == nil) {
			t.Errorf("update %d returned %v, and the record is %s", i, errs[i], state)
		}
	}
}

// TestRenewGivesUpWithItsContext: a renewal that waits for its turn
// behind a batch that does not end (a disk that stalls) returns when its
// context ends: the proxy's lease keeper, whose context ends when the
// proxy stops, would otherwise hold up its stop. Once the batch ends, the turn goes on to the next: the renewal that
// gave up took none.
func TestRenewGivesUpWithItsContext(t *testing.T) {
	s := openStore(t)
	hold := holdWrites(s)
	release := sync.OnceFunc(func() { close(hold) })
	defer release() // before the Store's Close, should the test fail
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	renewed := make(chan error, 1)
	go func() { renewed <- s.Renew(ctx, "p1", time.Now().Add(time.Hour)) }()
	select {
	case err := <-renewed:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Renew behind a held batch = %v; want its context's deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Renew behind a held batch still waits 10 s after its context ended")
	}
	release()
	next, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Renew(next, "p1", time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("a renewal after the batch ended: %v", err)
	}
	ids := reserveDispatched(t, s, "after")
	if err := complete(s, ids[0])(); err != nil {
		t.Fatalf("a write after the batch ended: %v", err)
	}
}
