package redisstore_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record/redisstore"
)

// The TTL a reservation gives a record in flight is worked out by the
// client, as the scripts work it out for a record that goes back in
// flight: both give the same, to the millisecond.
func TestFlightTTLAsTheScriptsGiveIt(t *testing.T) {
	raw := rawClient(t, serverURL(t))
	ctx := t.Context()
	now := time.Date(2026, 12, 6, 12, 0, 0, 999_999_999, time.UTC)
	year := 365 * 24 * time.Hour
	for _, c := range []struct {
		name      string
		lease     time.Time
		retention time.Duration
	}{
		{"no lease", time.Time{}, time.Hour},
		{"a lease ahead", now.Add(time.Minute), time.Hour},
		{"a lease ahead by a part of a millisecond", now.Add(1500*time.Microsecond + 1), 24 * time.Hour},
		{"a lease ahead, its nanoseconds below now's", now.Add(time.Second - 999_999_998), time.Hour},
		{"a lease behind", now.Add(-time.Minute), time.Hour},
		{"a lease now", now, time.Second},
		{"a retention of a part of a millisecond", now.Add(time.Second), 1500 * time.Microsecond},
		{"no retention", now.Add(time.Second), 0},
		{"a negative retention", now.Add(time.Second), -time.Hour},
		{"a retention past 2^53 ns with a part of a millisecond", now.Add(time.Second), 17_279_999_999_999_999},
		{"a retention of 200 years", now.Add(time.Second), 200 * year},
		{"a lease 200 years ahead", now.Add(200 * year), time.Hour},
		{"both 99 years", now.Add(99 * year), 99 * year},
		{"a lease past what the scripts store", time.Unix(0, 1<<63-1).Add(time.Hour), time.Hour},
	} {
		n, l := redisstore.EncTime(now), redisstore.EncTime(c.lease)
		got := redisstore.FlightTTL(n, l, c.retention)
		want, err := raw.Eval(ctx, redisstore.FlightMS, nil, n, l, redisstore.EncDuration(c.retention)).Int64()
		switch {
		case errors.Is(err, redis.Nil):
			if got != "" {
				t.Errorf("%s: %q; the scripts give none", c.name, got)
			}
		case err != nil:
			t.Fatalf("%s: %v", c.name, err)
		case got != strconv.FormatInt(want, 10):
			t.Errorf("%s: %q; the scripts give %d", c.name, got, want)
		}
	}
}
