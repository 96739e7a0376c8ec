package pgstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record/batch"
)

// A batch whose calls are all of one kind, and that kind has one, goes to
// the server as one statement that takes each call's values from a row
// of its arrays: updates of known records (knownset.go) and first passes
// of reservations (reserveset.go). Each statement of a batch cost the
// server an executor of its own, with the table and its indexes opened
// and locked, more than its row did. The one statement returns, with
// each row it returns, the ordinal of the call it is for.

// A setColumn is a parameter of a statement that differs from one call
// of a batch to the next, and its type in the arrays of the batch's one
// statement.
type setColumn struct{ name, typ string }

// rowsOf returns the arrays of a batch's one statement for the columns
// cols, $2 on ($1 is now), the names of their rows' columns (p_ and the
// parameter's name), and a Replacer that turns a statement's text for
// one call into the one statement's: $now is $1, and each column's
// parameter is read from alias's row.
func rowsOf(cols []setColumn, alias string) (arrays, names string, rows *strings.Replacer) {
	a := make([]string, len(cols))
	n := make([]string, len(cols))
	params := []string{"now"}
	for i, c := range cols {
		a[i] = fmt.Sprintf("$%d::%s[]", i+2, c.typ)
		n[i] = "p_" + c.name
		params = append(params, c.name)
	}
	// A Replacer tries its strings in order: the longest first, so that
	// no name is taken for the start of another.
	slices.SortFunc(params, func(a, b string) int { return len(b) - len(a) })
	var pairs []string
	for _, p := range params {
		if p == "now" {
			pairs = append(pairs, "$now", "$1")
		} else {
			pairs = append(pairs, "$"+p, alias+".p_"+p)
		}
	}
	return strings.Join(a, ", "), strings.Join(n, ", "), strings.NewReplacer(pairs...)
}

// setConfig is what a batch's transaction runs before its one statement:
// batchLockTimeout, and joins by nested loop over an index, whatever the
// planner thinks of a table it has not analyzed yet.
const setConfig = `SELECT set_config('lock_timeout', $1, true), set_config('enable_hashjoin', 'off', true),
	set_config('enable_mergejoin', 'off', true), set_config('enable_seqscan', 'off', true)`

// setOf returns the one statement for calls and its arguments, if calls
// are more than one, all of a kind that has one, and made at one time.
func (s *Store) setOf(calls []*batch.Call[*stmt]) (sql string, args []any, ok bool) {
	if len(calls) < 2 {
		return "", nil, false
	}
	same := func(is func(st *stmt) bool) bool {
		for _, c := range calls {
			if !is(c.Job) || !c.Job.now.Equal(calls[0].Job.now) {
				return false
			}
		}
		return true
	}
	switch {
	case same(func(st *stmt) bool { return st.known != nil }):
		return s.q.updateKnownSet, knownArrays(calls), true
	case same(func(st *stmt) bool { return st.reserve != nil }):
		return s.q.reserveSet, reserveArrays(calls), true
	}
	return "", nil, false
}

// runSet runs sql, the one statement of a batch of n calls, with args,
// in a transaction of its own, and returns their rows as runBatch does:
// pgx.ErrNoRows for a call the statement returned none for.
func runSet(ctx context.Context, conn *pgxpool.Conn, sql string, args []any, n int) ([]rawRow, error) {
	var b pgx.Batch
	b.Queue(setConfig, batchLockTimeout)
	b.Queue(sql, args...)
	br := conn.SendBatch(ctx, &b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	out := make([]rawRow, n)
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
		if ord < 1 || ord > int64(n) || out[ord-1].err == nil {
			return nil, fmt.Errorf("reading the rows of %d calls: row %d came twice or is out of range", n, ord)
		}
		out[ord-1] = ownRow(types, fields[1:], raw[1:])
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, br.Close()
}
