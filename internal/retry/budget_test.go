package retry

import (
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestParseRate(t *testing.T) {
	tests := []struct {
		s    string
		want float64
	}{
		{"500/h", 500.0 / 3600},
		{"10/s", 10},
		{"3/m", 3.0 / 60},
		{"1000/d", 1000.0 / 86400},
		{"0.5/s", 0.5},
		{" 20 / m ", 20.0 / 60},
	}
	for _, tt := range tests {
		got, err := ParseRate(tt.s)
		if err != nil || math.Abs(got-tt.want) > 1e-12*tt.want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", tt.s, got, err, tt.want)
		}
	}
	for _, s := range []string{"", "10", "10/", "/s", "10/w", "10/sec", "0/s", "-1/s", "NaN/s", "Inf/s", "1e400/s", "ten/s", "10/s/s", "1e-10/s", "5e-324/d", "+Inf/d", "nan/h"} {
		if got, err := ParseRate(s); err == nil {
			t.Errorf("ParseRate(%q) = %v, want an error", s, got)
		} else if !strings.HasPrefix(err.Error(), "parsing rate ") {
			t.Errorf("ParseRate(%q): error %q does not say what it was doing", s, err)
		}
	}
}

func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"500/h", "10/s", "3/m", "1000/d", "0/s", "1e308/s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRate(s)
		if err != nil {
			return
		}
		if !(r > 0) || math.IsInf(r, 0) {
			t.Fatalf("ParseRate(%q) = %v, not a positive finite rate", s, r)
		}
		NewBucket(Allowance{Rate: r, Burst: 1}, t0) // must not panic
	})
}

// TestBucket walks a 10/s, burst 3 bucket through its burst, its refill
// and a quiet spell.
func TestBucket(t *testing.T) {
	b := NewBucket(Allowance{Rate: 10, Burst: 3}, t0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	steps := []struct {
		at       time.Duration
		wantOK   bool
		wantWait time.Duration
	}{
		{0, true, 0}, // full: the burst goes at once
		{0, true, 0},
		{0, true, 0},
		{0, false, 100 * time.Millisecond}, // empty: one token a tenth of a second
		{40 * time.Millisecond, false, 60 * time.Millisecond},
		{100 * time.Millisecond, true, 0},
		{100 * time.Millisecond, false, 100 * time.Millisecond},
		{10 * time.Second, true, 0}, // a quiet spell refills to the burst, no more
		{10 * time.Second, true, 0},
		{10 * time.Second, true, 0},
		{10 * time.Second, false, 100 * time.Millisecond},
		{5 * time.Second, false, 100 * time.Millisecond}, // a clock that went back gets nothing for free, and waits one interval
	}
	for i, s := range steps {
		ok, wait := b.Take(at(s.at))
		if ok != s.wantOK || wait != s.wantWait {
			t.Errorf("step %d: Take(t0+%v) = %v, %v; want %v, %v", i, s.at, ok, wait, s.wantOK, s.wantWait)
		}
	}
}

func TestBucketTokens(t *testing.T) {
	b := NewBucket(Allowance{Rate: 10, Burst: 4}, t0)
	check := func(at time.Duration, want float64) {
		t.Helper()
		if got := b.Tokens(t0.Add(at)); math.Abs(got-want) > 1e-9 {
			t.Errorf("Tokens(t0+%v) = %v, want %v", at, got, want)
		}
	}
	check(0, 4)
	b.Take(t0)
	b.Take(t0)
	check(0, 2)
	check(50*time.Millisecond, 2.5)
	check(time.Hour, 4)
	for range 4 {
		b.Take(t0)
	}
	check(0, 0)
}

// TestBucketBurstBelowOne checks that a zero Burst still lets calls
// through at the rate, rather than never.
func TestBucketBurstBelowOne(t *testing.T) {
	b := NewBucket(Allowance{Rate: 2}, t0)
	if ok, _ := b.Take(t0); !ok {
		t.Fatal("a new bucket with Burst 0 refused its first call")
	}
	if ok, wait := b.Take(t0); ok || wait != 500*time.Millisecond {
		t.Errorf("second Take = %v, %v; want false, 500ms", ok, wait)
	}
}

func TestNewBucketPanics(t *testing.T) {
	for _, rate := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewBucket with rate %v did not panic", rate)
				}
			}()
			NewBucket(Allowance{Rate: rate, Burst: 1}, t0)
		}()
	}
}

