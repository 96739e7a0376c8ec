package record

import (
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
