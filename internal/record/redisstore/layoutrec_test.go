package redisstore_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
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

// oneString runs the one-string layout's functions, from a library of
// its own, loaded for the benchmark and deleted after it.
type oneString struct {
	reserve, update, batch string // the functions' names
}

func loadOneString(b testing.TB, raw *redis.Client) oneString {
	buf := make([]byte, 6)
	_, _ = rand.Read(buf)
	name := "mcpi_layoutbench_" + hex.EncodeToString(buf)
	code := strings.ReplaceAll(oneStringLib(name), "register_function('", "register_function('"+name+"_")
	if err := raw.FunctionLoad(b.Context(), code).Err(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := raw.FunctionDelete(context.Background(), name).Err(); err != nil {
			b.Errorf("deleting the library %s: %v", name, err)
		}
	})
	return oneString{reserve: name + "_reserve", update: name + "_update", batch: name + "_batch"}
}

// oneStringExec is one new execution in the layout, as its client keeps
// it: its copy of the record, and the reply it waits for.
type oneStringExec struct {
	fns    oneString
	prefix string
	apart  bool // full-string: the record at its own key, the holder key apart
	bare   bool // full-holder-bare: reserved with two commands, no script
	id     string
	key    string
	tag    string
	owner  string
	fp     string

	state     record.State
	version   int
	attempts  int
	lease     time.Time
	expires   time.Time
	retention time.Duration
	keysUntil int64 // unix ms
	attached  int64

	// batched says which steps go in their batch's one call of the batch
	// function (full-holder-batched), not in a call of their own.
	batched  [3]bool
	leaseFor time.Duration // the reservation's lease
	replace  string        // the states the reservation replaces, as ",a,b,"
	cmd      *redis.Cmd
	reply    any              // the reply of a step sent in a batch call
	claim    *redis.StatusCmd // full-holder-bare's reservation
	index    *redis.StatusCmd
}

func newOneStringExec(fns oneString, prefix string, apart bool) *oneStringExec {
	id := record.NewID(time.Now())
	sum := sha256.Sum256([]byte(id))
	return &oneStringExec{fns: fns, prefix: prefix, apart: apart, id: id, key: id,
		tag: hex.EncodeToString(sum[:16]), owner: "bench", fp: id, retention: time.Hour,
		leaseFor: time.Minute, replace: ","}
}

