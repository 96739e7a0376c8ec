package redisstore

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// A new execution's two updates, completed and then delivered, are of a
// record this Store knows (known.go) and follow its common life. For
// them the client works out in Go what the update script would work out
// in Lua, and settleScript only checks that the record is in the state
// and has the history the Store knows, and writes: about half of the
// update script's cost to the server, which is what bounds how many
// executions a second the store makes (docs/store-benchmarks.md).

// settleScript settles a record the Store knows, in its common life:
// dispatched to completed, or completed to delivered.
//
//	KEYS[1] the record, KEYS[2] its holder key, KEYS[3] its index, left
//	out in a Cluster, where it is in another slot and Update writes it
//	ARGV[1] the id, [2] the channel, [3] the state the Store knows,
//	[4] the length of the history it knows, [5] the new state, [6] its
//	transition as the history keeps it (JSON), [7] expires_at, [8] the
//	TTL in milliseconds, [9] "1" to publish the settle, [10] "=" and the
//	result, or "", [11] the tag, with KEYS[3]
//
// It returns {"moved"} and writes nothing unless the record is in that
// state with a history of that length (a history only grows, so the
// length says no transition came between; the state guards against one
// that Redis lost, followed by another of the same length); a record
// gone, or with an empty history, has moved too. The Store then sends
// the update script. Else it returns what the update script returns
// when it applied a change to a record the Store knows: {"applied", the
// new history's length, attached, lease_until, expires_at}.
var settleScript = newScript("settle", false, `
local h = redis.call('HMGET', KEYS[1], 'state', 'history', 'attached')
if h[1] ~= ARGV[3] or not h[2] or #h[2] ~= tonumber(ARGV[4]) or #h[2] <= 2 then
  return {'moved'}
end
local hist = string.sub(h[2], 1, -2) .. ',' .. ARGV[6] .. ']'
if ARGV[10] ~= '' then
  redis.call('HSET', KEYS[1], 'state', ARGV[5], 'history', hist, 'expires_at', ARGV[7], 'lease_until', '', 'result', string.sub(ARGV[10], 2))
else
  redis.call('HSET', KEYS[1], 'state', ARGV[5], 'history', hist, 'expires_at', ARGV[7], 'lease_until', '')
end
redis.call('PEXPIRE', KEYS[1], ARGV[8])
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('PEXPIRE', KEYS[2], ARGV[8]) end
if KEYS[3] then redis.call('SET', KEYS[3], ARGV[11], 'PX', ARGV[8]) end
if ARGV[9] == '1' then redis.call('PUBLISH', ARGV[2], ARGV[1]) end
return {'applied', #hist, h[3] or '0', '', ARGV[7]}
`)

// settleArgs returns the arguments of settleScript for c, a change at at
// of the record k, whose history field the Store knows is hist bytes
// long ("" if it does not know the record), and whether the script can
// make c. It can if c settles k in the common life, is allowed from k's
// state and passes its fences, and brings nothing the script does not
// write: a note, a decision, an owner, an error, or a result with a
// delivery. k's retention must be one the scripts store as it is
// (encDuration turns a negative one into zero) and that puts its expiry
// within the times they store (encTime clamps one past 2262): else
// record.Record.Apply, which makes the record the Store returns, and the
// script would not agree on its expiry.
func (s *Store) settleArgs(k known, hist string, c *record.Change, at time.Time) ([]any, bool) {
	r := k.rec
	if hist == "" || c.Note != "" || c.By != "" || c.Via != "" || c.Owner != "" || c.Error != nil ||
		r.Retention < 0 || r.Retention > maxTTL || !c.AllowedFor(r) {
		return nil, false
	}
	publish := ""
	switch {
	case r.State == record.Dispatched && c.To == record.Completed:
		publish = "1" // it leaves the states in flight: waiters wake
	case r.State == record.Completed && c.To == record.Delivered && c.Result == nil:
	default:
		return nil, false
	}
	now := encTime(at)
	stored, _ := decTime(now)                            // as record.Record.Apply will set it (applied)
	entry := `["` + string(c.To) + `","` + now + `",""]` // as cjson writes it
	ttl := strconv.FormatInt(recordTTL(r.Retention).Milliseconds(), 10)
	return []any{r.ID, s.channel, string(r.State), hist, string(c.To), entry, encTime(stored.Add(r.Retention)), ttl, publish, encBytes(c.Result)}, true
}

// An updateCall sends an update made at at, and says where it writes
// the record's index, which goes in the same round trip.
type updateCall struct {
	fill            func(p redis.Pipeliner, full bool)
	at              time.Time
	known           known // the record as this Store knew it, if it did
	indexInScript   bool  // the settle script writes it, when it settles
	indexInPipeline bool  // a SET beside the script: the second command
}

// newUpdateCall returns the call that makes c, a change now of the
// record id at l: the settle script if trySettle and it can, else the
// update script. The settle script writes the index where it is in the
// script's slot, outside a Cluster. Else the index is sent beside the
// script if its tag came from the cache (cached), and else fixed once
// the record is read.
func (s *Store) newUpdateCall(ctx context.Context, id string, l loc, cached bool, c *record.Change, trySettle bool) *updateCall {
	u := &updateCall{at: s.now(), indexInPipeline: cached}
	k, hist := s.knownFor(id, *c)
	u.known = k
	keys := []string{s.recordKey(l.tag, id), s.holderKey(l.tag)}
	sc, args, ok := settleScript, []any(nil), false
	if trySettle {
		args, ok = s.settleArgs(k, hist, c, u.at)
	}
	if !ok {
		sc, args = updateScript, []any{encTime(u.at), s.channel, id, string(c.To), c.Note, encBytes(c.Result), encBytes(c.Error), c.Owner,
			encTime(c.LeaseFrom(u.at)), string(c.From), c.By, c.Via, hist, c.Holder, encAttempts(c.Attempts)}
	}
	if sc == settleScript && s.cluster == nil {
		keys, args = append(keys, s.indexKey(id)), append(args, l.tag)
		u.indexInScript, u.indexInPipeline = true, false
	}
	index, ttl := s.indexKey(id), indexTTL(c.To, l.retention)
	inPipeline := u.indexInPipeline
	u.fill = func(p redis.Pipeliner, full bool) {
		s.eval(ctx, p, sc, full, keys, args...)
		if inPipeline {
			p.Set(ctx, index, l.tag, ttl)
		}
	}
	return u
}
