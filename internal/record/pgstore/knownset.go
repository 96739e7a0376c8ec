package pgstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record/batch"
)

// A batch of updates of records this Store knows (known.go) is sent as
// one statement, which takes each record's change from a row of its
// arrays (updateKnownSetSQL), not as a statement each: every statement
// cost the server an executor of its own, with the table and each index
// opened and locked, and the trigger's WHEN read, more than its change
// did. The statement is updateKnownSQL's change and condition, the same
// text, with each record's values taken from its row. It returns the
// ordinal of each row whose record it changed; a record it did not
// change has moved on, as with updateKnownSQL, and Update reads it.
//
// Its rows are locked in the batch's order, by id, as a statement each
// locks them. The planner is told to join by a nested loop over the
// primary key: it then takes the arrays in their order, or, on a table
// of a row or two, reads the primary key in its own, which is the same
// (ids compare byte by byte, COLLATE "C", as the batch sorts them). A
// row the statement waits for past batchLockTimeout, a deadlock, or a
// value the server refuses rolls it back whole, and the batch is sent
// again at once as a statement each (runBatch), which tells which
// update the server refused: a row held past the timeout holds such a
// batch up twice.

// A knownRow is an update of a known record, as updateKnownSQL takes it.
type knownRow struct {
	changeRow
	from   []string // the states it applies to
	length int      // the number of transitions the history has
}

// knownColumns are updateKnownSQL's parameters that differ from one
// record to the next, and their types in updateKnownSetSQL's arrays: all
// but now, which is the batch's (link.now). A value whose type differs
// from its parameter's is cast by the statement's text as it is there.
var knownColumns = []struct{ name, typ string }{
	{"id", "text"}, {"to", "text"}, {"entry", "text"}, {"dispatch", "integer"},
	{"result", "text"}, {"error", "text"}, {"owner", "text"}, {"settles", "boolean"},
	{"lease_until", "timestamptz"}, {"holder", "text"}, {"attempts", "integer"},
	{"from", "text"}, {"known", "integer"},
}

// updateKnownSetSQL is updateKnownSQL for the records of the rows of its
// arrays, $2 on; $1 is now.
var updateKnownSetSQL = func() string {
	arrays := make([]string, len(knownColumns))
	columns := make([]string, len(knownColumns))
	names := []string{"now"}
	for i, c := range knownColumns {
		arrays[i] = fmt.Sprintf("$%d::%s[]", i+2, c.typ)
		columns[i] = "p_" + c.name
		names = append(names, c.name)
	}
	// A Replacer tries its strings in order: the longest first, so that
	// no name is taken for the start of another.
	slices.SortFunc(names, func(a, b string) int { return len(b) - len(a) })
	var pairs []string
	for _, name := range names {
		if name == "now" {
			pairs = append(pairs, "$now", "$1")
		} else {
			pairs = append(pairs, "$"+name, "u.p_"+name)
		}
	}
	rows := strings.NewReplacer(pairs...)
	return `UPDATE {schema}.records SET` + rows.Replace(updateSet) + `
FROM unnest(` + strings.Join(arrays, ", ") + `) WITH ORDINALITY AS u(` + strings.Join(columns, ", ") + `, ord)
WHERE ` + rows.Replace(knownWhere) + `
RETURNING u.ord, attached, lease_until, expires_at`
}()

// knownSetConfig is what a batch's transaction runs before
// updateKnownSetSQL: batchLockTimeout, and a join by nested loop over
// the primary key, whatever the planner thinks of a table it has not
// analyzed yet.
const knownSetConfig = `SELECT set_config('lock_timeout', $1, true), set_config('enable_hashjoin', 'off', true),
	set_config('enable_mergejoin', 'off', true), set_config('enable_seqscan', 'off', true)`

// knownSet reports whether calls are more than one, and all updates of
// known records made at one time.
func knownSet(calls []*batch.Call[*stmt]) bool {
	for _, c := range calls {
		if k := c.Job.known; k == nil || !k.now.Equal(calls[0].Job.known.now) {
			return false
		}
	}
	return len(calls) > 1
}

// runKnownSet runs the updates of calls, in their order, as one
// statement in a transaction of its own, and returns their rows as
// runBatch does: pgx.ErrNoRows for a record it did not change.
func (s *Store) runKnownSet(ctx context.Context, conn *pgxpool.Conn, calls []*batch.Call[*stmt]) ([]rawRow, error) {
	var b pgx.Batch
	b.Queue(knownSetConfig, batchLockTimeout)
	b.Queue(s.q.updateKnownSet, knownArrays(calls)...)
	br := conn.SendBatch(ctx, &b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	out := make([]rawRow, len(calls))
	for i := range out {
		out[i].err = pgx.ErrNoRows
	}
	types := conn.Conn().TypeMap()
	for rows.Next() {
		fields, raw := rows.FieldDescriptions(), rows.RawValues()
		var ord int64
		if err := types.Scan(fields[0].DataTypeOID, fields[0].Format, raw[0], &ord); err != nil {
			return nil, err
		}
		if ord < 1 || ord > int64(len(out)) || out[ord-1].err == nil {
			return nil, fmt.Errorf("reading the rows of %d updates: row %d came twice or is out of range", len(out), ord)
		}
		out[ord-1] = ownRow(types, fields[1:], raw[1:])
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, br.Close()
}

// knownArrays returns updateKnownSetSQL's arguments for the updates of
// calls, prepared at one time.
func knownArrays(calls []*batch.Call[*stmt]) []any {
	n := len(calls)
	var (
		ids, tos, owners, holders, froms = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		entries                          = make([]string, n)
		results, errs                    = make([]pgtype.Text, n), make([]pgtype.Text, n)
		dispatches, attempts, lengths    = make([]int64, n), make([]int64, n), make([]int64, n)
		settles                          = make([]bool, n)
		leases                           = make([]pgtype.Timestamptz, n)
	)
	for i, c := range calls {
		k := c.Job.known
		ids[i], tos[i], entries[i], dispatches[i] = k.id, k.to, string(k.entry), int64(k.dispatch)
		results[i], errs[i], owners[i], settles[i] = jsonText(k.result), jsonText(k.err), k.owner, k.settles
		if t, ok := k.lease.(time.Time); ok {
			leases[i] = pgtype.Timestamptz{Time: t, Valid: true}
		}
		holders[i], attempts[i], froms[i], lengths[i] = k.holder, int64(k.attempts), textArray(k.from), int64(k.length)
	}
	return []any{calls[0].Job.known.now, ids, tos, entries, dispatches, results, errs, owners, settles, leases, holders, attempts, froms, lengths}
}

// jsonText is rawJSON's value as text: NULL for none.
func jsonText(v any) pgtype.Text {
	b, ok := v.([]byte)
	return pgtype.Text{String: string(b), Valid: ok}
}

// textArray is states as a text[] literal. States are words: nothing in
// them needs quoting.
func textArray(states []string) string {
	return "{" + strings.Join(states, ",") + "}"
}
