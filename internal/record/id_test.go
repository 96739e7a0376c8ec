package record

import (
	"encoding/binary"
	mrand "math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

// TestNewID checks that ids are ULIDs of their time, and that ids made
// one after another sort as they were made, within one millisecond too.
func TestNewID(t *testing.T) {
	at := time.UnixMilli(1_790_000_000_123)
	prev := ""
	for i := range 10000 {
		now := at.Add(time.Duration(i/1000) * time.Millisecond)
		id := NewID(now)
		u, err := ulid.ParseStrict(strings.TrimPrefix(id, idPrefix))
		if !strings.HasPrefix(id, idPrefix) || err != nil {
			t.Fatalf("NewID = %q, not %s and a ULID: %v", id, idPrefix, err)
		}
		if u.Time() != uint64(now.UnixMilli()) {
			t.Fatalf("NewID(%v) = %q, of time %d", now, id, u.Time())
		}
		if id <= prev {
			t.Fatalf("NewID = %q after %q", id, prev)
		}
		prev = id
	}
	if id := NewID(time.UnixMilli(-5)); !strings.HasPrefix(id, idPrefix+"0000000000") {
		t.Errorf("NewID before 1970 = %q, want time 0", id)
	}
}

// TestMonotonicOverflow checks that random bits at their top start
// afresh rather than wrap around to a smaller id.
func TestMonotonicOverflow(t *testing.T) {
	m := monotonic{ms: 7, used: true, hi: 0xffff, lo: ^uint64(0)}
	hi, lo := m.next(7)
	if m.ms != 7 || hi != m.hi || lo != m.lo {
		t.Fatalf("next = %x %x, state %d %x %x", hi, lo, m.ms, m.hi, m.lo)
	}
}

// TestIDText checks the base32 text against ulid's own for the edges of
// every part and for random values.
func TestIDText(t *testing.T) {
	type parts struct {
		ms uint64
		hi uint16
		lo uint64
	}
	cases := []parts{{0, 0, 0}, {maxIDTime, 0xffff, ^uint64(0)}, {1, 1, 1}, {maxIDTime, 0, 0}, {0, 0xffff, 0}, {0, 0, ^uint64(0)}}
	for range 1000 {
		cases = append(cases, parts{mrand.Uint64N(maxIDTime + 1), uint16(mrand.Uint32()), mrand.Uint64()})
	}
	for _, c := range cases {
		var u ulid.ULID
		if err := u.SetTime(c.ms); err != nil {
			t.Fatal(err)
		}
		binary.BigEndian.PutUint16(u[6:], c.hi)
		binary.BigEndian.PutUint64(u[8:], c.lo)
		got := idText(c.ms, c.hi, c.lo)
		if want := idPrefix + u.String(); string(got[:]) != want {
			t.Fatalf("idText(%d, %x, %x) = %s, want %s", c.ms, c.hi, c.lo, got, want)
		}
	}
}

// TestIDFloor checks that the floor of a time is the id of that time
// with no random bits, and that a time out of range has the floor of 0.
func TestIDFloor(t *testing.T) {
	at := time.UnixMilli(1_790_000_000_123)
	want := idPrefix + ulid.MustNew(ulid.Timestamp(at), zeros{}).String()
	if got := IDFloor(at.Add(999 * time.Microsecond)); got != want {
		t.Errorf("IDFloor = %s, want %s", got, want)
	}
	if id := NewID(at); IDFloor(at) > id || IDFloor(at.Add(time.Millisecond)) <= id {
		t.Errorf("NewID = %s, outside its millisecond's floors", id)
	}
	zero := idPrefix + "00000000000000000000000000"
	for _, out := range []time.Time{time.UnixMilli(-1), time.UnixMilli(maxIDTime + 1)} {
		if got := IDFloor(out); got != zero {
			t.Errorf("IDFloor(%v) = %s, want %s", out, got, zero)
		}
	}
}

// zeros is entropy of zero bits.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }
