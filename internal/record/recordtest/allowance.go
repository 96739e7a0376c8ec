package recordtest

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/retry"
)

// An AllowanceStore keeps upstream accounts' allowances that every proxy
// sharing the store takes from: the methods of intercept.Allowances,
// which the shared stores implement.
type AllowanceStore interface {
	TakeAllowance(ctx context.Context, account string, a retry.Allowance, now time.Time) (ok bool, wait time.Duration, err error)
	AllowanceTokens(ctx context.Context, account string, a retry.Allowance, now time.Time) (float64, error)
}

// NewAllowancePair returns two handles on one new, empty store, as two
// proxy processes sharing it would hold.
type NewAllowancePair func(t *testing.T) (AllowanceStore, AllowanceStore)

// RunAllowances runs the allowance suite against stores made by newPair:
// the shared allowance is one allowance, whichever handle takes from it,
// and it follows retry.Bucket's arithmetic exactly.
func RunAllowances(t *testing.T, newPair NewAllowancePair) {
	tests := []struct {
		name string
		fn   func(t *testing.T, a, b AllowanceStore)
	}{
		{"ConcurrentTakesShareOneBurst", testConcurrentTakes},
		{"SameArithmeticAsBucket", testSameArithmetic},
		{"AccountsAreSeparate", testAccountsAreSeparate},
		{"Tokens", testTokens},
		{"RaisedRateHoldsAtOnce", testRaisedRate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := newPair(t)
			tt.fn(t, a, b)
		})
	}
}

// allowanceT0 is the fixed time the allowance tests take at, a time with
// nanoseconds, which a store must keep exactly.
var allowanceT0 = time.Date(2026, 7, 28, 12, 0, 0, 123456789, time.UTC)

// testConcurrentTakes takes 2N times at once, through two handles, at one
// instant, from an allowance with a burst of N: exactly N succeed, and
// every refusal says to wait one interval.
func testConcurrentTakes(t *testing.T, a, b AllowanceStore) {
	const burst = 8
	al := retry.Allowance{Rate: 1, Burst: burst}
	var (
		mu      sync.Mutex
		taken   int
		waits   []time.Duration
		errs    []error
		wg      sync.WaitGroup
		handles = []AllowanceStore{a, b}
	)
	for i := range 2 * burst {
		wg.Go(func() {
			ok, wait, err := handles[i%2].TakeAllowance(t.Context(), "shared", al, allowanceT0)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				errs = append(errs, err)
			case ok:
				taken++
			default:
				waits = append(waits, wait)
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("TakeAllowance failed: %v", errs)
	}
	if taken != burst {
		t.Fatalf("%d of %d concurrent takes succeeded; the burst is %d", taken, 2*burst, burst)
	}
	for _, w := range waits {
		if w != time.Second {
			t.Errorf("a refused take was told to wait %v; want one interval, 1s", w)
		}
	}
}

// testSameArithmetic takes from a store, alternating handles, and from a
// retry.Bucket at the same times: every answer is the same.
func testSameArithmetic(t *testing.T, a, b AllowanceStore) {
	al := retry.Allowance{Rate: 10, Burst: 3} // an interval of 100ms
	bucket := retry.NewBucket(al, allowanceT0)
	for i, at := range []time.Duration{
		0, 0, 0, 0, // the burst, then a refusal
		40 * time.Millisecond,  // 60ms to go
		100 * time.Millisecond, // a token back
		100 * time.Millisecond,
		10 * time.Second, // a quiet spell refills to the burst, no more
		10 * time.Second, 10 * time.Second, 10 * time.Second,
		10*time.Second + 1, // a nanosecond later
		5 * time.Second,    // a clock that went back gets nothing for free
	} {
		now := allowanceT0.Add(at)
		s := []AllowanceStore{a, b}[i%2]
		ok, wait, err := s.TakeAllowance(t.Context(), "acct", al, now)
		if err != nil {
			t.Fatalf("take %d at +%v: %v", i, at, err)
		}
		wantOK, wantWait := bucket.Take(now)
		if ok != wantOK || wait != wantWait {
			t.Fatalf("take %d at +%v = %v, %v; a retry.Bucket says %v, %v", i, at, ok, wait, wantOK, wantWait)
		}
	}
}

// testAccountsAreSeparate empties one account and takes from another.
func testAccountsAreSeparate(t *testing.T, a, b AllowanceStore) {
	al := retry.Allowance{Rate: 1.0 / 3600, Burst: 1}
	if ok, _, err := a.TakeAllowance(t.Context(), "bank", al, allowanceT0); !ok || err != nil {
		t.Fatalf("the first take from bank = %v, %v; want room", ok, err)
	}
	if ok, wait, err := b.TakeAllowance(t.Context(), "bank", al, allowanceT0); ok || err != nil || wait != time.Hour {
		t.Fatalf("the second take from bank = %v, %v, %v; want no room for an hour", ok, wait, err)
	}
	if ok, _, err := b.TakeAllowance(t.Context(), "mail", al, allowanceT0); !ok || err != nil {
		t.Fatalf("a take from mail = %v, %v; bank's use must not touch it", ok, err)
	}
}

// testTokens reads the level through the other handle than the takes.
func testTokens(t *testing.T, a, b AllowanceStore) {
	al := retry.Allowance{Rate: 2, Burst: 4} // an interval of 500ms
	check := func(at time.Duration, want float64) {
		t.Helper()
		got, err := b.AllowanceTokens(t.Context(), "acct", al, allowanceT0.Add(at))
		if err != nil || math.Abs(got-want) > 1e-9 {
			t.Fatalf("AllowanceTokens at +%v = %v, %v; want %v", at, got, err, want)
		}
	}
	check(0, 4) // never taken from: full
	for range 3 {
		if ok, _, err := a.TakeAllowance(t.Context(), "acct", al, allowanceT0); !ok || err != nil {
			t.Fatalf("TakeAllowance = %v, %v; want room", ok, err)
		}
	}
	check(0, 1)
	check(250*time.Millisecond, 1.5)
	check(time.Hour, 4)
}

// testRaisedRate empties an allowance of one call an hour, then takes and
// reads it under a new definition, a thousand calls a second: the wait
// the old definition left is capped to the new one's longest, one
// interval, not the hour, as after a restart with the rate raised.
func testRaisedRate(t *testing.T, a, b AllowanceStore) {
	slow := retry.Allowance{Rate: 1.0 / 3600, Burst: 1}
	fast := retry.Allowance{Rate: 1000, Burst: 10} // an interval of 1ms
	if ok, _, err := a.TakeAllowance(t.Context(), "acct", slow, allowanceT0); !ok || err != nil {
		t.Fatalf("the take at 1/h = %v, %v; want room", ok, err)
	}
	now := allowanceT0.Add(time.Second)
	if got, err := b.AllowanceTokens(t.Context(), "acct", fast, now); err != nil || got != 0 {
		t.Fatalf("AllowanceTokens at 1000/s = %v, %v; want 0, an empty bucket, not less", got, err)
	}
	ok, wait, err := b.TakeAllowance(t.Context(), "acct", fast, now)
	if ok || err != nil || wait != time.Millisecond {
		t.Fatalf("a take at 1000/s = %v, %v, %v; want no room for one new interval, 1ms", ok, wait, err)
	}
	now = now.Add(time.Millisecond)
	if ok, wait, err := a.TakeAllowance(t.Context(), "acct", fast, now); !ok || err != nil {
		t.Fatalf("a take at 1000/s one interval later = %v, %v, %v; want room", ok, wait, err)
	}
}
