package redisstore

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// ttlGrace is added to a settled record's retention to make its Redis TTL;
// see the package doc.
const ttlGrace = time.Minute

// maxTTL caps a Redis TTL, which must fit the server's millisecond clock.
const maxTTL = 100 * 365 * 24 * time.Hour

// The scripts. Each one touches keys of one hash tag. Times are unix
// nanoseconds as decimal strings ("" for none); Lua's numbers are doubles,
// exact only to 2^53, so the helpers compare and add them as seconds and
// nanoseconds.
var (
	// reserveScript claims a key.
	//
	//	KEYS[1] the holder key, KEYS[2] the new record's key, KEYS[3]
	//	the new record's index (outside the tag's slot: see doc.go),
	//	left out in a Cluster (see indexWon)
	//	ARGV[1] now, [2] the channel, [3] the tag's record key prefix,
	//	[4] the new id, [5] the replaceable states as ",a,b,",
	//	[6] the new record's fingerprint (only a record of the same
	//	action is replaced before it expires), [7] its TTL in
	//	milliseconds as flight_ms gives it, or "" for none (flightTTL),
	//	[8] the tag, [9...] the new record's fields and values
	//
	// It returns {won, orphan id, orphan TTL ms, holder fields}: won is 1,
	// 0 (the holder is returned; the caller counts the attach if it is of
	// the same action) or -1 (the id is taken). With won 1, the fields are
	// the orphan's it settled, if it did.
	reserveScript = newScript("reserve", true, `
local now, channel = ARGV[1], ARGV[2]
local hid = redis.call('GET', KEYS[1])
local oid, ottl = '', 0
if hid then
  local rk = ARGV[3] .. hid
  local h = redis.call('HMGET', rk, 'state', 'lease_until', 'owner', 'expires_at', 'fingerprint')
  local st, exp = h[1], h[4] or ''
  if st then
    if orphaned(st, h[2] or '', now) then
      st, exp, ottl = settle_orphan(rk, KEYS[1], hid, load(rk), now, channel)
      oid = hid
    end
    local replace = (h[5] == ARGV[6] and (st == 'failed' or string.find(ARGV[5], ',' .. st .. ',', 1, true)))
      or (not INFLIGHT[st] and exp ~= '' and not before(now, exp))
    if not replace then
      -- A match: the caller counts its attach (attach.go).
      return {0, oid, ottl, redis.call('HGETALL', rk)}
    end
  elseif redis.call('EXISTS', rk) == 1 then
    -- A record without a state, which no proxy writes: the caller
    -- refuses it, where taking it for none would run its call again.
    return {0, oid, ottl, redis.call('HGETALL', rk)}
  end
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return {-1, oid, ottl}
end
redis.call('HSET', KEYS[2], unpack(ARGV, 9))
-- The record is new and has no TTL: one is set only if it has a lease.
local ttl = ARGV[7]
if ttl ~= '' then
  redis.call('SET', KEYS[1], ARGV[4], 'PX', ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
else
  redis.call('SET', KEYS[1], ARGV[4])
end
if KEYS[3] then
  redis.call('SET', KEYS[3], ARGV[8], 'PX', `+strconv.FormatInt(indexFlightTTL.Milliseconds(), 10)+`)
end
if oid ~= '' then
  return {1, oid, ottl, redis.call('HGETALL', ARGV[3] .. oid)}
end
return {1, oid, ottl}
`)

	// updateScript applies a change.
	//
	//	KEYS[1] the record, KEYS[2] its holder key
	//	ARGV[1] now, [2] the channel, [3] the id, [4] the new state,
	//	[5] the note, [6] "=" and the result or "", [7] likewise the
	//	error, [8] the new owner or "", [9] its lease, [10] the state
	//	the change applies from only (Change.From), or "", [11] and
	//	[12] who made a decision and through which channel, or "",
	//	[13] the length of the history of the record as the caller
	//	knows it, or "", [14] the owner the change is fenced to
	//	(Change.Holder), or "", [15] the attempts it is fenced to
	//	(Change.Attempts), or ""
	//
	// It returns {"ok", fields}, {"conflict", fields} or {"notfound"};
	// or, when it made the change to a record whose history had the
	// length the caller knows, {"applied", the new history's length,
	// attached, lease_until, expires_at}: the caller knows the rest (see
	// known.go). A history only grows, by a transition each time, and
	// every field but attached and lease_until changes only with one.
	updateScript = newScript("update", true, `
local cur = load(KEYS[1])
if not cur then
  return {'notfound'}
end
local st, to = cur.state, ARGV[4]
if st == 'delivered' and to == 'delivered' and ARGV[10] == '' then
  return {'ok', redis.call('HGETALL', KEYS[1])}
end
if not (NEXT[st] and NEXT[st][to]) or (ARGV[10] ~= '' and st ~= ARGV[10])
  or (ARGV[14] ~= '' and (not INFLIGHT[st] or cur.owner ~= ARGV[14]))
  or (ARGV[15] ~= '' and (redis.call('HGET', KEYS[1], 'attempts') or '0') ~= ARGV[15]) then
  return {'conflict', redis.call('HGETALL', KEYS[1])}
end
local known = ARGV[13] ~= '' and #cur.history == tonumber(ARGV[13])
local _, hist, exp, lease = apply(KEYS[1], KEYS[2], ARGV[3], cur, to, ARGV[1], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[2], ARGV[11], ARGV[12])
if known then
  return {'applied', #hist, cur.attached, lease, exp}
end
return {'ok', redis.call('HGETALL', KEYS[1])}
`)

	// checkScript reads a record for a waiter, settling it first if it
	// is an orphan.
	//
	//	KEYS[1] the record, KEYS[2] its holder key
	//	ARGV[1] now, [2] the channel, [3] the id
	//
	// It returns {"ok", orphan TTL ms or 0, fields} or {"notfound"}.
	checkScript = newScript("check", true, `
local cur = load(KEYS[1])
if not cur then
  return {'notfound'}
end
local ttl = 0
if orphaned(cur.state, cur.lease_until, ARGV[1]) then
  local _
  _, _, ttl = settle_orphan(KEYS[1], KEYS[2], ARGV[3], cur, ARGV[1], ARGV[2])
end
return {'ok', ttl, redis.call('HGETALL', KEYS[1])}
`)

	// renewScript extends one record's lease, and its TTL, if owner
	// still runs it.
	//
	//	KEYS[1] the record, KEYS[2] its holder key
	//	ARGV[1] the owner, [2] the new lease, [3] the id, [4] now
	//
	// It returns 1 if it did, else 0.
	renewScript = newScript("renew", true, `
local h = redis.call('HMGET', KEYS[1], 'state', 'owner', 'retention')
if h[1] and INFLIGHT[h[1]] and h[2] == ARGV[1] then
  redis.call('HSET', KEYS[1], 'lease_until', ARGV[2])
  flight_ttl(KEYS[1], KEYS[2], redis.call('GET', KEYS[2]) == ARGV[3], ARGV[4], ARGV[2], h[3] or '0')
  return 1
end
return 0
`)
)

