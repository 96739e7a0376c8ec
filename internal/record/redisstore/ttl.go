package redisstore

import (
	"strconv"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// recordTTL is the Redis TTL of a record settled with retention r.
func recordTTL(r time.Duration) time.Duration {
	return min(max(r, 0), maxTTL).Truncate(time.Millisecond) + ttlGrace
}

// indexFlightTTL is the TTL of the index of a record in flight. Renew
// extends it, so it lapses only for a record whose owner is gone and that
// no one settled: one no process can find but by its key.
const indexFlightTTL = 24 * time.Hour

// indexTTL is the TTL of the index of a record in state st.
func indexTTL(st record.State, retention time.Duration) time.Duration {
	if st.InFlight() {
		return indexFlightTTL
	}
	return recordTTL(retention)
}

// flightTTL returns, in milliseconds, the TTL the scripts' flight_ms
// gives a record reserved at now with lease and retention, now and lease
// as the scripts store them: its retention and the grace after its lease
// ends. A record without a lease has none: "". Worked out here rather
// than in the reservation script, where it cost the server about a
// sixth of the script.
func flightTTL(now, lease string, retention time.Duration) string {
	if lease == "" {
		return ""
	}
	at, _ := decTime(now)
	until, _ := decTime(lease)
	ttl := recordTTL(retention)
	if at.Before(until) {
		ttl += min(until.Sub(at), maxTTL).Truncate(time.Millisecond)
	}
	return strconv.FormatInt(min(ttl, maxTTL+ttlGrace).Milliseconds(), 10)
}
