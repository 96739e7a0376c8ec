package memstore

import (
	"encoding/binary"
	"encoding/hex"
	"slices"
	"time"
	"unsafe"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// A record that has left the live states is kept packed: encoded into one
// byte slice, which holds no pointers, so a collection marks it without
// reading it. The store keeps such records for their whole retention, a
// day by default, and a collector that walked each one's strings, history
// and result on every cycle took 18% of a new execution's CPU.
//
// The layout: a fixed header (state, flags, expiry), read without decoding
// the rest; the id and the key, each a uvarint length and its bytes (a
// hex key's, the bytes it stands for); the fingerprint if it is not the
// key; the number of the strings the record
// shares with others (common.go); the numbers; the history; the result
// and the error.
const (
	offState   = 0 // a state code (stateCode)
	offFlags   = 1
	offExpires = 2 // the expiry in Unix nanoseconds, 8 bytes little-endian
	offZone    = 10
	headerLen  = 11
)

// Flags.
const (
	// fingerprintIsKey: the key is the fingerprint, as for every call
	// without a client key, and is written once.
	fingerprintIsKey = 1 << iota
	// hexKey: the key is lowercase hex, as a fingerprint is, and is
	// written as the hexKeyLen bytes it stands for.
	hexKey
)

// hexKeyLen is the length of a fingerprint, in bytes (SHA-256).
const hexKeyLen = 32

// Time zones a packed time is decoded into. A packed time keeps its
// instant and whether it was in UTC; its monotonic reading goes, which
// only the live states' leases need.
const (
	zoneZero  = 0 // the zero time
	zoneUTC   = 1
	zoneLocal = 2
)

// otherState is the code of a state outside record.States, whose name
// follows the code.
const otherState = 255

// decided marks the code of a transition that names a decision: its By
// and Via follow its note, as they do a transition of otherState. The
// codes of record.States are far below it.
const decided = 0x80

// pack appends r, all but its Attached count, to b. cid is the id of r's
// common.
func pack(b []byte, r *record.Record, cid uint32) []byte {
	var flags byte
	if r.Fingerprint == r.Key {
		flags |= fingerprintIsKey
	}
	start, state := len(b), stateCode(r.State)
	b = append(b, state, 0) // the flags, once the key is read
	b = binary.LittleEndian.AppendUint64(b, uint64(unixNano(r.ExpiresAt)))
	b = append(b, zoneOf(r.ExpiresAt))
	b = appendString(b, r.ID)
	// The key is checked and decoded in one pass, not two.
	if raw, ok := unhexKey(r.Key); ok {
		flags |= hexKey
		b = append(append(b, hexKeyLen), raw[:]...)
	} else {
		b = appendString(b, r.Key)
	}
	b[start+offFlags] = flags
	if flags&fingerprintIsKey == 0 {
		b = appendString(b, r.Fingerprint)
	}
	if state == otherState {
		b = appendString(b, string(r.State))
	}
	b = binary.AppendUvarint(b, uint64(cid))
	b = binary.AppendVarint(b, int64(r.Attempts))
	b = binary.AppendVarint(b, int64(r.Retention))
	b, _ = appendTime(b, r.LeaseUntil, 0)
	b = binary.AppendUvarint(b, uint64(len(r.History)))
	var prev int64
	for i := range r.History {
		tr := &r.History[i] // not copied: a transition is 88 bytes
		code := stateCode(tr.State)
		decision := code == otherState || tr.By != "" || tr.Via != ""
		if decision && code != otherState {
			code |= decided
		}
		b = append(b, code)
		if code == otherState {
			b = appendString(b, string(tr.State))
		}
		// Each time as the difference from the one before: a few bytes.
		b, prev = appendTime(b, tr.At, prev)
		b = appendString(b, tr.Note)
		if decision {
			b = appendString(appendString(b, tr.By), tr.Via)
		}
	}
	b = appendBytes(b, r.Result)
	return appendBytes(b, r.Error)
}

// packedState returns the state of the packed record p.
func packedState(p []byte) record.State {
	if c := p[offState]; c != otherState {
		return record.States[c]
	}
	d := decoder{p: p, off: headerLen}
	d.skip() // the id
	d.skip() // the key
	if p[offFlags]&fingerprintIsKey == 0 {
		d.skip()
	}
	return record.State(d.string())
}

// packedExpires returns the expiry of the packed record p, in Unix
// nanoseconds.
func packedExpires(p []byte) int64 {
	return int64(binary.LittleEndian.Uint64(p[offExpires:]))
}

// packedCommon returns the id of the common of the packed record p.
func packedCommon(p []byte) uint32 {
	d := decoder{p: p, off: headerLen}
	d.skip() // the id
	d.skip() // the key
	if p[offFlags]&fingerprintIsKey == 0 {
		d.skip()
	}
	d.state(p[offState])
	return uint32(d.uvarint())
}

// packedID returns the id of the packed record p, which shares p's bytes.
func packedID(p []byte) string {
	d := decoder{p: p, off: headerLen}
	return d.string()
}

// packedKey appends the key of the packed record p to b.
func packedKey(b, p []byte) []byte {
	d := decoder{p: p, off: headerLen}
	d.skip() // the id
	if p[offFlags]&hexKey != 0 {
		return hex.AppendEncode(b, d.raw())
	}
	return append(b, d.string()...)
}

// packedKeyIs reports whether key is the key of the packed record p.
func packedKeyIs(p []byte, key string) bool {
	d := decoder{p: p, off: headerLen}
	d.skip() // the id
	if p[offFlags]&hexKey == 0 {
		return d.string() == key
	}
	raw := d.raw()
	if len(key) != 2*len(raw) {
		return false
	}
	const digits = "0123456789abcdef"
	for i, c := range raw {
		if key[2*i] != digits[c>>4] || key[2*i+1] != digits[c&15] {
			return false
		}
	}
	return true
}

// unhexKey returns the bytes the hex digits of key stand for, and
// whether key is a fingerprint: 2*hexKeyLen lowercase hex digits, which
// decode and encode back to it. It reads eight digits at a time, as
// scanEscapedString does in jsonrpc: a table lookup a digit cost a new
// execution about 550 instructions, and one a pair about 565, to this
// 430.
func unhexKey(key string) (out [hexKeyLen]byte, ok bool) {
	if len(key) != 2*hexKeyLen {
		return out, false
	}
	const (
		ones  = 0x0101010101010101
		highs = ones * 0x80
	)
	// The high bit of each byte stays set while every digit read is
	// one: between clears it for a byte that is not in range, and for
	// any with its own high bit set. Checked once, at the end: a key
	// is all but always a fingerprint.
	valid := uint64(highs)
	for i := range hexKeyLen / 4 {
		x := binary.LittleEndian.Uint64(unsafe.Slice(unsafe.StringData(key[8*i:]), 8))
		valid &= between(x, '0'-1, '9'+1) | between(x, 'a'-1, 'f'+1)
		// Each byte's value: its low nibble, and 9 more for a letter
		// (0x61 to 0x66 have bit 6 set; the digits do not).
		v := x&(ones*0x0f) + (x>>6)&ones*9
		// Each pair, first digit high: in byte 2k, v[2k]<<4 | v[2k+1];
		// then the four pairs' bytes brought together.
		w := (v<<4 | v>>8) & 0x00ff00ff00ff00ff
		w = (w | w>>8) & 0x0000ffff0000ffff
		binary.LittleEndian.PutUint32(out[4*i:], uint32(w|w>>16))
	}
	return out, valid == highs
}

// between returns a mask with the high bit set in each byte of x that is
// above m and below n, and clear in every other: Bit Twiddling Hacks'
// "hasbetween", exact byte by byte for m and n at most 0x7f and 0x80.
// A byte of x at 0x80 or above is clear, by the &^ x.
func between(x, m, n uint64) uint64 {
	const (
		ones = 0x0101010101010101
		low7 = ones * 0x7f
	)
	return (ones*(127+n) - x&low7) &^ x & (x&low7 + ones*(127-m)) & (ones * 0x80)
}

// unpacked is a record decoded with room for its history and its key, so
// that decoding the common life makes one allocation.
type unpacked struct {
	rec     record.Record
	history [commonLife]record.Transition
	key     [2 * hexKeyLen]byte
}

// unpack decodes the packed record p, whose Attached count is attached,
// and whose common is in c. The record's strings and bytes share p's,
// which is never changed, as none of a record handed out may be
// (record.Store).
func unpack(p []byte, attached int, c *commons) *record.Record {
	u := new(unpacked)
	r := &u.rec
	d := decoder{p: p, off: headerLen}
	r.ID = d.string()
	if p[offFlags]&hexKey != 0 {
		hex.Encode(u.key[:], d.raw())
		r.Key = unsafe.String(&u.key[0], len(u.key)) // u is never changed
	} else {
		r.Key = d.string()
	}
	r.Fingerprint = r.Key
	if p[offFlags]&fingerprintIsKey == 0 {
		r.Fingerprint = d.string()
	}
	r.State = d.state(p[offState])
	r.ExpiresAt = timeOf(p[offZone], packedExpires(p))
	cm := c.get(uint32(d.uvarint()))
	r.Actor, r.Scope, r.Upstream, r.Tool, r.Owner = cm.actor, cm.scope, cm.upstream, cm.tool, cm.owner
	r.Attempts = int(d.varint())
	r.Retention = time.Duration(d.varint())
	r.LeaseUntil, _ = d.time(0)
	r.Attached = attached
	n := int(d.uvarint())
	if n > 0 {
		r.History = u.history[:0:min(n, commonLife)]
	}
	var prev int64
	for range n {
		var tr record.Transition
		code := d.byte()
		if c := code; c == otherState {
			tr.State = d.state(c)
		} else {
			tr.State = d.state(c &^ decided)
		}
		tr.At, prev = d.time(prev)
		tr.Note = d.string()
		if code&decided != 0 {
			tr.By, tr.Via = d.string(), d.string()
		}
		r.History = append(r.History, tr)
	}
	r.Result, r.Error = d.bytes(), d.bytes()
	// A version made from this one appends to its own history, never
	// into room this one has past its end.
	r.History = slices.Clip(r.History)
	return r
}

// stateCode returns st's index in record.States, or otherState. The
// states there are matched by a switch first: a record packed is five
// states, and a loop of string comparisons cost about 350 instructions
// a new execution (TestStateCode keeps the two in step).
func stateCode(st record.State) byte {
	switch st {
	case record.Accepted:
		return 0
	case record.Dispatched:
		return 1
	case record.Completed:
		return 2
	case record.Delivered:
		return 3
	case record.Failed:
		return 4
	case record.Unknown:
		return 5
	case record.Authorized:
		return 6
	case record.Refused:
		return 7
	}
	for i, s := range record.States {
		if s == st {
			return byte(i)
		}
	}
	return otherState
}

func zoneOf(t time.Time) byte {
	switch {
	case t.IsZero():
		return zoneZero
	case t.Location() == time.UTC:
		return zoneUTC
	}
	return zoneLocal
}

// unixNano returns t in Unix nanoseconds, and 0 for the zero time, whose
// own is out of range.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func timeOf(zone byte, ns int64) time.Time {
	switch zone {
	case zoneZero:
		return time.Time{}
	case zoneUTC:
		return time.Unix(0, ns).UTC()
	}
	return time.Unix(0, ns)
}