// pad appends n in exactly w decimal digits.
func pad(b []byte, n int64, w int) []byte {
	var d [20]byte
	s := strconv.AppendInt(d[:0], n, 10)
	for range w - len(s) {
		b = append(b, '0')
	}
	return append(b, s...)
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// header writes e's header.
func (e *oneStringExec) header() string {
	b := make([]byte, 0, hdrFixed+len(e.id)+len(e.owner)+len(e.fp))
	b = append(b, '1', stateCode[e.state])
	b = pad(b, int64(e.version), 4)
	b = pad(b, int64(e.attempts), 4)
	b = pad(b, unixNano(e.lease), 19)
	b = pad(b, unixNano(e.expires), 19)
	b = pad(b, int64(e.retention), 19)
	b = append(b, '-')
	b = pad(b, e.keysUntil, 13)
	b = pad(b, e.attached, 10)
	b = pad(b, int64(len(e.id)), 3)
	b = pad(b, int64(len(e.owner)), 3)
	b = pad(b, int64(len(e.fp)), 3)
	b = append(b, e.id...)
	b = append(b, e.owner...)
	b = append(b, e.fp...)
	return string(b)
}

// chunk appends a chunk of kind c holding the JSON j.
func chunk(b []byte, c byte, j []byte) []byte {
	b = append(b, c)
	b = pad(b, int64(len(j)), 6)
	return append(b, j...)
}

// transition appends a chunk of a transition to s at at.
func transition(b []byte, s record.State, at time.Time) []byte {
	var j [64]byte
	t := append(j[:0], `["`...)
	t = append(t, s...)
	t = append(t, `","`...)
	t = strconv.AppendInt(t, at.UnixNano(), 10)
	t = append(t, `",""]`...)
	return chunk(b, 't', t)
}

// fixed appends the chunk of e's fields that never change.
func (e *oneStringExec) fixed(b []byte) []byte {
	j := []byte{'{'}
	for i, f := range [...][2]string{{"key", e.key}, {"actor", ""}, {"scope", ""}, {"upstream", ""}, {"tool", "charge_card"}} {
		if i > 0 {
			j = append(j, ',')
		}
		j = strconv.AppendQuote(append(strconv.AppendQuote(j, f[0]), ':'), f[1])
	}
	return chunk(b, 'b', append(j, '}'))
}

func (e *oneStringExec) holderKey() string { return e.prefix + "{" + e.tag + "}:k" }
func (e *oneStringExec) recordKey() string { return e.prefix + "{" + e.tag + "}:r:" + e.id }
func (e *oneStringExec) indexKey() string  { return e.prefix + "i:" + e.id }

// queue queues step's script on p: 0, the reservation with its dispatch;
// 1, completed, fenced to its owner; 2, delivered, from completed, as
// the proxy makes them.
func (e *oneStringExec) queue(ctx context.Context, p redis.Pipeliner, step int) {
	at := time.Now()
	if step == 0 {
		e.state, e.version, e.attempts = record.Dispatched, 2, 1
		e.lease = at.Add(e.leaseFor)
		ttl := e.retention + time.Minute + e.lease.Sub(at)
		e.keysUntil = at.Add(ttl).UnixMilli()
		body := transition(e.fixed(nil), record.Accepted, at)
		body = transition(body, record.Dispatched, at)
		if e.bare {
			e.cmd = nil
			e.claim = p.SetArgs(ctx, e.holderKey(), e.header()+string(body), redis.SetArgs{Mode: "NX", Get: true, TTL: ttl})
			e.index = p.SetArgs(ctx, e.indexKey(), e.tag, redis.SetArgs{Mode: "NX", TTL: ttl})
			return
		}
		holds := ""
		if e.apart {
			holds = e.id
		}
		e.send(ctx, p, step, []string{e.holderKey(), e.indexKey()},
			string(pad(nil, at.UnixNano(), 19)), e.prefix+"settled", e.prefix+"{"+e.tag+"}:r:", e.replace, e.fp,
			e.header()+string(body), ttl.Milliseconds(), e.tag, holds)
		return
	}
	to, from, holder := record.Completed, "", e.owner
	var chunks []byte
	if step == 1 {
		chunks = chunk(nil, 'r', recordtest.ExecutionResult)
	} else {
		to, from, holder = record.Delivered, string(stateCode[record.Completed]), ""
	}
	chunks = transition(chunks, to, at)
	known := string(pad(nil, int64(e.version), 4))
	e.state, e.version = to, e.version+1
	e.lease, e.expires = time.Time{}, at.Add(e.retention)
	end := string(pad(nil, at.Add(e.retention+time.Minute).UnixMilli(), 13))
	keys := []string{e.holderKey(), e.recordKey(), e.indexKey()}
	if e.apart {
		keys = []string{e.recordKey(), e.recordKey(), e.indexKey(), e.holderKey()}
	}
	e.send(ctx, p, step, keys, e.prefix+"settled", e.id, known, from, holder, "",
		e.header()[:68], string(chunks), end, "")
}

// send queues step's function on p, or, if step is batched, adds its
// keys and arguments to p's batch call (a oneStringBatch).
func (e *oneStringExec) send(ctx context.Context, p redis.Pipeliner, step int, keys []string, args ...any) {
	fn, kind := e.fns.reserve, "r"
	if step > 0 {
		fn, kind = e.fns.update, "u"
	}
	if !e.batched[step] {
		e.cmd = p.FCall(ctx, fn, keys, args...)
		return
	}
	bp := p.(*oneStringBatch)
	e.cmd, e.reply = nil, nil
	bp.keys = append(bp.keys, keys...)
	bp.args = append(append(bp.args, kind), args...)
	bp.in = append(bp.in, e)
}

// oneStringBatch is a pipeline that also gathers the steps of executions
// batched for them into one call of the batch function.
type oneStringBatch struct {
	redis.Pipeliner
	keys []string
	args []any
	in   []*oneStringExec // the executions whose steps the call makes
}

// exec sends the pipeline, the batch call last, and gives each
// execution in that call its reply.
func (p *oneStringBatch) exec(ctx context.Context) error {
	var cmd *redis.Cmd
	if len(p.in) > 0 {
		cmd = p.FCall(ctx, p.in[0].fns.batch, p.keys, p.args...)
	}
	_, err := p.Exec(ctx)
	if cmd == nil {
		return err
	}
	v, cerr := cmd.Slice()
	for i, e := range p.in {
		switch {
		case cerr != nil:
			e.reply = cerr
		case i < len(v):
			e.reply = v[i]
		default:
			e.reply = fmt.Errorf("batch call: %d replies for %d steps", len(v), len(p.in))
		}
	}
	p.keys, p.args, p.in = p.keys[:0], p.args[:0], p.in[:0]
	return err
}

// result returns the reply of the step last sent.
func (e *oneStringExec) result() ([]any, error) {
	if e.cmd != nil {
		return e.cmd.Slice()
	}
	switch r := e.reply.(type) {
	case []any:
		return r, nil
	case error:
		return nil, r
	}
	return nil, fmt.Errorf("reply %v (%T)", e.reply, e.reply)
}

// done reads the reply of the step queue sent.
func (e *oneStringExec) done(step int) error {
	if step == 0 && e.bare {
		// A holder found (rare) would be settled, replaced or matched
		// by the reserve function, in a second round trip that also
		// deletes the index written if this one lost.
		if err := e.claim.Err(); !errors.Is(err, redis.Nil) {
			return fmt.Errorf("reserving %s: a holder (%v)", e.id, err)
		}
		return e.index.Err()
	}
	v, err := e.result()
	if err != nil {
		return err
	}
	if step == 0 {
		if won, _ := v[0].(int64); won != 1 {
			return fmt.Errorf("reserving %s: %v", e.id, v)
		}
		return nil
	}
	if len(v) != 3 || v[0] != "applied" {
		return fmt.Errorf("updating %s: %v", e.id, v)
	}
	attached, _ := v[1].(string)
	if e.attached, err = strconv.ParseInt(attached, 10, 64); err != nil {
		return err
	}
	return nil
}

// TestOneStringLayout runs the one-string layout's functions through
// each of their paths, so that BenchmarkLayout measures a layout that
// works.
func TestOneStringLayout(t *testing.T) {
	for _, c := range []struct {
		name           string
		apart, batched bool
	}{{"holder", false, false}, {"string", true, false}, {"holder-batched", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			testOneString(t, c.apart, c.batched)
		})
	}
}

