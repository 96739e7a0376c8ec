package retry

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"
)

// An Allowance is what an upstream account lets its callers spend: a
// steady rate and a burst above it. Every call to the account, first
// attempt or retry, takes from it (see Bucket).
type Allowance struct {
	// Rate is in calls per second (ParseRate reads "500/h" and the like).
	Rate float64
	// Burst is how many calls may go at once after a quiet spell; less
	// than 1 counts as 1.
	Burst int
}

// ParseRate reads a rate written as COUNT/UNIT, where UNIT is s, m, h or d
// ("500/h", "10/s", "3/m", "1000/d"), and returns it in calls per second.
// COUNT may be a decimal ("0.5/s") but must be positive and finite: an
// account that allows nothing needs no allowance, it needs removing.
func ParseRate(s string) (float64, error) {
	count, unit, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, fmt.Errorf("parsing rate %q: want COUNT/UNIT, like 500/h", s)
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(count), 64)
	if err != nil || !(n > 0) || math.IsInf(n, 0) {
		return 0, fmt.Errorf("parsing rate %q: the count must be a positive number", s)
	}
	var per time.Duration
	switch strings.TrimSpace(unit) {
	case "s":
		per = time.Second
	case "m":
		per = time.Minute
	case "h":
		per = time.Hour
	case "d":
		per = 24 * time.Hour
	default:
		return 0, fmt.Errorf("parsing rate %q: the unit must be s, m, h or d", s)
	}
	rate := n / per.Seconds()
	if !(float64(time.Second)/rate < math.MaxInt64) {
		// Its interval would not fit a Duration (or the rate rounds to
		// zero): no call in 292 years is no allowance to keep.
		return 0, fmt.Errorf("parsing rate %q: too low (less than one call in 292 years)", s)
	}
	return rate, nil
}

// Interval returns the time one call's room takes to come back: 1/Rate,
// at least a nanosecond. A Rate that is not positive and finite, or whose
// interval is longer than a Duration holds (ParseRate returns neither),
// gives the longest Duration: room that never comes back.
func (a Allowance) Interval() time.Duration {
	interval := float64(time.Second) / a.Rate
	if !(a.Rate > 0) || math.IsInf(a.Rate, 0) || !(interval < math.MaxInt64) {
		return math.MaxInt64
	}
	return max(time.Duration(interval), 1)
}

// Tolerance returns how far ahead of now the calls may run: Burst-1
// intervals. The bucket holds room for a call while it is less than
// Tolerance+Interval from full.
func (a Allowance) Tolerance() time.Duration {
	return saturatingMul(a.Interval(), max(a.Burst, 1)-1)
}

// Span returns how far from full the bucket can be: Burst intervals, that
// is Tolerance plus Interval.
func (a Allowance) Span() time.Duration {
	t, i := a.Tolerance(), a.Interval()
	if t > math.MaxInt64-i {
		return math.MaxInt64
	}
	return t + i
}

// capped returns full, or now plus Span if full is further ahead: a time
// kept under an older, slower definition of the account, or by a clock
// that went back, reads as an empty bucket, so that a raised rate holds
// at once rather than after the old definition's longest wait.
func (a Allowance) capped(full, now time.Time) time.Time {
	if limit := now.Add(a.Span()); full.After(limit) {
		return limit
	}
	return full
}

// TakeAt is a Bucket's Take for a caller that keeps the bucket's one time
// itself, such as a store that shares the allowance across processes:
// full is when the bucket will next be full (the zero time, or any time
// not after now, for a bucket that is full), and next is the time to keep
// after the take. ok and wait are as Take's. A full more than Span ahead
// of now counts as now plus Span (see capped), so wait is never more than
// one interval. A refused take leaves full as it was (next == full), or
// capped; a caller keeps the capped time, or a cap that moves with now
// would refuse for as long as the old time lasts.
//
// Every holder of the allowance computes the same thing, so processes that
// share full through a store share one allowance, as long as their clocks
// agree to well within an interval.
func (a Allowance) TakeAt(full, now time.Time) (next time.Time, ok bool, wait time.Duration) {
	f := a.capped(full, now)
	if f.Before(now) {
		f = now
	}
	// The bucket holds a token while it is less than tolerance+interval,
	// that is Burst tokens' time, away from full.
	if earliest := f.Add(-a.Tolerance()); earliest.After(now) {
		return f, false, earliest.Sub(now)
	}
	return f.Add(a.Interval()), true, 0
}

// TokensAt is a Bucket's Tokens for a bucket next full at full (see
// TakeAt): a number in [0, Burst].
func (a Allowance) TokensAt(full, now time.Time) float64 {
	interval := a.Interval()
	ahead := max(a.capped(full, now).Sub(now), 0)
	return (float64(a.Tolerance()) + float64(interval) - float64(ahead)) / float64(interval)
}

// A Bucket is a token bucket holding an account's Allowance. It starts
// full, with Burst tokens, and gains Rate tokens a second up to Burst;
// each call takes one.
//
// It keeps one time, not a token count: the time at which the bucket will
// next be full (the generic cell rate algorithm, GCRA, which is a token
// bucket written differently). That makes the arithmetic exact in
// nanoseconds, and it is the one value a shared store needs to hold to
// share the allowance across processes (Allowance.TakeAt is the same
// arithmetic, for such a store).
//
// A Bucket is safe for concurrent use. It reads no clock: callers pass
// the time.
type Bucket struct {
	a Allowance

	mu   sync.Mutex // protects full
	full time.Time  // when the bucket will be full again, if no call takes from it
}