// appendTime appends t's zone and, unless t is zero, its difference from
// base in nanoseconds, or with no base (0) t in Unix nanoseconds, in
// eight bytes: fewer than its varint's nine, and one store. It returns t
// in Unix nanoseconds too (0 for the zero time), the base of the next,
// read once.
func appendTime(b []byte, t time.Time, base int64) ([]byte, int64) {
	zone := zoneOf(t)
	b = append(b, zone)
	if zone == zoneZero {
		return b, 0
	}
	ns := t.UnixNano()
	if base == 0 {
		return binary.LittleEndian.AppendUint64(b, uint64(ns)), ns
	}
	return binary.AppendVarint(b, ns-base), ns
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendBytes appends v, telling nil from empty: a record without an
// error has a nil Error.
func appendBytes(b, v []byte) []byte {
	if v == nil {
		return append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(v))+1)
	return append(b, v...)
}

// A decoder reads a packed record. The store wrote it, so it is well
// formed: a bad one is a bug, and indexing past its end panics.
type decoder struct {
	p   []byte
	off int
}

func (d *decoder) byte() byte {
	c := d.p[d.off]
	d.off++
	return c
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.p[d.off:])
	d.off += n
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.p[d.off:])
	d.off += n
	return v
}

// string returns the next string, sharing d.p's bytes: they are never
// written again, which is what makes that sound.
func (d *decoder) string() string {
	n := int(d.uvarint())
	if n == 0 {
		return ""
	}
	s := unsafe.String(&d.p[d.off], n)
	d.off += n
	return s
}

func (d *decoder) skip() { d.off += int(d.uvarint()) }

// raw returns the next string's bytes.
func (d *decoder) raw() []byte {
	n := int(d.uvarint())
	v := d.p[d.off : d.off+n : d.off+n]
	d.off += n
	return v
}

func (d *decoder) bytes() []byte {
	n := int(d.uvarint())
	if n == 0 {
		return nil
	}
	n--
	v := d.p[d.off : d.off+n : d.off+n]
	d.off += n
	return v
}

func (d *decoder) state(code byte) record.State {
	if code == otherState {
		return record.State(d.string())
	}
	return record.States[code]
}

// time reads a time written by appendTime against base, and returns it
// with the base for the next.
func (d *decoder) time(base int64) (time.Time, int64) {
	zone := d.byte()
	if zone == zoneZero {
		return time.Time{}, 0
	}
	var ns int64
	if base == 0 {
		ns = int64(binary.LittleEndian.Uint64(d.p[d.off:]))
		d.off += 8
	} else {
		ns = base + d.varint()
	}
	return timeOf(zone, ns), ns
}
