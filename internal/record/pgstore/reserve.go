package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// reserveSQL inserts the new record unless another holds the key and, if
// one does and may be matched, returns it: one statement, one round trip,
// for both a new execution and a replay. A replay writes nothing (the
// attach is counted apart: attach.go), so its commit flushes no WAL. The unique index
// on the holder lets exactly one concurrent insert through. When it
// returns no row, the holder is an orphan or replaceable (or appeared
// after the statement's snapshot) and Reserve deals with it before trying
// again.
var reserveSQL = params(`
WITH ins AS (
	`+reserveInto+`
	VALUES (`+reserveValues+`)
	ON CONFLICT (key) WHERE holds_key DO NOTHING
	RETURNING `+columns+`
), att AS (
	SELECT `+columns+` FROM {schema}.records
	WHERE key = $key AND holds_key AND NOT EXISTS (SELECT FROM ins)
		AND NOT `+orphan+` AND NOT `+replaceable+`
)
SELECT true, `+columns+` FROM ins
UNION ALL
SELECT false, `+columns+` FROM att`,
	"id", "key", "fingerprint", "actor", "scope", "upstream", "tool", "history", "attempts", "attached",
	"result", "error", "retention", "owner", "lease_until", "now", "replace", "awaiting", "state")

// reserveInto and reserveValues are what reserveSQL inserts, and
// reserveSetSQL for each row of its arrays.
const (
	reserveInto = `INSERT INTO {schema}.records (id, key, holds_key, fingerprint, actor, scope, upstream, tool, state, history,
		attempts, attached, result, error, retention, owner, lease_until, awaiting)`
	reserveValues = `$id, $key, true, $fingerprint, $actor, $scope, $upstream, $tool, $state, $history::jsonb,
		$attempts, $attached, $result::json, $error::json, $retention, $owner, $lease_until, $awaiting`
)

// holderSQL reads the record holding a key.
const holderSQL = `SELECT ` + columns + ` FROM {schema}.records WHERE key = $1 AND holds_key`

// releaseSQL takes the key from a replaceable holder, if it still is one.
var releaseSQL = params(`UPDATE {schema}.records SET holds_key = false
	WHERE id = $id AND holds_key AND NOT `+orphan+` AND `+replaceable,
	"id", "now", "replace", "fingerprint")

// Reserve implements record.Store.
func (s *Store) Reserve(ctx context.Context, r *record.Record, opts record.ReserveOptions) (*record.Record, bool, error) {
	op := "reserving " + r.ID
	if s.reserves.Add(1)%purgeEvery == 1 {
		s.purgeNow(ctx)
	}
	replace := make([]string, len(opts.Replace))
	for i, st := range opts.Replace {
		replace[i] = string(st)
	}
	var (
		rec *record.Record
		won bool
	)
	insert := s.reserveStmt(r, opts, replace, &rec, &won)
	// The first pass is batched; the rest, rare, run on a connection of
	// their own, within one timeout, and at the first pass's time. Each
	// pass that does not return settles or releases the holder, or finds
	// one that appeared after its snapshot; a few passes suffice under
	// any contention, and the bound guards against a holder that the
	// statements and this code judge differently.
	reading, err := s.attaches.Begin(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", op, err)
	}
	err = s.run(ctx, s.reserveQ, insert)
	var conn *pgxpool.Conn
	defer func() {
		if conn != nil {
			conn.Release()
		}
	}()
	var orphan *record.Record // settled by this call
passes:
	for pass := 0; ; pass++ {
		switch {
		case err == nil && won:
			rec.Orphan = s.settledOrphan(ctx, reading, orphan)
			return s.remember(rec), true, nil
		case err == nil:
			break passes // the holder, shown below
		case isUniqueViolation(err):
			// The key's conflicts are absorbed by ON CONFLICT; this is
			// the primary key.
			return nil, false, fmt.Errorf("%s: execution id already used", op)
		case !errors.Is(err, pgx.ErrNoRows):
			return nil, false, s.fail(op, unsentIfRefused(err))
		case pass == maxPasses:
			return nil, false, fmt.Errorf("%s: the holder of its key changed %d times in a row", op, maxPasses)
		}
		if conn == nil {
			var cancel context.CancelFunc
			if conn, _, err = s.acquire(ctx); err != nil {
				// No pass won: nothing is reserved.
				return nil, false, s.fail(op, record.NotSent(err))
			}
			ctx, cancel = s.bounded(ctx)
			defer cancel()
		}
		if err := ctx.Err(); err != nil {
			return nil, false, fmt.Errorf("%s: %w", op, err)
		}
		settled, cerr := s.clearHolder(ctx, conn, r, insert.now, opts, replace)
		if cerr != nil {
			return nil, false, s.fail(op, cerr)
		}
		if settled != nil {
			orphan = settled
		}
		runPrepared(ctx, conn, insert)
		err = insert.err
	}
	if conn != nil {
		conn.Release() // a count read again takes a connection of its own
		conn = nil
	}
	return s.lost(ctx, reading, rec, orphan, r.Fingerprint, op)
}

// unsentIfRefused marks err, a reservation's when no pass won, as
// record.ErrNotSent if the server refused the statement (a schema
// dropped under the proxy, a database made read-only): an ERROR ended
// its transaction, and nothing is reserved. Not the FATAL of a session
// the server ended, after which a commit may have happened all the same.
func unsentIfRefused(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	severity := pgErr.SeverityUnlocalized
	if severity == "" {
		severity = pgErr.Severity // a server before 9.6
	}
	if severity != "ERROR" {
		return err
	}
	return record.NotSent(err)
}