// NewBucket returns a full Bucket for a.
//
// It panics if a.Rate is not positive and finite, as time.NewTicker does
// for an interval that is not positive: ParseRate never returns such a
// rate, so only a programming error can pass one.
func NewBucket(a Allowance, now time.Time) *Bucket {
	if !(a.Rate > 0) || math.IsInf(a.Rate, 0) {
		panic(fmt.Sprintf("retry: NewBucket with rate %v; a rate must be positive and finite", a.Rate))
	}
	return &Bucket{a: a, full: now}
}

// Take takes a token at now if there is one. If there is none it takes
// nothing, and wait says how long until there will be one; the caller may
// wait that long, if its deadline allows, and Take again. Another caller
// may have taken the token by then: Take again says how much longer.
func (b *Bucket) Take(now time.Time) (ok bool, wait time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.full, ok, wait = b.a.TakeAt(b.full, now)
	return ok, wait
}

// Tokens returns how many tokens the bucket holds at now, for metrics: a
// number in [0, Burst], fractional while a token is coming back.
func (b *Bucket) Tokens(now time.Time) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.a.TokensAt(b.full, now)
}

func saturatingMul(d time.Duration, n int) time.Duration {
	if n > 0 && d > math.MaxInt64/time.Duration(n) {
		return math.MaxInt64
	}
	return d * time.Duration(n)
}

// Defaults for a RetryBudget's zero options, the values gRPC's retry
// design (A6) uses in its example.
const (
	DefaultMaxTokens  = 10
	DefaultTokenRatio = 0.1
)

// ErrRetryBudgetExhausted says a retry was not made because the account's
// retry budget is empty. Wrap it with the last real error, so the caller
// sees both:
//
//	fmt.Errorf("%w for account %s: %w", retry.ErrRetryBudgetExhausted, name, last)
var ErrRetryBudgetExhausted = errors.New("retry budget exhausted")

// A RetryBudget stops retries when an account is failing, so that retries
// do not eat the allowance in a storm. It bounds retries only: first
// attempts are bounded by the Bucket.
//
// It is gRPC's retry throttling (gRFC A6, "Throttling Retry Attempts and
// Hedged RPCs"), chosen over Envoy's budget_percent and Finagle's
// RetryBudget because it is the simplest of the three that works here:
//
//   - Envoy's budget is a share of the requests active at once, which in
//     an MCP session (one or a few calls in flight) is a share of almost
//     nothing, so its floor (min_retry_concurrency) would do all the work.
//   - Finagle's is a share of recent requests over a time window, which
//     needs a clock and a window of deposits.
//   - gRPC's is one number, with no clock and no per-request state: it
//     starts at maxTokens, each failure takes 1, each success gives back
//     tokenRatio, and retries are allowed while it is above maxTokens/2.
//     A storm of failures closes it within maxTokens/2 failures; only
//     successes open it again. One number is also what a shared store
//     would hold to share it across processes.
//
// A RetryBudget is safe for concurrent use.
type RetryBudget struct {
	// Tokens are counted in thousandths, as gRPC does, so that adding a
	// tokenRatio of 0.1 ten times gives exactly one token back.
	max   int64 // maxTokens, in thousandths
	ratio int64 // tokenRatio, in thousandths

	mu     sync.Mutex // protects tokens
	tokens int64      // in thousandths, in [0, max]
}

// NewRetryBudget returns a full RetryBudget. maxTokens and tokenRatio are
// gRPC's retryThrottling settings; a value that is not positive takes its
// default (DefaultMaxTokens, DefaultTokenRatio). gRPC caps maxTokens at
// 1000 and keeps three decimals of tokenRatio; so does this.
func NewRetryBudget(maxTokens, tokenRatio float64) *RetryBudget {
	if !(maxTokens > 0) {
		maxTokens = DefaultMaxTokens
	}
	if !(tokenRatio > 0) {
		tokenRatio = DefaultTokenRatio
	}
	// A success can give back at most a full budget; capping the ratio
	// also keeps it finite in thousandths.
	maxTokens = min(maxTokens, 1000)
	tokenRatio = min(tokenRatio, maxTokens)
	b := &RetryBudget{
		max:   max(int64(math.Round(maxTokens*1000)), 1),
		ratio: max(int64(math.Round(tokenRatio*1000)), 1),
	}
	b.tokens = b.max
	return b
}

// OnSuccess records an attempt to the account that succeeded.
func (b *RetryBudget) OnSuccess() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tokens = min(b.tokens+b.ratio, b.max)
}

// OnFailure records an attempt to the account that failed in a way
// Classify calls Retry: the account is throttling or unreachable. A
// failure that retrying cannot mend (Fail, Bug) says nothing about the
// account's health and should be recorded as neither, as in gRPC, where
// only retryable status codes count.
func (b *RetryBudget) OnFailure() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tokens = max(b.tokens-1000, 0)
}

// AllowRetry reports whether a retry may be made: the budget is above half
// of maxTokens. It takes nothing; the retry's own outcome does.
func (b *RetryBudget) AllowRetry() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return 2*b.tokens > b.max
}

// Level returns the tokens in the budget, in [0, maxTokens], for metrics.
// Retries stop at or below maxTokens/2.
func (b *RetryBudget) Level() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return float64(b.tokens) / 1000
}
