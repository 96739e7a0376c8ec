package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// Reserve implements record.Store.
func (s *Store) Reserve(ctx context.Context, r *record.Record, opts record.ReserveOptions) (*record.Record, bool, error) {
	if lost := s.lost.Load(); lost != nil {
		return nil, false, fmt.Errorf("reserving %s: %w", r.ID, *lost)
	}
	if !opts.Unheld {
		if rec, ok := s.matchRead(ctx, r, opts); ok {
			return rec, false, nil
		}
	}
	reading, err := s.attaches.Begin(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("reserving %s: %w", r.ID, err)
	}
	var res reservation
	err = s.write(ctx, func(ctx context.Context, tx *wtx, now time.Time) (err error) {
		res, err = s.reserveIn(ctx, tx, now, r, opts)
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("reserving %s: %w", r.ID, err)
	}
	s.settledOrphans(res.purged)
	rec := res.rec
	if res.orphan != nil {
		s.notify(res.orphan.ID, res.orphan.State)
		// Its attaches not yet written show, as the record's do.
		orphan, err := reading.Show(ctx, res.orphan.Clone(), s.storedAttached)
		switch {
		case err == nil:
		case !res.won:
			return nil, false, fmt.Errorf("reserving %s: %w", r.ID, err)
		default:
			// The reservation is committed: failing it would leave it
			// in flight, unknown to its caller. The orphan shows as read.
			s.log.Warn("counting the attaches of the orphan a reservation settled", "execution", res.orphan.ID, "store", s.path, "err", err)
			orphan = res.orphan
		}
		rec.Orphan = orphan // rec is this call's own
	}
	if !res.won {
		if rec, err = reading.Show(ctx, rec, s.storedAttached); err != nil {
			return nil, false, fmt.Errorf("reserving %s: %w", r.ID, err)
		}
		return rec, false, nil
	}
	s.remember(rec, res.history, record.Change{})
	return rec, true, nil
}

// A reservation is what reserveIn did.
type reservation struct {
	rec     *record.Record
	won     bool
	orphan  *record.Record   // the orphan it settled, whose waiters are woken once it has committed
	purged  []*record.Record // those its purge settled
	history string           // rec's history as stored, if won
}

// reserveIn is Reserve's write, in tx at now (a batch's: the write lock
// held).
func (s *Store) reserveIn(ctx context.Context, tx *wtx, now time.Time, r *record.Record, opts record.ReserveOptions) (res reservation, err error) {
	if s.reserves.Add(1)%purgeEvery == 0 {
		if err := tx.save(ctx); err != nil {
			return reservation{}, err
		}
		if _, res.purged, err = s.purge(ctx, tx, now, purgeBatch, s.orphanScanDue(now)); err != nil {
			return reservation{}, fmt.Errorf("purging expired records: %w", err)
		}
	}

	// Most keys have no holder yet: the insert goes first, and
	// records_holder, unique, refuses it if one has. Reading the holder
	// first was an eighth of the writer's time 32 at a time.
	rec := newReserved(r, opts, now)
	switch res.history, err = s.insertRecord(ctx, tx, rec); {
	case err == nil:
		res.rec, res.won = rec, true
		return res, nil
	case !isConstraint(err, sqlite3.SQLITE_CONSTRAINT_UNIQUE):
		return reservation{}, insertError(err)
	}
	// SQLite undid the insert. What follows may change more than one
	// record.
	if err := tx.save(ctx); err != nil {
		return reservation{}, err
	}

	cur, err := scanRecord(tx.stmt(ctx, s.st.byKey).QueryRowContext(ctx, r.Key))
	switch {
	case errors.Is(err, sql.ErrNoRows):
		cur = nil
	case err != nil:
		return reservation{}, err
	}
	if cur != nil {
		if cur.Orphaned(now) {
			apply(cur, record.OrphanChange(cur), now)
			res.orphan = cur.Clone() // as settled, before an attach counts
		}
		if !replaceable(cur, r, now, opts) {
			attach := cur.Fingerprint == r.Fingerprint
			if attach {
				cur.Attached++
			}
			switch {
			case res.orphan != nil:
				_, err = s.writeRecord(ctx, tx, cur)
			case attach:
				_, err = tx.stmt(ctx, s.st.attach).ExecContext(ctx, cur.Attached, cur.ID)
			}
			if err != nil {
				return reservation{}, err
			}
			res.rec = cur
			return res, nil
		}
		if res.orphan != nil {
			if _, err := s.writeRecord(ctx, tx, cur); err != nil {
				return reservation{}, err
			}
		}
		if _, err := tx.stmt(ctx, s.st.release).ExecContext(ctx, cur.ID); err != nil {
			return reservation{}, err
		}
	}

	if res.history, err = s.insertRecord(ctx, tx, rec); err != nil {
		return reservation{}, insertError(err)
	}
	res.rec, res.won = rec, true
	return res, nil
}

// newReserved returns the record Reserve inserts for r at now: accepted,
// and dispatched too if opts ask.
func newReserved(r *record.Record, opts record.ReserveOptions, now time.Time) *record.Record {
	rec := r.Clone()
	rec.State = record.Accepted
	// now is the write's: the transaction holds the write lock.
	rec.LeaseUntil = opts.LeaseFrom(r, now)
	rec.History = []record.Transition{{State: record.Accepted, At: now}}
	rec.ExpiresAt = time.Time{}
	if opts.Dispatch {
		// One commit, one fsync, for the reservation and the dispatch.
		apply(rec, record.Change{To: record.Dispatched}, now)
	}
	return rec
}

// insertError is the error of a reservation whose insert failed with err.
func insertError(err error) error {
	if isConstraint(err, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
		return errors.New("execution id already used")
	}
	return err
}

// isConstraint reports whether err is SQLite's constraint error code.
func isConstraint(err error, code int) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code() == code
}

