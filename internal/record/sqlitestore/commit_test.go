package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

func openTest(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "records.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func testRecord(key string) *record.Record {
	return &record.Record{ID: record.NewID(time.Now()), Key: key, Fingerprint: "f-" + key,
		Tool: "charge_card", Retention: time.Hour}
}

// holdWriter gives the writer a write that runs until release is called,
// so that writes queued meanwhile wait, and are then taken as one group.
func holdWriter(t *testing.T, s *Store) (release func()) {
	t.Helper()
	started, held, done := make(chan struct{}), make(chan struct{}), make(chan error)
	go func() {
		done <- s.write(context.Background(), func(context.Context, *sql.Tx) error {
			close(started)
			<-held
			return nil
		})
	}()
	<-started
	return func() {
		close(held)
		if err := <-done; err != nil {
			t.Errorf("the holding write: %v", err)
		}
	}
}

// waitQueued returns once n writes wait in s's queue.
func waitQueued(s *Store, n int) {
	for len(s.queue) < n {
		runtime.Gosched()
	}
}

// TestGroupKeepsEachOutcome: writes committed in one group each get the
// answer they would alone; those that fail change nothing and fail no
// other.
func TestGroupKeepsEachOutcome(t *testing.T) {
	ctx := t.Context()
	s := openTest(t)
	var ids []string
	for _, k := range []string{"a", "b", "c"} {
		r, _, err := s.Reserve(ctx, testRecord(k), record.ReserveOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	failed, _, err := s.Reserve(ctx, testRecord("x"), record.ReserveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, failed.ID, record.Change{To: record.Failed}); err != nil {
		t.Fatal(err)
	}
	release := holdWriter(t, s)
	var wg sync.WaitGroup
	errs := make([]error, 5)
	for i, c := range []struct {
		id string
		to record.State
	}{
		{ids[0], record.Dispatched},
		{ids[1], record.Completed}, // not from Accepted: ErrConflict
		{"exe_missing", record.Failed},
		{ids[2], record.Dispatched},
	} {
		wg.Go(func() { _, errs[i] = s.Update(ctx, c.id, record.Change{To: c.to}) })
	}
	// It replaces the failed holder of x, then fails on its id, taken:
	// rolled back to its savepoint, x keeps its holder.
	wg.Go(func() {
		r := testRecord("x")
		r.ID = ids[0]
		_, _, errs[4] = s.Reserve(ctx, r, record.ReserveOptions{})
	})
	wons := make([]bool, 2)
	for i := range wons {
		wg.Go(func() {
			var err error
			if _, wons[i], err = s.Reserve(ctx, testRecord("hot"), record.ReserveOptions{}); err != nil {
				t.Error(err)
			}
		})
	}
	waitQueued(s, 7)
	release()
	wg.Wait()

	if errs[0] != nil || errs[3] != nil {
		t.Errorf("allowed updates in the group: %v, %v; want both done", errs[0], errs[3])
	}
	if !errors.Is(errs[1], record.ErrConflict) {
		t.Errorf("forbidden update in the group: %v; want ErrConflict", errs[1])
	}
	if !errors.Is(errs[2], record.ErrNotFound) {
		t.Errorf("update of a missing record in the group: %v; want ErrNotFound", errs[2])
	}
	if errs[4] == nil {
		t.Errorf("reservation with a used id in the group: no error")
	}
	if h, err := scanRecord(s.st.holder.QueryRowContext(ctx, "x")); err != nil || h.ID != failed.ID {
		t.Errorf("holder of x after a failed reservation in the group: %v, %v; want %s", h, err, failed.ID)
	}
	if wons[0] == wons[1] {
		t.Errorf("two reservations of one key in the group: won %v; want exactly one", wons)
	}
	for i, want := range []record.State{record.Dispatched, record.Accepted, record.Dispatched} {
		if r, err := s.Get(ctx, ids[i]); err != nil || r.State != want {
			t.Errorf("record %d after the group: %v, %v; want %s", i, r, err, want)
		}
	}
}

// TestGroupFailsAsOne: when the group's transaction fails, every write in
// it gets the error and none is kept.
func TestGroupFailsAsOne(t *testing.T) {
	ctx := t.Context()
	s := openTest(t)
	release := holdWriter(t, s)
	var wg sync.WaitGroup
	recs := []*record.Record{testRecord("a"), testRecord("b")}
	errs := make([]error, 3)
	for i, r := range recs {
		wg.Go(func() { _, _, errs[i] = s.Reserve(ctx, r, record.ReserveOptions{}) })
	}
	broken := errors.New("broken")
	wg.Go(func() {
		errs[2] = s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
			// Ends the transaction under the group, as SQLITE_FULL or an
			// I/O error does.
			if _, err := tx.ExecContext(ctx, "ROLLBACK"); err != nil {
				return err
			}
			return broken
		})
	})
	waitQueued(s, 3)
	release()
	wg.Wait()
	for i, err := range errs {
		if err == nil {
			t.Errorf("write %d of a failed group: no error", i)
		}
	}
	for _, r := range recs {
		if _, err := s.Get(ctx, r.ID); !errors.Is(err, record.ErrNotFound) {
			t.Errorf("a reservation of a failed group: Get = %v; want ErrNotFound", err)
		}
	}
}

// TestQueuedWriteLeft: a write whose caller's context ends while it is
// queued is not run.
func TestQueuedWriteLeft(t *testing.T) {
	ctx := t.Context()
	s := openTest(t)
	r, _, err := s.Reserve(ctx, testRecord("a"), record.ReserveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	release := holdWriter(t, s)
	callCtx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() {
		_, err := s.Update(callCtx, r.ID, record.Change{To: record.Dispatched})
		done <- err
	}()
	waitQueued(s, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Update whose context ended in the queue: %v; want context.Canceled", err)
	}
	release()
	// Written after the writer has passed the one left: it finds the
	// record as it was.
	if _, err := s.Update(ctx, r.ID, record.Change{From: record.Accepted, To: record.Dispatched}); err != nil {
		t.Fatalf("Update from Accepted after the one left: %v; want the record untouched", err)
	}
}

// TestCloseAnswersQueuedWrites: Close ends the writer, and a write still
// queued gets errClosed rather than waiting for ever.
func TestCloseAnswersQueuedWrites(t *testing.T) {
	ctx := t.Context()
	s := openTest(t)
	release := holdWriter(t, s)
	done := make(chan error)
	go func() {
		_, _, err := s.Reserve(ctx, testRecord("a"), record.ReserveOptions{})
		done <- err
	}()
	waitQueued(s, 1)
	closed := make(chan error)
	go func() { closed <- s.Close() }()
	if err := <-done; !errors.Is(err, errClosed) {
		t.Errorf("Reserve queued at Close: %v; want errClosed", err)
	}
	release()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}