// TestBucketAllowanceOverTime is the bucket's promise: however callers
// come, no more than rate*elapsed + burst calls get a token.
func TestBucketAllowanceOverTime(t *testing.T) {
	b := NewBucket(Allowance{Rate: 500.0 / 3600, Burst: 20}, t0) // the cloudinary account
	r := seeded(4)
	taken := 0
	now := t0
	for range 100000 {
		now = now.Add(time.Duration(r() * float64(time.Second)))
		if ok, _ := b.Take(now); ok {
			taken++
		}
	}
	elapsed := now.Sub(t0)
	limit := int(500*elapsed.Hours()) + 20
	if taken > limit || taken < limit-2 {
		t.Errorf("over %v the bucket gave %d tokens; want at most %d, and about that many under constant demand", elapsed, taken, limit)
	}
}

// TestBucketConcurrent takes from one bucket from many goroutines: run
// with -race. At one instant only the burst may go.
func TestBucketConcurrent(t *testing.T) {
	b := NewBucket(Allowance{Rate: 1, Burst: 50}, t0)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		taken int
	)
	for range 20 {
		wg.Go(func() {
			for range 10 {
				if ok, _ := b.Take(t0); ok {
					mu.Lock()
					taken++
					mu.Unlock()
				}
				b.Tokens(t0)
			}
		})
	}
	wg.Wait()
	if taken != 50 {
		t.Errorf("200 concurrent Takes at one instant got %d tokens, want the burst of 50", taken)
	}
}

// TestRetryBudget follows gRPC A6's rules with maxTokens 10 and tokenRatio
// 0.1: retries stop once the budget is down to half, and a success gives
// back a tenth of a token, exactly.
func TestRetryBudget(t *testing.T) {
	b := NewRetryBudget(10, 0.1)
	if got := b.Level(); got != 10 {
		t.Fatalf("a new budget holds %v, want 10", got)
	}
	for i := range 4 {
		b.OnFailure()
		if !b.AllowRetry() {
			t.Fatalf("after %d failures (level %v) retries stopped; want them until the level is 5", i+1, b.Level())
		}
	}
	b.OnFailure()
	if b.AllowRetry() {
		t.Fatalf("at level %v retries are still allowed; want none at maxTokens/2", b.Level())
	}
	b.OnSuccess()
	if !b.AllowRetry() {
		t.Fatalf("at level %v retries are not allowed; want them above maxTokens/2", b.Level())
	}
	b.OnFailure()
	if b.AllowRetry() {
		t.Fatalf("at level %v retries are still allowed", b.Level())
	}
	for range 10 {
		b.OnSuccess()
	}
	if got := b.Level(); got != 5.1 {
		t.Errorf("after ten successes of 0.1 from 4.1 the level is %v, want exactly 5.1", got)
	}
	for range 100 {
		b.OnFailure()
	}
	if got := b.Level(); got != 0 {
		t.Errorf("after a storm the level is %v, want 0, not below", got)
	}
	for range 1000 {
		b.OnSuccess()
	}
	if got := b.Level(); got != 10 {
		t.Errorf("after many successes the level is %v, want maxTokens, not above", got)
	}
}

func TestRetryBudgetDefaults(t *testing.T) {
	for _, args := range [][2]float64{{0, 0}, {-1, -1}, {math.NaN(), math.NaN()}} {
		b := NewRetryBudget(args[0], args[1])
		if got := b.Level(); got != DefaultMaxTokens {
			t.Errorf("NewRetryBudget(%v, %v) holds %v, want the default %v", args[0], args[1], got, DefaultMaxTokens)
		}
		b.OnFailure()
		b.OnSuccess()
		if got, want := b.Level(), DefaultMaxTokens-1+DefaultTokenRatio; math.Abs(got-want) > 1e-9 {
			t.Errorf("NewRetryBudget(%v, %v): after a failure and a success the level is %v, want %v", args[0], args[1], got, want)
		}
	}
	if got := NewRetryBudget(1e9, 1e9).Level(); got != 1000 {
		t.Errorf("NewRetryBudget(1e9, ...) holds %v, want gRPC's cap of 1000", got)
	}
}

