package pgstore

import (
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record/batch"
)

// A batch of first passes of reservations goes as one statement
// (set.go): reserveSQL for each row of its arrays (reserveSetSQL). It
// inserts the rows whose keys have no holder, in the batch's order by
// key, as the statements of a batch take the key index's entries, and
// returns each with true; for the others it returns the holder, with
// false, when it may be matched, and nothing otherwise, for Reserve's
// next pass, as reserveSQL does. A row the statement inserted is not in
// its snapshot: the second of two reservations of one key in a batch,
// or of one record, gets nothing, and its next pass finds the first.
// A key another transaction holds past batchLockTimeout holds the batch
// up twice, as with updates (knownset.go).

// A reserveRow is a reservation's first pass, as reserveSQL takes it.
type reserveRow struct {
	id, key, fingerprint, actor, scope, upstream, tool string
	history                                            []byte // as inserted
	attempts, attached                                 int
	result, errJSON                                    any // rawJSON's
	retention                                          time.Duration
	owner                                              string
	lease                                              any // timestamp's
	now                                                time.Time
	replace                                            []string // the states it may supersede
	awaiting, state                                    string
}

// args returns r as reserveSQL's arguments.
func (r *reserveRow) args() []any {
	return []any{r.id, r.key, r.fingerprint, r.actor, r.scope, r.upstream, r.tool, r.history, r.attempts, r.attached,
		r.result, r.errJSON, r.retention, r.owner, r.lease, r.now, r.replace, r.awaiting, r.state}
}

// reserveColumns are reserveSQL's parameters that differ from one
// reservation to the next, and their types in reserveSetSQL's arrays:
// all but now, which is the batch's (link.now).
var reserveColumns = []setColumn{
	{"id", "text"}, {"key", "text"}, {"fingerprint", "text"}, {"actor", "text"}, {"scope", "text"},
	{"upstream", "text"}, {"tool", "text"}, {"history", "text"}, {"attempts", "integer"}, {"attached", "integer"},
	{"result", "text"}, {"error", "text"}, {"retention", "interval"}, {"owner", "text"},
	{"lease_until", "timestamptz"}, {"replace", "text"}, {"awaiting", "text"}, {"state", "text"},
}

// reserveSetSQL is reserveSQL for the rows of its arrays, $2 on; $1 is
// now. A row inserted is the first caller's of its id and key
// (p_first): rows are inserted in order, and a later one of the pair
// finds the key taken. Of two reservations of one record, only one
// wins; of one id with two keys, the one that inserted. p_first is
// worked out once,
// by a window: a subquery for each pair of rows made the statement
// cubic in the batch's size, and cost the server twice what the
// statements it replaced did.
var reserveSetSQL = func() string {
	arrays, names, rows := rowsOf(reserveColumns, "u")
	return `
WITH u AS (
	SELECT p_id, p_key, p_fingerprint, p_actor, p_scope, p_upstream, p_tool, p_history, p_attempts, p_attached,
		p_result, p_error, p_retention, p_owner, p_lease_until, p_replace::text[] AS p_replace, p_awaiting, p_state, ord,
		ord = min(ord) OVER (PARTITION BY p_id, p_key) AS p_first
	FROM unnest(` + arrays + `) WITH ORDINALITY AS t(` + names + `, ord)
), ins AS (
	` + reserveInto + `
	SELECT ` + rows.Replace(reserveValues) + ` FROM u ORDER BY ord
	ON CONFLICT (key) WHERE holds_key DO NOTHING
	RETURNING ` + columns + `
)
SELECT u.ord, true, ` + qualified("ins", columns) + ` FROM ins JOIN u ON u.p_id = ins.id AND u.p_key = ins.key AND u.p_first
UNION ALL
SELECT u.ord, false, ` + qualified("r", columns) + ` FROM u JOIN {schema}.records r ON r.key = u.p_key AND r.holds_key
WHERE NOT EXISTS (SELECT FROM ins WHERE ins.key = u.p_key)
	AND NOT ` + rows.Replace(orphan) + ` AND NOT ` + rows.Replace(replaceable)
}()

// qualified returns the list of columns cols, each qualified by table.
func qualified(table, cols string) string {
	list := strings.Split(cols, ", ")
	for i, c := range list {
		list[i] = table + "." + c
	}
	return strings.Join(list, ", ")
}

// reserveArrays returns reserveSetSQL's arguments for the reservations
// of calls, prepared at one time.
func reserveArrays(calls []*batch.Call[*stmt]) []any {
	n := len(calls)
	var (
		ids, keys, fps, actors, scopes = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		upstreams, tools, histories    = make([]string, n), make([]string, n), make([]string, n)
		attempts, attached             = make([]int64, n), make([]int64, n)
		results, errs                  = make([]pgtype.Text, n), make([]pgtype.Text, n)
		retentions                     = make([]time.Duration, n)
		owners, replaces, awaits       = make([]string, n), make([]string, n), make([]string, n)
		states                         = make([]string, n)
		leases                         = make([]pgtype.Timestamptz, n)
	)
	for i, c := range calls {
		r := c.Job.reserve
		ids[i], keys[i], fps[i], actors[i], scopes[i] = r.id, r.key, r.fingerprint, r.actor, r.scope
		upstreams[i], tools[i], histories[i] = r.upstream, r.tool, string(r.history)
		attempts[i], attached[i], results[i], errs[i] = int64(r.attempts), int64(r.attached), jsonText(r.result), jsonText(r.errJSON)
		retentions[i], owners[i], replaces[i], awaits[i], states[i] = r.retention, r.owner, textArray(r.replace), r.awaiting, r.state
		if t, ok := r.lease.(time.Time); ok {
			leases[i] = pgtype.Timestamptz{Time: t, Valid: true}
		}
	}
	return []any{calls[0].Job.reserve.now, ids, keys, fps, actors, scopes, upstreams, tools, histories, attempts, attached,
		results, errs, retentions, owners, leases, replaces, awaits, states}
}
