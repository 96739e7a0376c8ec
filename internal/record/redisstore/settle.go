package redisstore

import (
	"strconv"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// A new execution's two updates, completed and then delivered, are of a
// record this Store knows (known.go) and follow its common life. For
// them the client works out in Go what the update script would work out
// in Lua, and settleScript only checks that the record is still the one
// the Store knows and writes: about half of the update script's cost to
// the server, which is what bounds how many executions a second the
// store makes (docs/store-benchmarks.md).

// settleScript settles a record the Store knows, in its common life:
// dispatched to completed, or completed to delivered.
//
//	KEYS[1] the record, KEYS[2] its holder key, KEYS[3] its index, left
//	out in a Cluster, where it is in another slot and Update writes it
//	ARGV[1] the id, [2] the channel, [3] the length of the history as
//	the Store knows it, [4] the new state, [5] its transition as the
//	history keeps it (JSON), [6] expires_at, [7] the TTL in
//	milliseconds, [8] "1" to publish the settle, [9] "=" and the result,
//	or "", [10] the tag, with KEYS[3]
//
// It returns {"moved"} and writes nothing if the history is not the
// length given: a transition came between, or the record is gone, and
// the Store sends the update script instead. Else it returns what the
// update script returns when it applied a change to a record the Store
// knows: {"applied", the new history's length, attached, lease_until,
// expires_at}.
var settleScript = newScript("settle", false, `
local h = redis.call('HMGET', KEYS[1], 'history', 'attached')
if not h[1] or #h[1] ~= tonumber(ARGV[3]) or #h[1] <= 2 then
  return {'moved'}
end
local hist = string.sub(h[1], 1, -2) .. ',' .. ARGV[5] .. ']'
if ARGV[9] ~= '' then
  redis.call('HSET', KEYS[1], 'state', ARGV[4], 'history', hist, 'expires_at', ARGV[6], 'lease_until', '', 'result', string.sub(ARGV[9], 2))
else
  redis.call('HSET', KEYS[1], 'state', ARGV[4], 'history', hist, 'expires_at', ARGV[6], 'lease_until', '')
end
redis.call('PEXPIRE', KEYS[1], ARGV[7])
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('PEXPIRE', KEYS[2], ARGV[7]) end
if KEYS[3] then redis.call('SET', KEYS[3], ARGV[10], 'PX', ARGV[7]) end
if ARGV[8] == '1' then redis.call('PUBLISH', ARGV[2], ARGV[1]) end
return {'applied', #hist, h[2] or '0', '', ARGV[6]}
`)

// settleArgs returns the arguments of settleScript for c, a change of
// the record k at at, if c is one it makes: k known, c one of the common
// life's settles that k's state allows and its fences pass, with nothing
// the script does not write (a note, a decision, an owner, an error).
// Else it returns nil, and the update script makes c.
func (s *Store) settleArgs(k known, hist string, c *record.Change, at time.Time, id string) []any {
	r := k.rec
	if hist == "" || r == nil || c.Note != "" || c.By != "" || c.Via != "" || c.Owner != "" || c.Error != nil ||
		r.Retention < 0 || r.Retention > maxTTL || !c.AllowedFor(r) {
		return nil
	}
	publish := ""
	switch {
	case r.State == record.Dispatched && c.To == record.Completed:
		publish = "1" // it leaves the states in flight: waiters wake
	case r.State == record.Completed && c.To == record.Delivered && c.Result == nil:
	default:
		return nil
	}
	now := encTime(at)
	stored, _ := decTime(now)                            // as record.Record.Apply will set it (applied)
	entry := `["` + string(c.To) + `","` + now + `",""]` // as cjson writes it
	ttl := strconv.FormatInt(recordTTL(r.Retention).Milliseconds(), 10)
	return []any{id, s.channel, hist, string(c.To), entry, encTime(stored.Add(r.Retention)), ttl, publish, encBytes(c.Result)}
}
