package pgstore

import (
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record/batch"
)

// A batch of updates of records this Store knows (known.go) goes as one
// statement (set.go): updateKnownSQL's change and condition, the same
// text, with each record's values taken from its row of the arrays
// (updateKnownSetSQL). A record it did not change has moved on, as with
// updateKnownSQL, and Update reads it.
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
var knownColumns = []setColumn{
	{"id", "text"}, {"to", "text"}, {"entry", "text"}, {"dispatch", "integer"},
	{"result", "text"}, {"error", "text"}, {"owner", "text"}, {"settles", "boolean"},
	{"lease_until", "timestamptz"}, {"holder", "text"}, {"attempts", "integer"},
	{"from", "text"}, {"known", "integer"},
}

// updateKnownSetSQL is updateKnownSQL for the records of the rows of its
// arrays, $2 on; $1 is now.
var updateKnownSetSQL = func() string {
	arrays, names, rows := rowsOf(knownColumns, "u")
	return `UPDATE {schema}.records SET` + rows.Replace(updateSet) + `
FROM unnest(` + arrays + `) WITH ORDINALITY AS u(` + names + `, ord)
WHERE ` + rows.Replace(knownWhere) + `
RETURNING u.ord, attached, lease_until, expires_at`
}()

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
		results[i], errs[i], owners[i], settles[i] = jsonText(k.result), jsonText(k.errJSON), k.owner, k.settles
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
