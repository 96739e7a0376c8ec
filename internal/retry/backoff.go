package retry

import (
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"
)

// Defaults for a Backoff's zero fields, those of the example
// policy.
const (
	DefaultBase        = 200 * time.Millisecond
	DefaultCap         = 30 * time.Second
	DefaultMaxAttempts = 5
)

// Backoff says how long to wait before the next attempt: exponential with
// full jitter, as in the AWS Architecture Blog's "Exponential Backoff And
// Jitter". Full jitter draws the whole wait at random, so callers that
// failed together do not come back together; the exponential ceiling
// backs off from an upstream that stays down.
//
// A zero field takes its default. A Backoff is a value: copy it freely.
// It is safe for concurrent use if Rand is.
type Backoff struct {
	// Base is the ceiling of the first wait (DefaultBase).
	Base time.Duration
	// Cap bounds the ceiling of every wait (DefaultCap). A Retry-After
	// may ask for more; see Wait.
	Cap time.Duration
	// MaxAttempts bounds the attempts of one call, the first included
	// (DefaultMaxAttempts). 1 means no retries.
	MaxAttempts int
	// Rand returns a number in [0, 1). Nil means math/rand/v2's Float64.
	Rand func() float64
}

// Wait returns the wait after attempt (0 for the first attempt) failed:
// a random duration in [0, min(Cap, Base*2^attempt)], and at least
// retryAfter.
//
// Retry-After is a floor, not a suggestion, even above Cap: the upstream
// has said an earlier attempt will fail, and it would still spend the
// account's allowance. A caller's deadline is what bounds a long
// Retry-After (see Next).
func (b Backoff) Wait(attempt int, retryAfter time.Duration) time.Duration {
	b = b.withDefaults()
	ceiling := b.ceiling(attempt)
	r := b.Rand()
	if !(r >= 0) { // also catches NaN
		r = 0
	}
	d := time.Duration(r * float64(ceiling))
	// float64 has 53 bits: r*ceiling can round up to ceiling or beyond
	// for a large ceiling, and a broken Rand can return 1 or more.
	d = min(d, ceiling)
	return max(d, retryAfter)
}

// ceiling returns min(Cap, Base*2^attempt) without overflowing the shift.
func (b Backoff) ceiling(attempt int) time.Duration {
	attempt = max(attempt, 0)
	// Base*2^attempt <= Cap exactly when Base <= Cap/2^attempt, for
	// integers; and Cap>>63 is 0 for any Cap.
	if attempt < 63 && b.Base <= b.Cap>>attempt {
		return b.Base << attempt
	}
	return b.Cap
}

// Next returns the wait before the attempt after attempt (0 for the first
// attempt), or ok false when there must be none: MaxAttempts would be
// exceeded, or the wait would reach a non-zero deadline. A wait that would
// pass the caller's deadline fails now instead, so the caller gets the
// last real error rather than a timeout later.
//
// A wait that ends exactly at the deadline is refused too: it would leave
// the attempt no time to run.
func (b Backoff) Next(attempt int, retryAfter time.Duration, now, deadline time.Time) (wait time.Duration, ok bool) {
	b = b.withDefaults()
	if attempt+1 >= b.MaxAttempts {
		return 0, false
	}
	wait = b.Wait(attempt, retryAfter)
	if !deadline.IsZero() && !now.Add(wait).Before(deadline) {
		return 0, false
	}
	return wait, true
}

func (b Backoff) withDefaults() Backoff {
	if b.Base <= 0 {
		b.Base = DefaultBase
	}
	if b.Cap <= 0 {
		b.Cap = DefaultCap
	}
	if b.MaxAttempts <= 0 {
		b.MaxAttempts = DefaultMaxAttempts
	}
	if b.Rand == nil {
		b.Rand = rand.Float64
	}
	return b
}

// ParseRetryAfter reads an HTTP Retry-After header value (RFC 9110 section
// 10.2.3): either delay-seconds, a non-negative decimal integer, or an
// HTTP-date, which is turned into a wait from now. A date already past
// means no wait (0, true). Anything else, a negative number or a fraction
// included, is refused (0, false), and the caller's backoff applies alone.
//
// A delay too large for a time.Duration (about 292 years) is clamped to
// the largest one: the upstream means "not soon", and Next refuses it
// against any deadline.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if isDigits(v) {
		const maxSeconds = math.MaxInt64 / int64(time.Second)
		var secs int64
		for _, c := range []byte(v) {
			secs = secs*10 + int64(c-'0')
			if secs > maxSeconds {
				return math.MaxInt64, true
			}
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}

func isDigits(s string) bool {
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// Seconds returns secs seconds as a Duration, the largest one for a time
// too long for a Duration to hold (a conversion would wrap around to a
// short, even negative, wait). secs must not be negative.
func Seconds(secs float64) time.Duration {
	if secs >= float64(math.MaxInt64)/float64(time.Second) {
		return math.MaxInt64
	}
	return time.Duration(secs * float64(time.Second))
}
