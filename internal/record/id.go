package record

import (
	"encoding/binary"
	"math"
	"math/bits"
	mrand "math/rand/v2"
	"sync"
	"time"
)

// idPrefix starts every execution id.
const idPrefix = "exe_"

// An id is idPrefix and a ULID in its text form: 10 characters of the
// millisecond (48 bits), then 16 of the 80 random bits, five bits a
// character in Crockford's base32, so ids sort by creation time.
const (
	idLen      = len(idPrefix) + 26
	maxIDTime  = 1<<48 - 1
	idAlphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
)

// NewID returns a fresh execution id made at t: "exe_" and a ULID, so ids
// sort by creation time, and ids made one after another in one process
// sort as they were made.
func NewID(t time.Time) string {
	ms := idTime(t)
	hi, lo := ids.next(ms)
	b := idText(ms, hi, lo)
	return string(b[:])
}

// IDFloor returns the smallest execution id a record accepted at t can
// have: ids are ULIDs, which sort by their time, so records accepted at or
// after t are those whose id is at least IDFloor(t).
func IDFloor(t time.Time) string {
	b := idText(idTime(t), 0, 0)
	return string(b[:])
}

// idTime returns the millisecond of t that an id holds: 0 for one out of
// range, as a clock that far off is a test's; the id stays unique.
func idTime(t time.Time) uint64 {
	ms := t.UnixMilli()
	if ms < 0 || ms > maxIDTime {
		return 0
	}
	return uint64(ms)
}

// idText returns the id of millisecond ms and random bits hi, lo. Its
// base32 text is written two characters a lookup (base32Pairs), where
// ulid's MarshalTextTo works out each character from the ULID's bytes:
// about 200 instructions an id.
func idText(ms uint64, hi uint16, lo uint64) [idLen]byte {
	var b [idLen]byte
	copy(b[:], idPrefix)
	put8Base32(b[4:12], ms>>10)
	binary.BigEndian.PutUint16(b[12:14], base32Pairs[ms&1023])
	put8Base32(b[14:22], uint64(hi)<<24|lo>>40)
	put8Base32(b[22:30], lo)
	return b
}

// put8Base32 writes the low 40 bits of v into dst as eight characters,
// the highest first, in one store.
func put8Base32(dst []byte, v uint64) {
	binary.BigEndian.PutUint64(dst, uint64(base32Pairs[v>>30&1023])<<48|uint64(base32Pairs[v>>20&1023])<<32|
		uint64(base32Pairs[v>>10&1023])<<16|uint64(base32Pairs[v&1023]))
}

// base32Pairs holds the two characters of each 10 bits, the first in the
// high byte.
var base32Pairs = func() (t [1024]uint16) {
	for i := range t {
		t[i] = uint16(idAlphabet[i>>5])<<8 | uint16(idAlphabet[i&31])
	}
	return t
}()

// ids makes the 80 random bits of execution ids as ulid.Monotonic does:
// random for a new millisecond, and within one the last plus a random
// step below 2^32, so ids made in one millisecond sort as they were made.
// It does ulid.New's work with ulid.DefaultEntropy without the
// allocation and the reads through interfaces that cost each new
// execution about 500 instructions; its randomness is math/rand/v2's,
// seeded by the runtime.
var ids monotonic

type monotonic struct {
	mu   sync.Mutex // guards the rest
	ms   uint64     // the millisecond of the last id; valid once used
	used bool
	hi   uint16 // the last id's random bits: 16 high,
	lo   uint64 // and 64 low
}

// next returns the random bits of the next id made in millisecond ms.
func (m *monotonic) next(ms uint64) (hi uint16, lo uint64) {
	m.mu.Lock()
	if m.used && m.ms == ms {
		lo, carry := bits.Add64(m.lo, 1+mrand.Uint64N(math.MaxUint32), 0)
		if hi := m.hi + uint16(carry); hi >= m.hi {
			m.hi, m.lo = hi, lo
			m.mu.Unlock()
			return hi, lo
		}
		// The 80 bits overflowed, which a millisecond's 2^48 ids at
		// the least would take: a fresh random start, as ulid.New
		// falls back to.
	}
	m.ms, m.used = ms, true
	m.hi, m.lo = uint16(mrand.Uint32()), mrand.Uint64()
	hi, lo = m.hi, m.lo
	m.mu.Unlock()
	return hi, lo
}
