package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

// allowancesTable holds each upstream account's allowance as the one time
// retry.Allowance needs: when the account's bucket is next full, in unix
// nanoseconds. An account without a row has a full bucket.
//
// It is created IF NOT EXISTS in every file, new or of an older schema
// version, inside migrate's BEGIN IMMEDIATE transaction, so two processes
// opening one file at once cannot both create it; a file without it keeps
// its version, and a build that does not know the table ignores it.
const allowancesTable = `CREATE TABLE IF NOT EXISTS allowances (
	account TEXT PRIMARY KEY,
	full_at INTEGER NOT NULL -- unix nanoseconds
) WITHOUT ROWID`

// TakeAllowance takes room for one call from account's allowance at now,
// shared by every Store on this file, in this process or another: the
// read of the account's time and the write of the next one are one BEGIN
// IMMEDIATE transaction, which holds the file's write lock throughout. A
// refusal writes nothing, unless it caps the time (see retry.Allowance.TakeAt).
func (s *Store) TakeAllowance(ctx context.Context, account string, a retry.Allowance, now time.Time) (bool, time.Duration, error) {
	ok, wait, err := s.takeAllowance(ctx, account, a, now)
	if err != nil {
		return false, 0, fmt.Errorf("taking from allowance %s: %w", account, err)
	}
	return ok, wait, nil
}

func (s *Store) takeAllowance(ctx context.Context, account string, a retry.Allowance, now time.Time) (bool, time.Duration, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return false, 0, err
	}
	defer tx.Rollback()
	var full sql.NullInt64
	err = tx.QueryRowContext(ctx, "SELECT full_at FROM allowances WHERE account = ?", account).Scan(&full)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return false, 0, err
	}
	next, ok, wait := a.TakeAt(fromNanos(full), now)
	if !ok && next.Equal(fromNanos(full)) {
		return false, wait, nil
	}
	// A take, or a refusal that capped a time an older definition left.
	if _, err := tx.ExecContext(ctx, `INSERT INTO allowances (account, full_at) VALUES (?, ?)
		ON CONFLICT (account) DO UPDATE SET full_at = excluded.full_at`, account, next.UnixNano()); err != nil {
		return false, 0, err
	}
	return ok, wait, tx.Commit()
}

// AllowanceTokens returns the room left in account's allowance at now, in
// calls.
func (s *Store) AllowanceTokens(ctx context.Context, account string, a retry.Allowance, now time.Time) (float64, error) {
	var full sql.NullInt64
	err := s.r.QueryRowContext(ctx, "SELECT full_at FROM allowances WHERE account = ?", account).Scan(&full)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("reading allowance %s: %w", account, err)
	}
	return a.TokensAt(fromNanos(full), now), nil
}