// TestRetryBudgetConcurrent: run with -race.
func TestRetryBudgetConcurrent(t *testing.T) {
	b := NewRetryBudget(1000, 1)
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			for range 30 {
				b.OnFailure()
				b.AllowRetry()
			}
		})
		wg.Go(func() {
			for range 10 {
				b.OnSuccess()
				b.Level()
			}
		})
	}
	wg.Wait()
	// 300 failures and 100 successes from a full 1000: the clamp at the
	// top can only have swallowed successes made before any failure.
	if got := b.Level(); got < 700 || got > 800 {
		t.Errorf("level %v after 300 failures and 100 successes of 1 from 1000, want in [700, 800]", got)
	}
}

// TestTakeAt walks the arithmetic a shared store uses, keeping the time
// itself: a full bucket may be the zero time, and a refusal leaves the
// time as it was.
func TestTakeAt(t *testing.T) {
	a := Allowance{Rate: 10, Burst: 2}
	if a.Interval() != 100*time.Millisecond || a.Tolerance() != 100*time.Millisecond {
		t.Fatalf("Interval, Tolerance = %v, %v; want 100ms, 100ms", a.Interval(), a.Tolerance())
	}
	var full time.Time // never taken from
	steps := []struct {
		at       time.Duration
		wantOK   bool
		wantWait time.Duration
		wantFull time.Duration // from t0, after the step
	}{
		{0, true, 0, 100 * time.Millisecond},
		{0, true, 0, 200 * time.Millisecond},
		{0, false, 100 * time.Millisecond, 200 * time.Millisecond},
		{150 * time.Millisecond, true, 0, 300 * time.Millisecond},
		{time.Hour, true, 0, time.Hour + 100*time.Millisecond},
	}
	for i, s := range steps {
		next, ok, wait := a.TakeAt(full, t0.Add(s.at))
		if ok != s.wantOK || wait != s.wantWait || !next.Equal(t0.Add(s.wantFull)) {
			t.Fatalf("step %d: TakeAt(+%v) = %v, %v, %v; want +%v, %v, %v", i, s.at, next.Sub(t0), ok, wait, s.wantFull, s.wantOK, s.wantWait)
		}
		full = next
	}
	if got := a.TokensAt(time.Time{}, t0); got != 2 {
		t.Errorf("TokensAt of a bucket never taken from = %v; want the burst, 2", got)
	}
}

func TestAllowanceWithoutARate(t *testing.T) {
	for _, rate := range []float64{0, -1, math.NaN(), math.Inf(1), 1e-10, 5e-324} {
		a := Allowance{Rate: rate, Burst: 3}
		if a.Interval() != math.MaxInt64 || a.Tolerance() != math.MaxInt64 {
			t.Errorf("rate %v: Interval, Tolerance = %v, %v; want the longest Duration", rate, a.Interval(), a.Tolerance())
		}
	}
}

// TestTakeAtCapsAnOlderDefinition reads a time kept under a slower rate
// (a bucket an hour from full) under a faster one: it counts as an empty
// bucket of the faster rate, one interval's wait, not the hour.
func TestTakeAtCapsAnOlderDefinition(t *testing.T) {
	a := Allowance{Rate: 10, Burst: 3} // an interval of 100ms, a span of 300ms
	full := t0.Add(time.Hour)
	if got := a.TokensAt(full, t0); got != 0 {
		t.Errorf("TokensAt an hour from full = %v; want 0", got)
	}
	next, ok, wait := a.TakeAt(full, t0)
	if ok || wait != 100*time.Millisecond || !next.Equal(t0.Add(300*time.Millisecond)) {
		t.Fatalf("TakeAt an hour from full = +%v, %v, %v; want no room for 100ms, full capped to +300ms", next.Sub(t0), ok, wait)
	}
	next, ok, _ = a.TakeAt(next, t0.Add(100*time.Millisecond))
	if !ok || !next.Equal(t0.Add(400*time.Millisecond)) {
		t.Fatalf("TakeAt 100ms later = +%v, %v; want room, full at +400ms", next.Sub(t0), ok)
	}
}
