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
	return n / per.Seconds(), nil
}

// A Bucket is a token bucket holding an account's Allowance. It starts
// full, with Burst tokens, and gains Rate tokens a second up to Burst;
// each call takes one.
//
// It keeps one time, not a token count: the time at which the bucket will
// next be full (the generic cell rate algorithm, GCRA, which is a token
// bucket written differently). That makes the arithmetic exact in
// nanoseconds, and it is the one value a shared store needs to hold to
// share the allowance across processes.
//
// A Bucket is safe for concurrent use. It reads no clock: callers pass
// the time.
type Bucket struct {
	interval  time.Duration // the time one token takes to come back
	tolerance time.Duration // (Burst-1) * interval: how far ahead calls may run

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
	interval := max(time.Duration(float64(time.Second)/a.Rate), 1)
	burst := max(a.Burst, 1)
	return &Bucket{
		interval:  interval,
		tolerance: saturatingMul(interval, burst-1),
		full:      now,
	}
}

// Take takes a token at now if there is one. If there is none it takes
// nothing, and wait says how long until there will be one; the caller may
// wait that long, if its deadline allows, and Take again. Another caller
// may have taken the token by then: Take again says how much longer.
func (b *Bucket) Take(now time.Time) (ok bool, wait time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	full := b.full
	if full.Before(now) {
		full = now
	}
	// The bucket holds a token while it is less than tolerance+interval,
	// that is Burst tokens' time, away from full.
	if earliest := full.Add(-b.tolerance); earliest.After(now) {
		return false, earliest.Sub(now)
	}
	b.full = full.Add(b.interval)
	return true, 0
}

// Tokens returns how many tokens the bucket holds at now, for metrics: a
// number in [0, Burst], fractional while a token is coming back.
func (b *Bucket) Tokens(now time.Time) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	ahead := max(b.full.Sub(now), 0)
	return (float64(b.tolerance) + float64(b.interval) - float64(ahead)) / float64(b.interval)
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
