package pgstore

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

// takeSQL takes room for one call from an account's allowance: it is
// retry.Allowance.TakeAt in one statement. An account's first take inserts
// its row (a full bucket always has room); later ones update it, and the
// row lock that ON CONFLICT DO UPDATE takes makes concurrent takes, from
// any process, run one after the other, each on the row the last one
// left. In an UPDATE every expression reads the row as it was, so last_took
// and full_at test the same old full_at. A full_at beyond $cap, now plus
// the allowance's span, counts, and is kept, as $cap (retry.Allowance.TakeAt's
// cap).
var takeSQL = params(`
INSERT INTO {schema}.allowances AS a (account, full_at, last_took)
VALUES ($account::text, $now::bigint + $interval::bigint, true)
ON CONFLICT (account) DO UPDATE SET
	last_took = least(greatest(a.full_at, $now::bigint), $cap::bigint) - $tolerance::bigint <= $now::bigint,
	full_at = CASE WHEN least(greatest(a.full_at, $now::bigint), $cap::bigint) - $tolerance::bigint <= $now::bigint
		THEN least(greatest(a.full_at, $now::bigint), $cap::bigint) + $interval::bigint
		ELSE least(a.full_at, $cap::bigint) END
RETURNING last_took, full_at`, "account", "now", "interval", "tolerance", "cap")

const tokensSQL = `SELECT full_at FROM {schema}.allowances WHERE account = $1`

// TakeAllowance takes room for one call from account's allowance at now,
// shared by every Store on this database and schema, in one statement.
// Times are unix nanoseconds from now, never the server's clock.
func (s *Store) TakeAllowance(ctx context.Context, account string, a retry.Allowance, now time.Time) (bool, time.Duration, error) {
	op := "taking from allowance " + account
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	if err := s.ensure(ctx); err != nil {
		return false, 0, s.fail(op, err)
	}
	var (
		took bool
		full int64
	)
	capAt := now.UnixNano() + int64(a.Span())
	if capAt < now.UnixNano() {
		capAt = math.MaxInt64 // the span overflows: no cap
	}
	err := s.pool.QueryRow(ctx, s.sql(takeSQL), account, now.UnixNano(), int64(a.Interval()), int64(a.Tolerance()), capAt).Scan(&took, &full)
	if err != nil {
		return false, 0, s.fail(op, err)
	}
	if took {
		return true, 0, nil
	}
	// Refused: full_at is as it was, or capped, and after now plus the
	// tolerance.
	return false, time.Duration(full - now.UnixNano() - int64(a.Tolerance())), nil
}

// AllowanceTokens returns the room left in account's allowance at now, in
// calls.
func (s *Store) AllowanceTokens(ctx context.Context, account string, a retry.Allowance, now time.Time) (float64, error) {
	op := "reading allowance " + account
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	if err := s.ensure(ctx); err != nil {
		return 0, s.fail(op, err)
	}
	var full int64
	err := s.pool.QueryRow(ctx, s.sql(tokensSQL), account).Scan(&full)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return a.TokensAt(time.Time{}, now), nil
	case err != nil:
		return 0, s.fail(op, err)
	}
	return a.TokensAt(time.Unix(0, full), now), nil
}