func replaceable(r, next *record.Record, now time.Time, opts record.ReserveOptions) bool {
	if r.State.Settled() && !now.Before(r.ExpiresAt) {
		return true
	}
	return r.Fingerprint == next.Fingerprint && (r.State == record.Failed || slices.Contains(opts.Replace, r.State))
}

// Update implements record.Store.
func (s *Store) Update(ctx context.Context, id string, c record.Change) (*record.Record, error) {
	reading, err := s.attaches.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("updating %s: %w", id, err)
	}
	k, known := s.known.Get(id)
	known = known && storedAsIs(c)
	var r *record.Record
	var history string
	// One statement changes the record: the known one if it applies,
	// else updateIn's (which reads the record first).
	err = s.write(ctx, func(ctx context.Context, tx *wtx, now time.Time) (err error) {
		if known {
			if r, history, err = s.updateKnown(ctx, tx, now, k, c); r != nil || err != nil {
				return err
			}
		}
		r, history, err = s.updateIn(ctx, tx, now, id, c)
		return err
	})
	if err != nil {
		s.known.Drop(id)
		return nil, fmt.Errorf("updating %s: %w", id, err)
	}
	s.remember(r, history, c)
	s.notify(id, r.State)
	if r, err = reading.Show(ctx, r, s.storedAttached); err != nil {
		return nil, fmt.Errorf("updating %s: %w", id, err)
	}
	return r, nil
}

// updateIn is Update's write, in tx at now (a batch's), of a record read
// first. It also returns the history it wrote, "" if it wrote none.
func (s *Store) updateIn(ctx context.Context, tx *wtx, now time.Time, id string, c record.Change) (*record.Record, string, error) {
	r, err := getRecord(ctx, tx.stmt(ctx, s.st.byID), id)
	if err != nil {
		return nil, "", err
	}
	if r.State == record.Delivered && c.To == record.Delivered && c.From == "" {
		return r, "", nil
	}
	if !c.AllowedFor(r) {
		return nil, "", fmt.Errorf("from %s to %s: %w", r.State, c.To, record.ErrConflict)
	}
	apply(r, c, now)
	ownBuffers(r, c)
	history, err := s.writeRecord(ctx, tx, r)
	if err != nil {
		return nil, "", err
	}
	return r, history, nil
}

// apply moves r by c, which CanTransition allows; times are kept in UTC
// to the nanosecond, as stored.
func apply(r *record.Record, c record.Change, now time.Time) {
	c.LeaseUntil = c.LeaseUntil.Round(0).UTC()
	r.Apply(&c, now)
}

// Get implements record.Store.
func (s *Store) Get(ctx context.Context, id string) (*record.Record, error) {
	reading, err := s.attaches.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("getting %s: %w", id, err)
	}
	r, err := getRecord(ctx, s.st.get, id)
	if err == nil {
		r, err = reading.Show(ctx, r, s.storedAttached)
	}
	if err != nil {
		return nil, fmt.Errorf("getting %s: %w", id, err)
	}
	return r, nil
}

// Renew implements record.Store, in one statement.
//
// It also checks that the database file is still the one opened (Renew is
// called every few seconds): see ErrFileLost.
func (s *Store) Renew(ctx context.Context, owner string, until time.Time) error {
	// Renewed even on a lost file, which this process still uses: its
	// executions under way are not to be taken for orphans. In turn with
	// the batches of writes (batch.go), which it goes before once the
	// batch running ends.
	if err := s.turn.takeCtx(ctx); err != nil {
		return fmt.Errorf("renewing the leases of %s: waiting for the batch of writes under way: %w", owner, err)
	}
	_, err := s.st.renew.ExecContext(ctx, nanos(until.Round(0).UTC()), owner)
	s.turn.give()
	if err != nil {
		return fmt.Errorf("renewing the leases of %s: %w", owner, err)
	}
	if err := s.checkFile(); err != nil {
		return fmt.Errorf("renewing the leases of %s: %w", owner, err)
	}
	return nil
}

