package redisstore_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// The one-string layout, as BenchmarkLayout's full-string and
// full-holder variants send it: every command and check a store in
// that layout would make on a new execution's path, with a client that
// encodes what it sends and reads what comes back.
//
// A record is one string: a header of fixed width that the scripts read
// and write by position, the record's id, owner and fingerprint, then a
// log of chunks that only the client reads: the record's fixed fields
// (b), each transition (t), the result (r) and the error (e), each a
// letter, six digits of length and JSON.
//
//	pos  width  field
//	1    1      format, "1"
//	2    1      state (stateCode)
//	3    4      transitions made: the record's version
//	7    4      attempts
//	11   19     lease_until, unix ns, zeros for none
//	30   19     expires_at, likewise
//	49   19     retention, ns
//	68   1      awaiting: "-", "c" (client) or "o" (operator)
//	69   13     when the TTLs of the index (and of the holder key, if
//	            apart) end, unix ms, zeros for none
//	82   10     attached
//	92   3      length of the id, then 3 of the owner, 3 of the fingerprint
//	101  ...    the id, the owner, the fingerprint; then the log
//
// Every field but lease_until, the TTLs' end and attached changes only
// with a transition, which adds one to the version; Renew writes the
// lease, and an attach its count, each with one SETRANGE. So an update
// sends the first 68 bytes of the header and the chunks the client made
// from its copy of the record. The script checks the change against
// the stored header (the transition allowed, From, the owner and
// attempts it is fenced to), and, if the version is the client's,
// writes them: over the stored header (SETRANGE; the lease kept unless
// the change settles the record or sets a new owner) and after the log
// (APPEND). (Reading the whole string and writing it anew, GET and SET,
// cost the server as much.) If the version is not the client's,
// the script answers "stale" with the record, and the client applies the
// change to that and sends it again. A change of owner (a takeover)
// rewrites the string.
//
// hdrFixed is the header's length before the id.
const hdrFixed = 100

// stateCode maps a record.State to its letter in the header.
var stateCode = map[record.State]byte{
	record.Accepted: 'a', record.Dispatched: 'd', record.Completed: 'c', record.Delivered: 'v',
	record.Failed: 'f', record.Unknown: 'u', record.Authorized: 'z', record.Refused: 'r',
}

// oneStringLib is the Lua library of the layout's scripts.
func oneStringLib(name string) string {
	var b strings.Builder
	b.WriteString("#!lua name=" + name + "\n")
	b.WriteString("local INFLIGHT, NEXT, ORPHAN, NAME = {}, {}, {}, {}\n")
	const marker = "\x00owner\x00"
	for _, from := range record.States {
		c := string(stateCode[from])
		fmt.Fprintf(&b, "NAME[%q] = %q\nNEXT[%q] = {}\n", c, from, c)
		if from.InFlight() {
			fmt.Fprintf(&b, "INFLIGHT[%q] = true\n", c)
			o := record.OrphanChange(&record.Record{State: from, Owner: marker})
			pre, suf, _ := strings.Cut(o.Note, marker)
			fmt.Fprintf(&b, "ORPHAN[%q] = {to = %q, pre = %q, suf = %q}\n", c, stateCode[o.To], pre, suf)
		}
		for _, to := range record.States {
			if record.CanTransition(from, to) {
				fmt.Fprintf(&b, "NEXT[%q][%q] = true\n", c, stateCode[to])
			}
		}
	}
	fmt.Fprintf(&b, "local GRACE_MS = %d\n", time.Minute.Milliseconds())
	b.WriteString(oneStringLua)
	return b.String()
}

