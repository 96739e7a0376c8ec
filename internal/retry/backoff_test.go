package retry

import (
	"math"
	mrand "math/rand"
	"math/rand/v2"
	"testing"
	"testing/quick"
	"time"
)

// fixed returns a Rand that always returns r.
func fixed(r float64) func() float64 { return func() float64 { return r } }

// seeded returns a deterministic Rand.
func seeded(seed uint64) func() float64 { return rand.New(rand.NewPCG(seed, 1)).Float64 }

// newMathRand returns the seeded math/rand source that testing/quick
// wants, so that property tests draw the same cases every run.
func newMathRand(seed int64) *mrand.Rand { return mrand.New(mrand.NewSource(seed)) }

// TestWaitValues pins the schedule with the random draw fixed at one half.
func TestWaitValues(t *testing.T) {
	b := Backoff{Base: 100 * time.Millisecond, Cap: time.Second, Rand: fixed(0.5)}
	tests := []struct {
		attempt    int
		retryAfter time.Duration
		want       time.Duration
	}{
		{-1, 0, 50 * time.Millisecond}, // a negative attempt counts as the first
		{0, 0, 50 * time.Millisecond},
		{1, 0, 100 * time.Millisecond},
		{2, 0, 200 * time.Millisecond},
		{3, 0, 400 * time.Millisecond},
		{4, 0, 500 * time.Millisecond}, // capped at 1s
		{62, 0, 500 * time.Millisecond},
		{63, 0, 500 * time.Millisecond},
		{1 << 30, 0, 500 * time.Millisecond}, // the shift must not overflow
		{math.MaxInt, 0, 500 * time.Millisecond},
		{0, 2 * time.Second, 2 * time.Second},               // Retry-After is a floor, above Cap too
		{3, 300 * time.Millisecond, 400 * time.Millisecond}, // a floor below the draw changes nothing
		{0, -time.Second, 50 * time.Millisecond},            // a negative floor is no floor
	}
	for _, tt := range tests {
		if got := b.Wait(tt.attempt, tt.retryAfter); got != tt.want {
			t.Errorf("Wait(%d, %v) = %v, want %v", tt.attempt, tt.retryAfter, got, tt.want)
		}
	}
}

// TestWaitBrokenRand checks that a Rand outside [0, 1), or the rounding of
// a draw just below 1, cannot push a wait outside [0, ceiling].
func TestWaitBrokenRand(t *testing.T) {
	for _, r := range []float64{math.Nextafter(1, 0), 1, 2, -1, math.NaN(), math.Inf(1), math.Inf(-1)} {
		b := Backoff{Base: time.Duration(math.MaxInt64), Cap: time.Duration(math.MaxInt64), Rand: fixed(r)}
		if got := b.Wait(0, 0); got < 0 {
			t.Errorf("with Rand returning %v, Wait = %v, want >= 0", r, got)
		}
		b = Backoff{Base: time.Second, Cap: time.Second, Rand: fixed(r)}
		if got := b.Wait(0, 0); got < 0 || got > time.Second {
			t.Errorf("with Rand returning %v, Wait = %v, want in [0, 1s]", r, got)
		}
	}
}

func TestWaitDefaults(t *testing.T) {
	var b Backoff // every field zero: the defaults, with math/rand/v2
	for attempt := range 20 {
		ceiling := min(DefaultCap, DefaultBase<<attempt)
		if got := b.Wait(attempt, 0); got < 0 || got > ceiling {
			t.Errorf("zero Backoff: Wait(%d, 0) = %v, want in [0, %v]", attempt, got, ceiling)
		}
	}
	if _, ok := b.Next(DefaultMaxAttempts-1, 0, time.Time{}, time.Time{}); ok {
		t.Errorf("zero Backoff: Next allowed attempt %d; the default is %d attempts", DefaultMaxAttempts+1, DefaultMaxAttempts)
	}
}

// TestWaitBounds is the property of full jitter: every wait is in
// [0, min(cap, base*2^n)] without Retry-After, and at least Retry-After
// with one.
func TestWaitBounds(t *testing.T) {
	prop := func(seed uint64, attempt uint8, base, cap, retryAfter uint32) bool {
		b := Backoff{
			Base: time.Duration(base) + 1, // zero would mean the default
			Cap:  time.Duration(cap) * time.Microsecond,
			Rand: seeded(seed),
		}
		if b.Cap <= 0 {
			b.Cap = 1
		}
		// The exact ceiling, in big enough arithmetic: float64 is exact
		// for these powers of two times a 32-bit base.
		ceiling := time.Duration(math.Min(float64(b.Cap), float64(b.Base)*math.Pow(2, float64(attempt))))
		w := b.Wait(int(attempt), 0)
		if w < 0 || w > ceiling {
			t.Logf("Wait(%d, 0) with base %v cap %v = %v, want in [0, %v]", attempt, b.Base, b.Cap, w, ceiling)
			return false
		}
		ra := time.Duration(retryAfter) * time.Millisecond
		if w := b.Wait(int(attempt), ra); w < ra || w > max(ceiling, ra) {
			t.Logf("Wait(%d, %v) with base %v cap %v = %v, want in [%v, %v]", attempt, ra, b.Base, b.Cap, w, ra, max(ceiling, ra))
			return false
		}
		return true
	}
	if err := quick.Check(prop, &quick.Config{MaxCount: 5000, Rand: newMathRand(1)}); err != nil {
		t.Error(err)
	}
}