// lost ends a reservation that found rec holding its key: the call is
// matched against it by fingerprint, and the orphan this call settled,
// if any, is reported whoever holds the key.
func (s *Store) lost(ctx context.Context, reading record.Reading, rec, orphan *record.Record, fingerprint, op string) (*record.Record, bool, error) {
	if err := s.showOrphan(ctx, reading, rec, orphan); err != nil {
		return nil, false, s.wrap(op, err)
	}
	rec, err := reading.Match(ctx, rec, fingerprint, s.storedAttached)
	if err != nil {
		return nil, false, s.wrap(op, err)
	}
	return rec, false, nil
}

// showOrphan sets rec.Orphan to orphan, the record this Reserve settled,
// if any, with its attaches not yet written counted in, as a record's
// are. rec is this call's own.
func (s *Store) showOrphan(ctx context.Context, reading record.Reading, rec, orphan *record.Record) error {
	if orphan != nil {
		var err error
		if orphan, err = reading.Show(ctx, orphan, s.storedAttached); err != nil {
			return err
		}
	}
	rec.Orphan = orphan
	return nil
}

// settledOrphan returns orphan, the record a won reservation settled, if
// any, with its attaches not yet written counted in. A failure is logged
// and the orphan kept as read: the reservation is committed, and failing
// it would leave it in flight, unknown to its caller.
func (s *Store) settledOrphan(ctx context.Context, reading record.Reading, orphan *record.Record) *record.Record {
	if orphan == nil {
		return nil
	}
	shown, err := reading.Show(ctx, orphan.Clone(), s.storedAttached)
	if err != nil {
		s.log.Warn("counting the attaches of the orphan a reservation settled", "execution", orphan.ID, "store", s.name, "err", err)
		return orphan
	}
	return shown
}

// purgeNow deletes a batch of expired records, and settles orphans when a
// scan for them is due. A failure is logged: the next purge tries again.
func (s *Store) purgeNow(ctx context.Context) {
	if n, err := s.purge(ctx, purgeBatch, s.orphanScanDue()); err != nil {
		s.log.Warn("purging expired executions", "store", s.name, "err", err)
	} else if n > 0 {
		s.log.Debug("purged expired executions", "store", s.name, "count", n)
	}
}

// reserveStmt returns the statement that reserves r's key (reserveSQL),
// which scans into *rec the record it returns and into *won whether it is
// r's own.
func (s *Store) reserveStmt(r *record.Record, opts record.ReserveOptions, replace []string, rec **record.Record, won *bool) *stmt {
	st := &stmt{
		sql:   s.q.reserve,
		order: r.Key,
		scan: func(row pgx.Row) (err error) {
			*rec, err = scanRecord(row, won)
			return err
		},
	}
	st.args = func(now time.Time) ([]any, error) {
		// The record as inserted: accepted, or, asked to, dispatched
		// too in the same statement, one WAL sync for both.
		fresh := &record.Record{State: record.Accepted, History: []record.Transition{{State: record.Accepted, At: now}}, Attempts: r.Attempts, Awaiting: r.Awaiting}
		if opts.Dispatch {
			fresh.Apply(&record.Change{To: record.Dispatched}, now)
		}
		history, err := record.AppendHistoryJSON(nil, fresh.History)
		st.reserve = &reserveRow{id: r.ID, key: r.Key, fingerprint: r.Fingerprint, actor: r.Actor, scope: r.Scope,
			upstream: r.Upstream, tool: r.Tool, history: history, attempts: fresh.Attempts, attached: r.Attached,
			result: rawJSON(r.Result), errJSON: rawJSON(r.Error), retention: r.Retention, owner: r.Owner,
			lease: timestamp(opts.LeaseFrom(r, now)), now: now, replace: replace, awaiting: fresh.Awaiting, state: string(fresh.State)}
		return st.reserve.args(), err
	}
	return st
}

// clearHolder deals with the holder of r's key, which Reserve could
// neither match nor replace as it was: it settles an orphan (and returns
// it, if this call settled it) or releases a replaceable holder, for
// Reserve to insert again. A holder that is gone, or that became
// matchable after Reserve's snapshot, is left for the next pass to find.
func (s *Store) clearHolder(ctx context.Context, conn db, r *record.Record, now time.Time, opts record.ReserveOptions, replace []string) (*record.Record, error) {
	holder, err := scanRecord(conn.QueryRow(ctx, s.q.holder, r.Key))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil // purged or released meanwhile: insert again
	case err != nil:
		return nil, err
	case holder.Orphaned(now):
		// Settled by this caller or a concurrent one; either way the
		// next pass matches or replaces the settled record.
		settled, ok, err := s.settleOrphan(ctx, conn, holder, now)
		if err != nil || !ok {
			return nil, err
		}
		return settled, nil
	case s.replaceable(holder, r, now, opts):
		// Release the key and compete for it again: whoever then inserts
		// first wins, exactly one.
		_, err := conn.Exec(ctx, s.q.release, holder.ID, now, replace, r.Fingerprint)
		return nil, err
	}
	return nil, nil
}

// db is what a statement runs on: the pool, or one connection taken
// from it.
type db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// maxPasses bounds the statements of one Reserve.
const maxPasses = 100

func (s *Store) replaceable(r, next *record.Record, now time.Time, opts record.ReserveOptions) bool {
	if r.State.Settled() && !now.Before(r.ExpiresAt) {
		return true
	}
	return r.Fingerprint == next.Fingerprint && (r.State == record.Failed || slices.Contains(opts.Replace, r.State))
}
