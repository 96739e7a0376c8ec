package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// updateSet is what updateSQL and updateKnownSQL write.
const updateSet = `
	state = $to::text,
	history = history || $entry::jsonb,
	attempts = attempts + $dispatch::integer,
	result = coalesce($result::json, result),
	error = coalesce($error::json, error),
	owner = CASE WHEN $owner::text = '' THEN owner ELSE $owner::text END,
	lease_until = CASE WHEN $settles::boolean THEN NULL WHEN $owner::text = '' THEN lease_until ELSE $lease_until::timestamptz END,
	expires_at = CASE WHEN $settles::boolean THEN $now::timestamptz + retention END,
	awaiting = CASE WHEN $to::text = 'accepted' THEN awaiting ELSE '' END`

// updateSQL applies a change to a record whose state is one of $from: the
// compare-and-set that makes Update and the settling of an orphan atomic.
// With $orphan set it applies only while the lease has lapsed (a Renew may
// have come first); with $holder, only to a record $holder owns.
var updateSQL = params(`UPDATE {schema}.records SET`+updateSet+`
WHERE id = $id AND state = ANY($from::text[]) AND `+heldBy+` AND (NOT $orphan::boolean OR `+orphan+`)
RETURNING `+columns,
	"id", "to", "entry", "dispatch", "result", "error", "owner", "settles", "lease_until", "now", "holder", "attempts", "from", "orphan")

// heldBy is the fence of a change that names a holder or a count of
// attempts (record.Change).
const heldBy = `($holder::text = '' OR owner = $holder::text) AND ($attempts::integer = 0 OR attempts = $attempts::integer)`

// updateKnownSQL applies a change as updateSQL does, to a record whose
// history still has $known transitions, and returns only what may have
// changed since (known.go).
var updateKnownSQL = params(`UPDATE {schema}.records SET`+updateSet+`
WHERE `+knownWhere+`
RETURNING attached, lease_until, expires_at`,
	"id", "to", "entry", "dispatch", "result", "error", "owner", "settles", "lease_until", "now", "holder", "attempts", "from", "known")

// knownWhere is updateKnownSQL's condition.
const knownWhere = `id = $id AND state = ANY($from::text[]) AND ` + heldBy + ` AND jsonb_array_length(history) = $known::integer`

// Update implements record.Store.
func (s *Store) Update(ctx context.Context, id string, c record.Change) (*record.Record, error) {
	op := "updating " + id
	reading, err := s.attaches.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	rec, err := s.update(ctx, op, id, c)
	if err == nil {
		if rec, err = reading.Show(ctx, rec, s.storedAttached); err != nil {
			err = s.wrap(op, err)
		}
	}
	if err != nil {
		return nil, err
	}
	return rec, nil
}

// update is Update, without the attaches not yet written.
func (s *Store) update(ctx context.Context, op, id string, c record.Change) (*record.Record, error) {
	var from []record.State
	for _, st := range record.States {
		if c.AllowedFrom(st) {
			from = append(from, st)
		}
	}
	// The first try is batched; the rest, rare, run on a connection of
	// their own, within one timeout, and at the first try's time. A
	// record that moved on since this Store knew it, or one it does not
	// know, is read first.
	st, rec := s.change(id, c, from, false)
	if k, ok := s.knownFor(id, c); ok {
		st, rec = s.changeKnown(k, c, from)
	}
	if err := s.run(ctx, s.updateQ, st); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		s.known.Drop(id)
		return nil, s.fail(op, err)
	}
	if *rec != nil {
		return s.remember(*rec), nil
	}
	s.known.Drop(id)
	conn, _, err := s.acquire(ctx)
	if err != nil {
		return nil, s.fail(op, err)
	}
	defer conn.Release()
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	for {
		cur, err := s.get(ctx, conn, id)
		if err != nil {
			return nil, s.wrap(op, err)
		}
		if cur.State == record.Delivered && c.To == record.Delivered && c.From == "" {
			return cur, nil
		}
		if !c.AllowedFor(cur) {
			return nil, fmt.Errorf("%s from %s to %s: %w", op, cur.State, c.To, record.ErrConflict)
		}
		// It moved into a state the change may leave between the two
		// statements: try again.
		rec, ok, err := s.apply(ctx, conn, id, c, st.now, from, false)
		if err != nil {
			return nil, s.fail(op, err)
		}
		if ok {
			return s.remember(rec), nil
		}
	}
}