// TestWaitSpread checks that the draw is spread, not stuck at one end:
// full jitter's point is that callers who failed together come back apart.
func TestWaitSpread(t *testing.T) {
	b := Backoff{Base: time.Second, Cap: time.Second, Rand: seeded(2)}
	var low, high int
	for range 1000 {
		switch w := b.Wait(0, 0); {
		case w < 250*time.Millisecond:
			low++
		case w >= 750*time.Millisecond:
			high++
		}
	}
	if low < 150 || high < 150 {
		t.Errorf("of 1000 waits in [0, 1s], %d were under 250ms and %d at least 750ms; want about 250 each", low, high)
	}
}

// TestNextDeadline is the property that Next never lets a wait reach the
// deadline, and allows no more than MaxAttempts attempts.
func TestNextDeadline(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	prop := func(seed uint64, attempt uint8, maxAttempts uint8, retryAfterMs uint16, deadlineMs uint16) bool {
		b := Backoff{Base: 50 * time.Millisecond, Cap: 10 * time.Second, MaxAttempts: int(maxAttempts%10) + 1, Rand: seeded(seed)}
		n := int(attempt % 12)
		deadline := start.Add(time.Duration(deadlineMs) * time.Millisecond)
		wait, ok := b.Next(n, time.Duration(retryAfterMs)*time.Millisecond, start, deadline)
		if n+1 >= b.MaxAttempts && ok {
			t.Logf("Next(%d) with MaxAttempts %d allowed another attempt", n, b.MaxAttempts)
			return false
		}
		if ok && !start.Add(wait).Before(deadline) {
			t.Logf("Next(%d) = %v, past the deadline %v away", n, wait, deadline.Sub(start))
			return false
		}
		if !ok && wait != 0 {
			t.Logf("Next(%d) refused with a wait of %v, want 0", n, wait)
			return false
		}
		return true
	}
	if err := quick.Check(prop, &quick.Config{MaxCount: 5000, Rand: newMathRand(3)}); err != nil {
		t.Error(err)
	}
}

func TestNext(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b := Backoff{Base: 100 * time.Millisecond, Cap: time.Second, MaxAttempts: 3, Rand: fixed(0.5)}
	tests := []struct {
		name       string
		attempt    int
		retryAfter time.Duration
		deadline   time.Time
		wantWait   time.Duration
		wantOK     bool
	}{
		{"first retry, no deadline", 0, 0, time.Time{}, 50 * time.Millisecond, true},
		{"last allowed retry", 1, 0, time.Time{}, 100 * time.Millisecond, true},
		{"attempts used up", 2, 0, time.Time{}, 0, false},
		{"wait fits the deadline", 0, 0, now.Add(51 * time.Millisecond), 50 * time.Millisecond, true},
		{"wait ends at the deadline", 0, 0, now.Add(50 * time.Millisecond), 0, false},
		{"Retry-After passes the deadline: fail now", 0, 10 * time.Second, now.Add(5 * time.Second), 0, false},
		{"deadline already passed", 0, 0, now.Add(-time.Second), 0, false},
	}
	for _, tt := range tests {
		wait, ok := b.Next(tt.attempt, tt.retryAfter, now, tt.deadline)
		if wait != tt.wantWait || ok != tt.wantOK {
			t.Errorf("%s: Next(%d, %v, now, %v) = %v, %v; want %v, %v", tt.name, tt.attempt, tt.retryAfter, tt.deadline, wait, ok, tt.wantWait, tt.wantOK)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		v      string
		want   time.Duration
		wantOK bool
	}{
		{"0", 0, true},
		{"120", 2 * time.Minute, true},
		{" 5 ", 5 * time.Second, true},
		{"Thu, 01 Jan 2026 12:00:30 GMT", 30 * time.Second, true}, // IMF-fixdate
		{"Thursday, 01-Jan-26 12:01:00 GMT", time.Minute, true},   // RFC 850
		{"Thu Jan  1 12:00:10 2026", 10 * time.Second, true},      // asctime
		{"Thu, 01 Jan 2026 11:00:00 GMT", 0, true},                // past: go now
		{"99999999999999999999", time.Duration(math.MaxInt64), true},
		{"", 0, false},
		{"-5", 0, false},
		{"+5", 0, false},
		{"1.5", 0, false},
		{"5s", 0, false},
		{"soon", 0, false},
		{"2026-01-01T12:00:30Z", 0, false}, // not an HTTP-date
	}
	for _, tt := range tests {
		got, ok := ParseRetryAfter(tt.v, now)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tt.v, got, ok, tt.want, tt.wantOK)
		}
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "120", "-1", "Thu, 01 Jan 2026 12:00:30 GMT", "99999999999999999999", "x"} {
		f.Add(s)
	}
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := ParseRetryAfter(v, now)
		if d < 0 || !ok && d != 0 {
			t.Errorf("ParseRetryAfter(%q) = %v, %v", v, d, ok)
		}
	})
}

// TestSeconds: a wait in seconds too long for a Duration is the longest
// one, not one that wrapped around to nothing.
func TestSeconds(t *testing.T) {
	for _, tt := range []struct {
		secs float64
		want time.Duration
	}{
		{0, 0},
		{1.5, 1500 * time.Millisecond},
		{9e9, 9e9 * time.Second},
		{1e10, math.MaxInt64},
		{1e300, math.MaxInt64},
	} {
		if got := Seconds(tt.secs); got != tt.want {
			t.Errorf("Seconds(%g) = %v; want %v", tt.secs, got, tt.want)
		}
	}
}
