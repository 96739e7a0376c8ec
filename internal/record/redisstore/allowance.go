package redisstore

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

// allowanceScript takes room for one call from an account's allowance: it
// is retry.Allowance.TakeAt in one script, which Redis runs with nothing
// in between, so every proxy sharing the server takes from one allowance.
//
//	KEYS[1] the account's allowance key, holding when its bucket is next
//	full (unix nanoseconds, as a decimal string); absent when it is full
//	ARGV[1] now, [2] the interval and [3] the tolerance, in nanoseconds
//
// It returns {1, 0} when it took, {0, wait in nanoseconds} when there was
// no room. Lua's numbers are doubles, exact only to 2^53, so times are
// compared through how far the bucket is ahead of now, which is exact for
// up to 104 days. A bucket further ahead than tolerance plus interval
// counts, and is kept, as that far (retry.Allowance.TakeAt's cap). A take
// sets the key to expire once the bucket is full
// again, when an absent key means the same.
var allowanceScript = newScript("allowance", true, `
local now, interval, tolerance = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local ahead, capped = 0, false
local full = redis.call('GET', KEYS[1])
if full then
  local fh, fl = split(full)
  local nh, nl = split(now)
  ahead = math.max((fh - nh) * 1e9 + (fl - nl), 0)
  if ahead > tolerance + interval then
    ahead, capped = tolerance + interval, true
  end
end
if ahead > tolerance then
  if capped then
    redis.call('SET', KEYS[1], add(now, string.format('%d', ahead)), 'PX', math.ceil(ahead / 1e6) + 1000)
  end
  return {0, ahead - tolerance}
end
local ahead_next = ahead + interval
redis.call('SET', KEYS[1], add(now, string.format('%d', ahead_next)), 'PX', math.ceil(ahead_next / 1e6) + 1000)
return {1, 0}
`)

// allowanceKey is the key of an account's allowance. It needs no hash
// tag: the script touches only it.
func (s *Store) allowanceKey(account string) string { return s.prefix + "a:" + account }

// TakeAllowance takes room for one call from account's allowance at now,
// shared by every Store with this server and prefix, in one script. Times
// come from now, never from the server's clock.
func (s *Store) TakeAllowance(ctx context.Context, account string, a retry.Allowance, now time.Time) (bool, time.Duration, error) {
	cmd, replicas := s.run(ctx, allowanceScript, []string{s.allowanceKey(account)},
		strconv.FormatInt(now.UnixNano(), 10), int64(a.Interval()), int64(a.Tolerance()))
	v, err := cmd.Int64Slice()
	if err != nil {
		return false, 0, s.fail("taking from allowance "+account, err)
	}
	if len(v) != 2 {
		return false, 0, s.fail("taking from allowance "+account, errors.New("the script answered with the wrong shape"))
	}
	if v[0] == 1 && replicas != nil {
		return false, 0, s.fail("taking from allowance "+account, replicas) // taken, unconfirmed
	}
	return v[0] == 1, time.Duration(v[1]), nil
}

// AllowanceTokens returns the room left in account's allowance at now, in
// calls.
func (s *Store) AllowanceTokens(ctx context.Context, account string, a retry.Allowance, now time.Time) (float64, error) {
	v, err := s.rdb.Get(ctx, s.allowanceKey(account)).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return a.TokensAt(time.Time{}, now), nil
	case err != nil:
		return 0, s.fail("reading allowance "+account, err)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, s.fail("reading allowance "+account, err)
	}
	return a.TokensAt(time.Unix(0, n), now), nil
}