// apply runs the compare-and-set updateSQL. ok is false when the record
// is missing or not in one of the states from (or, with orphanOnly, not an
// orphan at now).
func (s *Store) apply(ctx context.Context, q db, id string, c record.Change, now time.Time, from []record.State, orphanOnly bool) (rec *record.Record, ok bool, err error) {
	st, out := s.change(id, c, from, orphanOnly)
	runAlone(ctx, q, st, now)
	if errors.Is(st.err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	return *out, st.err == nil, st.err
}

// change returns the statement of apply, and where it puts the record
// it changes: nil if the record is missing or not in one of the states
// from.
func (s *Store) change(id string, c record.Change, from []record.State, orphanOnly bool) (*stmt, **record.Record) {
	states := stateTexts(from)
	rec := new(*record.Record)
	return &stmt{
		sql: s.q.update,
		args: func(now time.Time) ([]any, error) {
			row, err := changeArgs(id, c, now)
			return append(row.args(), states, orphanOnly), err
		},
		order: id,
		scan: func(row pgx.Row) (err error) {
			*rec, err = scanRecord(row)
			return err
		},
	}, rec
}

// A changeRow is a change's values as updateSQL and updateKnownSQL take
// them, in the order of their parameters (args).
type changeRow struct {
	id, to          string
	entry           []byte // the transition, a one-element JSON array
	dispatch        int    // 1 for a dispatch, counted as an attempt
	result, errJSON any    // rawJSON's
	owner           string
	settles         bool
	lease           any // timestamp's
	now             time.Time
	holder          string
	attempts        int
}

// args returns r as the statements' arguments.
func (r *changeRow) args() []any {
	return []any{r.id, r.to, r.entry, r.dispatch, r.result, r.errJSON, r.owner, r.settles, r.lease, r.now, r.holder, r.attempts}
}

// changeArgs returns the values that updateSQL and updateKnownSQL share,
// for c applied to the record id at now.
func changeArgs(id string, c record.Change, now time.Time) (changeRow, error) {
	dispatch := 0
	if c.To == record.Dispatched {
		dispatch = 1
	}
	// jsonb refuses the escape \u0000, which a note quoting an upstream's
	// output, or a decider's name, might hold.
	noNUL := func(s string) string { return strings.ReplaceAll(s, "\x00", "\uFFFD") }
	entry, err := record.AppendHistoryJSON(nil, []record.Transition{{State: c.To, At: now, Note: noNUL(c.Note), By: noNUL(c.By), Via: noNUL(c.Via)}})
	return changeRow{id: id, to: string(c.To), entry: entry, dispatch: dispatch, result: rawJSON(c.Result), errJSON: rawJSON(c.Error),
		owner: c.Owner, settles: c.To.Settled(), lease: timestamp(c.LeaseFrom(now)), now: now, holder: c.Holder, attempts: c.Attempts}, err
}

// stateTexts returns states as text, for a text[] parameter.
func stateTexts(states []record.State) []string {
	texts := make([]string, len(states))
	for i, st := range states {
		texts[i] = string(st)
	}
	return texts
}

// settleOrphan settles r, found orphaned at now, with record.OrphanChange.
// ok is false when another caller settled it first or its owner renewed
// the lease; then the record is read again.
func (s *Store) settleOrphan(ctx context.Context, q db, r *record.Record, now time.Time) (rec *record.Record, ok bool, err error) {
	rec, ok, err = s.apply(ctx, q, r.ID, record.OrphanChange(r), now, []record.State{r.State}, true)
	if err != nil || ok {
		return rec, ok, err
	}
	rec, err = s.get(ctx, q, r.ID)
	return rec, false, err
}