// List implements record.Lister: newest first, from the read pool.
func (s *Store) List(ctx context.Context, f record.Filter) ([]*record.Record, error) {
	q, args := listQuery(f)
	recs, err := s.list(ctx, q, args)
	if err != nil {
		return nil, fmt.Errorf("listing executions: %w", err)
	}
	return recs, nil
}

// listQuery is List's query for f, and its arguments.
func listQuery(f record.Filter) (string, []any) {
	q := "SELECT " + columns + " FROM records WHERE 1=1"
	var args []any
	if f.Tool != "" {
		q += " AND tool = ?"
		args = append(args, f.Tool)
	}
	if f.Fingerprint != "" {
		q += " AND fingerprint = ?"
		args = append(args, f.Fingerprint)
	}
	if f.State != "" {
		q += " AND state = ?"
		args = append(args, string(f.State))
	}
	if f.Awaiting {
		// As records_awaiting's predicate, so SQLite uses the index.
		q += " AND awaiting != '' AND state = ?"
		args = append(args, string(record.Accepted))
	}
	if !f.Since.IsZero() {
		// Ids are ULIDs, which sort by the time they were made.
		q += " AND id >= ?"
		args = append(args, record.IDFloor(f.Since))
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	return q + " ORDER BY id DESC LIMIT ?", append(args, limit)
}

// list reads the records query q selects, with their attaches not yet
// written.
func (s *Store) list(ctx context.Context, q string, args []any) ([]*record.Record, error) {
	reading, err := s.attaches.Begin(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	var recs []*record.Record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		recs = append(recs, r)
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// Shown once the rows are closed: a record read again takes a
	// connection of the read pool too.
	return reading.ShowAll(ctx, recs, s.storedAttached)
}

// Purge drops up to limit settled records whose retention ran out, oldest
// first, and returns how many it dropped. Reserve calls it now and then;
// it is exported for an operator's cleanup and for tests.
func (s *Store) Purge(ctx context.Context, limit int) (int, error) {
	tx, err := s.begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("purging expired records: %w", err)
	}
	defer tx.Rollback()
	n, orphans, err := s.purge(ctx, tx, s.clock(), limit, true)
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		return 0, fmt.Errorf("purging expired records: %w", err)
	}
	s.settledOrphans(orphans)
	return n, nil
}

// purge drops up to limit expired records in tx, after settling up to
// limit orphans if orphans is set; it returns how many it dropped, and
// the orphans it settled.
func (s *Store) purge(ctx context.Context, tx *wtx, now time.Time, limit int, orphans bool) (int, []*record.Record, error) {
	var settled []*record.Record
	if orphans {
		var err error
		if settled, err = s.settleOrphans(ctx, tx, now, limit); err != nil {
			return 0, nil, err
		}
	}
	res, err := tx.stmt(ctx, s.st.purge).ExecContext(ctx, nanos(now), limit)
	if err != nil {
		return 0, nil, err
	}
	n, err := res.RowsAffected()
	return int(n), settled, err
}

// orphanScanDue reports whether a purge of Reserve's, at now, is to look
// for orphans: whether orphanScanEvery has passed since one last did, or
// the clock went back. A look whose write then failed counts too: the
// next comes a second later at most.
func (s *Store) orphanScanDue(now time.Time) bool {
	t, last := now.UnixNano(), s.scanned.Load()
	return (t-last >= int64(orphanScanEvery) || t < last) && s.scanned.CompareAndSwap(last, t)
}

// settledOrphans wakes the waiters of orphans a purge settled, now
// committed, and tells Options.Orphaned of each.
func (s *Store) settledOrphans(orphans []*record.Record) {
	for _, o := range orphans {
		s.notify(o.ID, o.State)
		if s.orphaned != nil {
			s.orphaned(o)
		}
	}
}

// settleOrphans settles up to limit records whose owner's lease lapsed,
// as a reservation or a waiter meeting them would (record.OrphanChange):
// an orphan nobody calls again would otherwise stay in flight for ever,
// out of reach of the purge that retention promises.
func (s *Store) settleOrphans(ctx context.Context, tx *wtx, now time.Time, limit int) ([]*record.Record, error) {
	s.scans.Add(1)
	rows, err := tx.stmt(ctx, s.st.orphans).QueryContext(ctx, nanos(now), limit)
	if err != nil {
		return nil, err
	}
	var orphans []*record.Record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		orphans = append(orphans, r)
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	for _, r := range orphans {
		apply(r, record.OrphanChange(r), now)
		if _, err := s.writeRecord(ctx, tx, r); err != nil {
			return nil, err
		}
	}
	return orphans, nil
}