// testOneString runs the paths of the layout apart or not, each step
// sent in a call of its own or, if batched, through the batch function.
func testOneString(t *testing.T, apart, batched bool) {
	url := serverURL(t)
	raw := rawClient(t, url)
	prefix := newPrefix(t, url)
	ctx := t.Context()
	fns := loadOneString(t, raw)
	// send sends e's step alone.
	send := func(e *oneStringExec, n int) {
		t.Helper()
		p := &oneStringBatch{Pipeliner: raw.Pipeline()}
		e.queue(ctx, p, n)
		if err := p.exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// step sends e's step alone and returns its reply.
	step := func(e *oneStringExec, n int) []any {
		t.Helper()
		send(e, n)
		v, err := e.result()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	stored := func(e *oneStringExec) string {
		t.Helper()
		k := e.recordKey()
		if !apart && raw.Get(ctx, e.holderKey()).Val()[hdrFixed:hdrFixed+len(e.id)] == e.id {
			k = e.holderKey()
		}
		return raw.Get(ctx, k).Val()
	}
	newExec := func() *oneStringExec {
		e := newOneStringExec(fns, prefix, apart)
		e.batched = [3]bool{batched, batched, batched}
		return e
	}

	// A new execution.
	e := newExec()
	for n := range 3 {
		step(e, n)
		if err := e.done(n); err != nil {
			t.Fatalf("step %d: %v", n, err)
		}
	}
	got := stored(e)
	if got[:10] != "1v00040001" || got[10:29] != strings.Repeat("0", 19) {
		t.Errorf("delivered: header %q, want delivered, version 4, 1 attempt, no lease", got[:100])
	}
	log := got[hdrFixed+len(e.id)+len(e.owner)+len(e.fp):]
	var kinds string
	for len(log) > 0 {
		n, err := strconv.Atoi(log[1:7])
		if err != nil {
			t.Fatalf("log %q: %v", log, err)
		}
		kinds, log = kinds+log[:1], log[7+n:]
	}
	if kinds != "bttrtt" {
		t.Errorf("log chunks %q, want bttrtt", kinds)
	}
	if tag := raw.Get(ctx, e.indexKey()).Val(); tag != e.tag {
		t.Errorf("index: %q, want %q", tag, e.tag)
	}
	for _, k := range []string{e.holderKey(), e.indexKey()} {
		if ttl := raw.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("%s: TTL %v", k, ttl)
		}
	}

	// The same key again: the record holds it.
	again := newExec()
	again.key, again.tag, again.fp = e.key, e.tag, e.fp
	if v := step(again, 0); v[0] != int64(0) || v[2] != got {
		t.Errorf("reserving a held key: %v, want 0 and the holder", v)
	}
	// The same key, delivered replaceable: a new record holds it, and
	// the one replaced is still found by its id.
	again.replace = ",v,"
	if v := step(again, 0); v[0] != int64(1) {
		t.Errorf("reserving a replaceable key: %v, want 1", v)
	}
	if s := stored(e); s != got {
		t.Errorf("the record replaced: %q, want %q", s, got)
	}
	// The same id again: taken.
	again.key, again.tag = "other", "0123"
	if v := step(again, 0); v[0] != int64(-1) {
		t.Errorf("reserving an id taken: %v, want -1", v)
	}

	// Fenced to another owner, from another state, at another version.
	f := newExec()
	step(f, 0)
	f.owner = "another"
	if v := step(f, 1); v[0] != "conflict" {
		t.Errorf("completing fenced to another owner: %v, want conflict", v[0])
	}
	f.owner, f.version = "bench", 2
	send(f, 2) // delivered from completed, while dispatched
	if v, _ := f.result(); v[0] != "conflict" {
		t.Errorf("delivering from completed a dispatched record: %v, want conflict", v[0])
	}
	f.version = 7
	if v := step(f, 1); v[0] != "stale" {
		t.Errorf("completing at another version: %v, want stale", v[0])
	}
	// An id no record has.
	g := newExec()
	g.version = 2
	if v := step(g, 1); v[0] != "notfound" {
		t.Errorf("completing an unknown id: %v, want notfound", v[0])
	}

	// An orphan: its lease lapsed, and the next reservation settles it.
	o := newExec()
	o.leaseFor = -time.Second
	step(o, 0)
	next := newExec()
	next.key, next.tag, next.fp = o.key, o.tag, o.fp
	v := step(next, 0)
	if v[0] != int64(0) || v[1] != o.id {
		t.Fatalf("reserving an orphan's key: %v, want 0 and the orphan settled", v)
	}
	if s, _ := v[2].(string); s[:6] != "1u0003" || !strings.Contains(s, "went away") {
		t.Errorf("the orphan settled: %q, want unknown, version 3, the note", s)
	}
}

// TestOneStringBatch sends the steps of several records in one call of
// the batch function, beside a step in a call of its own: each record
// gets its own reply, and one whose step fails does not fail the rest.
func TestOneStringBatch(t *testing.T) {
	url := serverURL(t)
	raw := rawClient(t, url)
	prefix := newPrefix(t, url)
	ctx := t.Context()
	fns := loadOneString(t, raw)
	newExec := func(batched [3]bool) *oneStringExec {
		e := newOneStringExec(fns, prefix, false)
		e.batched = batched
		return e
	}
	all := [3]bool{true, true, true}
	a, b, bad, c := newExec(all), newExec(all), newExec(all), newExec(all)
	d := newExec([3]bool{false, false, true}) // delivered batched only
	// bad's holder key holds a hash: its reservation fails (WRONGTYPE).
	if err := raw.HSet(ctx, bad.holderKey(), "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	type job struct {
		e    *oneStringExec
		step int
	}
	run := func(jobs ...job) {
		t.Helper()
		p := &oneStringBatch{Pipeliner: raw.Pipeline()}
		for _, j := range jobs {
			j.e.queue(ctx, p, j.step)
		}
		if err := p.exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	done := func(name string, e *oneStringExec, step int) {
		t.Helper()
		if err := e.done(step); err != nil {
			t.Errorf("%s, step %d: %v", name, step, err)
		}
	}

	run(job{a, 0})
	done("a", a, 0)
	run(job{a, 1}, job{b, 0}, job{d, 0}, job{bad, 0}, job{c, 0})
	done("a", a, 1)
	done("b", b, 0)
	done("d", d, 0)
	done("c", c, 0)
	if err := bad.done(0); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("reserving at a hash: %v, want WRONGTYPE", err)
	}
	run(job{a, 2}, job{b, 1}, job{c, 1}, job{d, 1})
	for _, j := range []job{{a, 2}, {b, 1}, {c, 1}, {d, 1}} {
		done(j.e.id, j.e, j.step)
	}
	run(job{b, 2}, job{c, 2}, job{d, 2})
	for _, e := range []*oneStringExec{a, b, c, d} {
		done(e.id, e, 2)
		if h := raw.GetRange(ctx, e.holderKey(), 0, 9).Val(); h != "1v00040001" {
			t.Errorf("%s: header %q, want delivered, version 4, 1 attempt", e.id, h)
		}
	}
}