// luaLib is the preamble every script shares (functions.go). Its tables come from the
// record package, so the transitions and the orphan notes cannot drift.
//
// What costs the server most in a script is not its commands but moving
// values between Redis and Lua: each field read or written, and each one
// returned, costs more than a small command does. So the scripts read
// only the fields they need, in one HMGET (load), write them in one HSET
// (apply), and take what they have just written from their arguments
// rather than read it back.
var luaLib = luaTables() + `
local function split(t)
  local n = #t
  if n <= 9 then return 0, tonumber(t) end
  return tonumber(string.sub(t, 1, n - 9)), tonumber(string.sub(t, n - 8))
end

-- before reports whether time a is before time b.
local function before(a, b)
  local ah, al = split(a)
  local bh, bl = split(b)
  return ah < bh or (ah == bh and al < bl)
end

-- ms returns the duration d, in nanoseconds, in whole milliseconds. A
-- double holds nanoseconds exactly only up to 2^53, about 104 days.
local function ms(d)
  local h, l = split(d)
  return h * 1000 + math.floor(l / 1e6)
end

-- add returns time t plus the duration d.
local function add(t, d)
  local th, tl = split(t)
  local dh, dl = split(d)
  local h, l = th + dh, tl + dl
  if l >= 1e9 then h, l = h + 1, l - 1e9 end
  if h == 0 then return string.format('%d', l) end
  return string.format('%d%09d', h, l)
end

-- load reads the fields of the record rk that apply needs, or returns
-- nil if there is none; a field the record lacks is "".
local function load(rk)
  local h = redis.call('HMGET', rk, 'state', 'history', 'retention', 'lease_until', 'owner', 'attached')
  if not h[1] then return nil end
  return {state = h[1], history = h[2] or '', retention = h[3] or '0', lease_until = h[4] or '',
    owner = h[5] or '', attached = h[6] or '0'}
end

local function orphaned(state, lease, now)
  return INFLIGHT[state] and lease ~= '' and before(lease, now)
end

-- flight_ms returns the TTL, in milliseconds, of a record in flight at
-- now with lease and retention: one retention and the grace after its
-- lease ends, when it would expire had it been settled as an orphan then.
-- A record whose owner died and that no one asks for again is thus
-- dropped too. A record without a lease cannot become an orphan, and has
-- no TTL: it returns nil. A reservation's is worked out by the client
-- (flightTTL).
local function flight_ms(now, lease, retention)
  if lease == '' then return nil end
  local ttl = math.min(ms(retention), MAX_TTL_MS) + GRACE_MS
  if before(now, lease) then
    local lh, ll = split(lease)
    local nh, nl = split(now)
    ttl = ttl + (lh - nh) * 1000 + math.floor((ll - nl) / 1e6)
  end
  return math.min(ttl, MAX_TTL_MS + GRACE_MS)
end

-- flight_ttl gives the record rk in flight, and its holder key hk if holds,
-- the TTL flight_ms says.
local function flight_ttl(rk, hk, holds, now, lease, retention)
  local ttl = flight_ms(now, lease, retention)
  if not ttl then
    redis.call('PERSIST', rk)
    if holds then redis.call('PERSIST', hk) end
    return
  end
  redis.call('PEXPIRE', rk, ttl)
  if holds then redis.call('PEXPIRE', hk, ttl) end
end

-- push appends the field k and its value v to the HSET arguments f.
local function push(f, k, v)
  f[#f + 1] = k
  f[#f + 1] = v
end

-- apply moves the record rk, as load read it into cur, to state to,
-- which NEXT allows, as record.Record.Apply does. It returns the TTL
-- given to the record if it settled, else 0, and the record's new
-- history, expires_at and lease_until. A record in flight has no
-- expires_at, and only one in accepted awaits a decision.
local function apply(rk, hk, id, cur, to, now, note, result, err, owner, lease, channel, by, via)
  local from = cur.state
  local e
  if by ~= '' or via ~= '' then
    e = cjson.encode({to, now, note, by, via})
  else
    -- Three members, as the store always wrote them, when there is no
    -- decision to keep.
    e = cjson.encode({to, now, note})
  end
  local h = cur.history
  if #h > 2 then
    h = string.sub(h, 1, -2) .. ',' .. e .. ']'
  else
    h = '[' .. e .. ']'
  end
  local f = {'state', to, 'history', h}
  if result ~= '' then push(f, 'result', string.sub(result, 2)) end
  if err ~= '' then push(f, 'error', string.sub(err, 2)) end
  if owner ~= '' then push(f, 'owner', owner) end
  if to == DISPATCHED then redis.call('HINCRBY', rk, 'attempts', 1) end
  local awaited = from == ACCEPTED and to ~= ACCEPTED and redis.call('HDEL', rk, 'awaiting') == 1
  -- A decision's waiters (WaitDecided) are woken when the record leaves
  -- accepted. Every execution leaves it for dispatched without a
  -- decision, and no one waits for that one: it is not published.
  local decided = from == ACCEPTED and (awaited or to ~= DISPATCHED)
  if not INFLIGHT[to] then
    local ttl = math.min(ms(cur.retention), MAX_TTL_MS) + GRACE_MS
    local exp = add(now, cur.retention)
    push(f, 'expires_at', exp)
    push(f, 'lease_until', '')
    redis.call('HSET', rk, unpack(f))
    redis.call('PEXPIRE', rk, ttl)
    -- A replaced record may still move (completed to delivered); the
    -- holder key then belongs to its successor and keeps its own TTL.
    if redis.call('GET', hk) == id then redis.call('PEXPIRE', hk, ttl) end
    if INFLIGHT[from] then redis.call('PUBLISH', channel, id) end
    return ttl, h, exp, ''
  end
  local l = cur.lease_until
  if owner ~= '' then
    l = lease
    push(f, 'lease_until', lease)
  end
  if not INFLIGHT[from] then push(f, 'expires_at', '') end
  redis.call('HSET', rk, unpack(f))
  if decided then redis.call('PUBLISH', channel, id) end
  if not INFLIGHT[from] or owner ~= '' then
    -- Back in flight, or claimed with a new lease.
    flight_ttl(rk, hk, redis.call('GET', hk) == id, now, l, cur.retention)
  end
  return 0, h, '', l
end

-- settle_orphan settles an orphan, as load read it into cur, as
-- record.OrphanChange does and returns its new state, expires_at and TTL.
local function settle_orphan(rk, hk, id, cur, now, channel)
  local o = ORPHAN[cur.state]
  local ttl, _, exp = apply(rk, hk, id, cur, o.to, now, o.pre .. cur.owner .. o.suf, '', '', '', '', channel, '', '')
  return o.to, exp, ttl
end
`