const oneStringLua = `
-- The library's top level cannot read the string table while it loads.
local Z19, Z13 = '0000000000000000000', '0000000000000'

-- lens returns the header's length, and its id's and owner's.
local function lens(cur)
  local il, ol = tonumber(string.sub(cur, 92, 94)), tonumber(string.sub(cur, 95, 97))
  return 100 + il + ol + tonumber(string.sub(cur, 98, 100)), il, ol
end

-- add returns the 19-digit time t plus the duration d, in ns: Lua's
-- numbers are exact to 2^53 only, so in seconds and nanoseconds.
local function add(t, d)
  local s = tonumber(string.sub(t, 1, 10)) + tonumber(string.sub(d, 1, 10))
  local n = tonumber(string.sub(t, 11)) + tonumber(string.sub(d, 11))
  if n >= 1e9 then s, n = s + 1, n - 1e9 end
  return string.format('%010d%09d', s, n)
end

-- settle_orphan settles the orphan cur at key k, as
-- record.OrphanChange does, and returns it as written.
local function settle_orphan(k, cur, now, channel)
  local _, il, ol = lens(cur)
  local o = ORPHAN[string.sub(cur, 2, 2)]
  local ret = string.sub(cur, 49, 67)
  local note = o.pre .. string.sub(cur, 101 + il, 100 + il + ol) .. o.suf
  local t = cjson.encode({NAME[o.to], tostring(tonumber(now)), note})
  local new = '1' .. o.to .. string.format('%04d', tonumber(string.sub(cur, 3, 6)) + 1) .. string.sub(cur, 7, 10) ..
    Z19 .. add(now, ret) .. ret .. '-' .. string.sub(cur, 69) .. 't' .. string.format('%06d', #t) .. t
  redis.call('SET', k, new, 'PX', math.floor(tonumber(ret) / 1e6) + GRACE_MS)
  redis.call('PUBLISH', channel, string.sub(cur, 101, 100 + il))
  return new
end

-- reserve claims a key.
--
--   KEYS[1] the holder key, KEYS[2] the new id's index
--   ARGV[1] now (19 digits), [2] the channel, [3] the tag's record key
--   prefix, [4] the replaceable states as ",a,b,", [5] the fingerprint,
--   [6] the new record, [7] its TTL in ms or "", [8] the tag, [9] the
--   new id if the holder key holds ids (full-string), else ""
--
-- It returns {won, orphan id, holder}: won is 1, 0 (the holder, which
-- the caller attaches to if it matches) or -1 (the id is taken).
local function reserve(KEYS, ARGV)
  local now, hk = ARGV[1], KEYS[1]
  local holder, rk = ARGV[6], nil
  if ARGV[9] ~= '' then holder, rk = ARGV[9], ARGV[3] .. ARGV[9] end
  local function set(k, v, nx)
    local a = {'SET', k, v}
    if nx then a[#a + 1] = 'NX' end
    if ARGV[7] ~= '' then a[#a + 1] = 'PX'; a[#a + 1] = ARGV[7] end
    return redis.call(unpack(a))
  end
  -- The common case, a key no record holds, claimed at once.
  local prev
  if ARGV[7] ~= '' then
    prev = redis.call('SET', hk, holder, 'NX', 'GET', 'PX', ARGV[7])
  else
    prev = redis.call('SET', hk, holder, 'NX', 'GET')
  end
  local cur, oid, ck = prev, '', hk
  if prev and rk then
    ck = ARGV[3] .. prev
    cur = redis.call('GET', ck)
  end
  if cur then
    local hl, il, ol = lens(cur)
    local st, lease = string.sub(cur, 2, 2), string.sub(cur, 11, 29)
    if INFLIGHT[st] and lease ~= Z19 and lease < now then
      oid = string.sub(cur, 101, 100 + il)
      cur = settle_orphan(ck, cur, now, ARGV[2])
      st = string.sub(cur, 2, 2)
    end
    local exp = string.sub(cur, 30, 48)
    local replace = (string.sub(cur, 101 + il + ol, hl) == ARGV[5] and (st == 'f' or string.find(ARGV[4], ',' .. st .. ',', 1, true)))
      or (not INFLIGHT[st] and exp ~= Z19 and exp <= now)
    if not replace then
      return {0, oid, cur}
    end
  end
  if not set(KEYS[2], ARGV[8], true) then
    if not prev then redis.call('DEL', hk) end
    return {-1, oid}
  end
  if prev then
    if not rk then
      -- The record replaced lives on at its own key, with its TTL, for
      -- its waiters and its id.
      redis.call('RENAME', hk, ARGV[3] .. string.sub(cur, 101, 100 + tonumber(string.sub(cur, 92, 94))))
    end
    set(hk, holder, false)
  end
  if rk then set(rk, ARGV[6], false) end
  return {1, oid}
end

-- find returns the key of the record id, KEYS[1] or else KEYS[2], and
-- its header through the id and n bytes more, or nil; with n nil, the
-- whole record.
local function find(KEYS, id, n)
  local function read(k)
    if n then return redis.call('GETRANGE', k, 0, 99 + #id + n) end
    return redis.call('GET', k) or ''
  end
  local k = KEYS[1]
  local h = read(k)
  if string.sub(h, 101, 100 + #id) == id and tonumber(string.sub(h, 92, 94)) == #id then return k, h end
  if KEYS[2] == k then return nil end
  k = KEYS[2]
  h = read(k)
  if h == '' then return nil end
  return k, h
end

-- check checks the change ARGV (as update takes it) against the header
-- h, and returns nil or the reply that refuses it.
local function check(ARGV, h, st, to)
  if not NEXT[st][to] or (ARGV[4] ~= '' and st ~= ARGV[4])
    or (ARGV[5] ~= '' and (not INFLIGHT[st] or tonumber(string.sub(h, 95, 97)) ~= #ARGV[5]
      or string.sub(h, 101 + #ARGV[2], 100 + #ARGV[2] + #ARGV[5]) ~= ARGV[5]))
    or (ARGV[6] ~= '' and string.sub(h, 7, 10) ~= ARGV[6]) then
    return 'conflict'
  end
  if string.sub(h, 3, 6) ~= ARGV[3] then return 'stale' end
  return nil
end

-- settled publishes a settle, or a decision, of the record id moving
-- from st, as its header h says, to to.
local function publish(ARGV, h, st, to)
  if (INFLIGHT[st] and not INFLIGHT[to]) or (st == 'a' and to ~= 'a' and (string.sub(h, 68, 68) ~= '-' or to ~= 'd')) then
    redis.call('PUBLISH', ARGV[1], ARGV[2])
  end
end

-- expire_at gives the record at k, its index KEYS[3], and its holder
-- key KEYS[4] while it holds the id, a TTL that ends at t (unix ms).
local function expire_at(k, KEYS, id, t)
  redis.call('PEXPIREAT', k, t)
  redis.call('PEXPIREAT', KEYS[3], t)
  if KEYS[4] and redis.call('GET', KEYS[4]) == id then redis.call('PEXPIREAT', KEYS[4], t) end
end

-- update applies a change, writing over the header and after the log.
--
--   KEYS[1] where the record is first looked for (the holder key, or
--   its own key), KEYS[2] its own key, KEYS[3] its index, KEYS[4] the
--   holder key if apart (full-string)
--   ARGV[1] the channel, [2] the id, [3] the version the caller knows,
--   [4] the state the change applies from only, or "", [5] the owner it
--   is fenced to, or "", [6] the attempts it is fenced to, or "", [7]
--   the first 68 bytes of the new header, [8] the chunks it adds, [9]
--   when the TTL the change needs ends, unix ms (13 digits), or "" for
--   none, [10] the new header, whole, if it sets a new owner, else ""
--
-- The record, its index and its holder key share a TTL, which ends when
-- the header says. A record in flight gets one that ends a retention
-- and a minute after its lease, and a settled one a retention and a
-- minute after it settled: a settle before the lease ends, every
-- execution's, leaves the TTL as it is.
--
-- It returns {"applied", attached, lease_until}, {"stale", record},
-- {"conflict", record}, {"ok", record} or {"notfound"}.
local function update(KEYS, ARGV)
  local id = ARGV[2]
  local k, h = find(KEYS, id, #ARGV[5])
  if not k then return {'notfound'} end
  local new = ARGV[7]
  local st, to = string.sub(h, 2, 2), string.sub(new, 2, 2)
  if st == 'v' and to == 'v' and ARGV[4] == '' then return {'ok', redis.call('GET', k)} end
  local refused = check(ARGV, h, st, to)
  if refused then return {refused, redis.call('GET', k)} end
  if ARGV[10] ~= '' then
    -- A new owner and its lease: the header is rewritten whole.
    local cur = redis.call('GET', k)
    local hl = lens(cur)
    redis.call('SET', k, string.sub(ARGV[10], 1, 68) .. ARGV[9] .. string.sub(cur, 82, 91) .. string.sub(ARGV[10], 92) ..
      string.sub(cur, hl + 1) .. ARGV[8], 'KEEPTTL')
    expire_at(k, KEYS, id, ARGV[9])
    publish(ARGV, h, st, to)
    return {'applied', string.sub(cur, 82, 91), string.sub(new, 11, 29)}
  end
  local lease = string.sub(h, 11, 29)
  local ku = string.sub(h, 69, 81)
  if ARGV[9] ~= '' and (ku == Z13 or ARGV[9] > ku) then
    expire_at(k, KEYS, id, ARGV[9])
    redis.call('SETRANGE', k, 68, ARGV[9])
  end
  if INFLIGHT[to] then
    redis.call('SETRANGE', k, 0, string.sub(new, 1, 10))
    redis.call('SETRANGE', k, 29, string.sub(new, 30, 68))
  else
    lease = Z19
    redis.call('SETRANGE', k, 0, new)
  end
  redis.call('APPEND', k, ARGV[8])
  publish(ARGV, h, st, to)
  return {'applied', string.sub(h, 82, 91), lease}
end

-- batch runs the steps of many records in one call, each as reserve or
-- update runs it alone. ARGV holds, for each record in turn, "r" and
-- reserve's nine arguments, or "u" and update's ten; KEYS, its two keys
-- or three. It returns each record's reply in order: a step that fails
-- gets an error reply, and its writes before the error stay, as alone.
local function batch(KEYS, ARGV)
  local out, i, j = {}, 1, 1
  while i <= #ARGV do
    local f, nk, na = reserve, 2, 9
    if ARGV[i] == 'u' then f, nk, na = update, 3, 10 end
    local ok, r = pcall(f, {unpack(KEYS, j, j + nk - 1)}, {unpack(ARGV, i + 1, i + na)})
    if not ok and type(r) ~= 'table' then r = redis.error_reply(tostring(r)) end
    out[#out + 1] = r
    i, j = i + 1 + na, j + nk
  end
  return out
end

redis.register_function('reserve', reserve)
redis.register_function('update', update)
redis.register_function('batch', batch)
`
