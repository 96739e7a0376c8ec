package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A write that meets the write lock held by another process waits for it
// at most twice busyTimeout, counted from when the write began to wait:
// in the queue behind the batch being sent (batch.go), for the process's
// turn and its writer connection, and in SQLite's busy handler. The
// process's other writes (the attach counts, a renewal, a purge) hold the
// turn or the writer while they wait for the same lock, up to busyTimeout
// each: bounding SQLite's wait alone added theirs to a call's. While the
// file shows commits, the lock is busy, not stuck, and a write waits on
// (whileBusy).

// errLockWait is the error of a try whose time to take the write lock ran
// out before SQLite's busy handler said so.
var errLockWait = errors.New("database is locked (SQLITE_BUSY)")

// lockFree returns the last time this Store saw the write lock free: a
// write of its own took it, or a try of one saw another connection
// commit.
func (s *Store) lockFree() time.Time { return s.epoch.Add(time.Duration(s.freeAt.Load())) }

// sawLockFree records that the write lock was free at t, unless it has
// been seen free later.
func (s *Store) sawLockFree(t time.Time) {
	d := int64(t.Sub(s.epoch))
	for {
		old := s.freeAt.Load()
		if d <= old || s.freeAt.CompareAndSwap(old, d) {
			return
		}
	}
}

// whileBusy runs write, a write transaction that began to wait at since,
// until it gets the write lock or gives up. Each try is given what is
// left of twice busyTimeout since the later of since and the last time
// this Store saw the lock free, at most busyTimeout; write must not wait
// longer (beginWithin). A try that fails for want of the lock is made
// again while other connections committed during it: a file busy with
// other processes' writes is under load, not held by a stuck peer, and
// SQLite's busy handler, which polls, can miss the lock's free moments
// for longer than the timeout. The first failure is always tried once
// more, to learn that, if time is left.
func (s *Store) whileBusy(ctx context.Context, since time.Time, write func(wait time.Duration) error) error {
	var err error
	for try := 0; ; try++ {
		start := time.Now()
		if free := s.lockFree(); free.After(since) {
			since = free
		}
		left := since.Add(2 * busyTimeout).Sub(start)
		if left <= 0 {
			return gaveUp(err, start.Sub(since))
		}
		var seen int64
		if try > 0 {
			var verr error
			if seen, verr = s.dataVersion(ctx); verr != nil {
				return err
			}
		}
		err = write(min(busyTimeout, left))
		if !isBusy(err) && !errors.Is(err, errLockWait) {
			if err == nil {
				s.sawLockFree(time.Now())
			}
			return err
		}
		if ctx.Err() != nil {
			return err
		}
		if try > 0 {
			now, verr := s.dataVersion(ctx)
			if verr != nil {
				return err
			}
			if now == seen {
				return gaveUp(err, time.Now().Sub(since))
			}
			// A commit came after start: the lock was free since.
			s.sawLockFree(start)
		}
	}
}

// gaveUp is the error of a write that gave up after waiting for waited
// with no commit under the write lock; err is its last try's, if any.
func gaveUp(err error, waited time.Duration) error {
	if err == nil {
		err = errLockWait
	}
	return fmt.Errorf("waited %v for the write lock, which another process holds without committing: %w", waited.Round(time.Millisecond), err)
}

// beginWithin begins a transaction of the writer, waiting at most d for
// it in all: for the process's turn at the write lock if turn is set (a
// batch's), for the writer connection, and for the lock. It returns
// errLockWait if d ran out first, or SQLite's SQLITE_BUSY if its busy
// handler gave up. end, once the transaction has ended, gives the turn
// back.
func (s *Store) beginWithin(ctx context.Context, d time.Duration, turn bool) (tx *wtx, end func(), err error) {
	// The transaction lives under lctx, which database/sql rolls it back
	// at the end of: once begun in time, lctx ends only with ctx, or
	// with end.
	lctx, cancel := context.WithCancelCause(ctx)
	stop := time.AfterFunc(d, func() { cancel(errLockWait) }).Stop
	end = func() { cancel(nil) }
	if turn {
		if err = s.turn.takeCtx(lctx); err == nil {
			end = func() { s.turn.give(); cancel(nil) }
		}
	}
	if err == nil {
		tx, err = s.begin(lctx)
	}
	if !stop() && !isBusy(err) {
		// Out of time, maybe just after the transaction began: it is
		// rolled back. The timer's cancel may still be on its way.
		if err == nil {
			tx.Rollback()
		}
		<-lctx.Done()
		err = context.Cause(lctx)
	}
	if err != nil {
		end()
		return nil, nil, err
	}
	return tx, end, nil
}

// dataVersion is PRAGMA data_version on v: it changes when a connection
// other than v commits to the file.
func (s *Store) dataVersion(ctx context.Context) (int64, error) {
	var n int64
	err := s.v.QueryRowContext(ctx, "PRAGMA data_version").Scan(&n)
	return n, err
}