// states lists every record.State.
var states = record.States

// luaTables writes the Lua tables INFLIGHT, NEXT and ORPHAN, the names
// of the states a record awaits its decision in and goes on to without
// one, and the TTL constants from the record package's rules.
func luaTables() string {
	var b strings.Builder
	b.WriteString("local INFLIGHT = {")
	for _, s := range states {
		if s.InFlight() {
			fmt.Fprintf(&b, "[%s] = true, ", luaQuote(string(s)))
		}
	}
	b.WriteString("}\nlocal NEXT = {")
	for _, from := range states {
		fmt.Fprintf(&b, "[%s] = {", luaQuote(string(from)))
		for _, to := range states {
			if record.CanTransition(from, to) {
				fmt.Fprintf(&b, "[%s] = true, ", luaQuote(string(to)))
			}
		}
		b.WriteString("}, ")
	}
	b.WriteString("}\nlocal ORPHAN = {")
	// OrphanChange puts the owner inside its note; a marker in its place
	// splits the note into what goes before and after.
	const marker = "\x00owner\x00"
	for _, s := range states {
		if !s.InFlight() {
			continue
		}
		c := record.OrphanChange(&record.Record{State: s, Owner: marker})
		pre, suf, _ := strings.Cut(c.Note, marker)
		fmt.Fprintf(&b, "[%s] = {to = %s, pre = %s, suf = %s}, ", luaQuote(string(s)), luaQuote(string(c.To)), luaQuote(pre), luaQuote(suf))
	}
	b.WriteString("}\n")
	fmt.Fprintf(&b, "local ACCEPTED, DISPATCHED = %s, %s\n", luaQuote(string(record.Accepted)), luaQuote(string(record.Dispatched)))
	fmt.Fprintf(&b, "local GRACE_MS = %d\nlocal MAX_TTL_MS = %d\n", ttlGrace.Milliseconds(), maxTTL.Milliseconds())
	return b.String()
}

// luaQuote returns s as a Lua string literal, every byte but letters,
// digits, spaces and common punctuation written as a decimal escape.
func luaQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= ' ' && c <= '~' && c != '"' && c != '\\' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "\\%03d", c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
