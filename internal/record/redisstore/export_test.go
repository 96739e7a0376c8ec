package redisstore

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// Client returns the store's client, for tests that add a hook.
func Client(s *Store) redis.UniversalClient { return s.rdb }

// Subscribed is closed once the store's subscription is confirmed.
func Subscribed(s *Store) <-chan struct{} { return s.subscribed }

// SetPoll sets Wait's fallback backoff; call it before any Wait.
func SetPoll(s *Store, lo, hi time.Duration) { s.pollMin, s.pollMax = lo, hi }

// Keys returns the holder, record and index keys of the record id
// reserved for key.
func Keys(s *Store, key, id string) (holder, rec, index string) {
	tag := tagOf(key)
	return s.holderKey(tag), s.recordKey(tag, id), s.indexKey(id)
}

// TTLGrace is what a settled record's TTL adds to its retention.
const TTLGrace = ttlGrace

// Senders is how many batches a store sends at once.
const Senders = senders

// Queued returns how many calls wait for a sender.
func Queued(s *Store) int { return s.batch.Queued() }

// Library returns the name of the library of the store's functions.
func Library() string { return lib.name }

// Pipe runs n items queued by fill in one round trip, as the store's
// pipelines do (pipe).
func Pipe(ctx context.Context, s *Store, n int, fill func(p redis.Pipeliner, i int, full bool)) [][]redis.Cmder {
	items, _ := s.pipe(ctx, n, fill)
	return items
}

// FlushAttaches writes the attaches counted and not yet written
// (recordtest.Flusher).
func (s *Store) FlushAttaches(ctx context.Context) error { return s.attaches.Flush(ctx) }

// OnlineReplicas counts the online replicas in the text of INFO
// replication.
var OnlineReplicas = onlineReplicas

// OverlapWrite makes a write of the attach counts begin and end now, as
// one a reservation's script overlaps: a Reading taken before shows its
// counts only after reading them again from the server. The write fails
// at once, and its count of one attach to rec is kept for the next. rec
// must be one s knows where to find.
func OverlapWrite(ctx context.Context, s *Store, rec *record.Record) error {
	reading, err := s.attaches.Begin(ctx)
	if err == nil {
		_, err = reading.Add(ctx, rec.Clone(), s.storedAttached)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	s.attaches.Flush(done)
	return err
}

// FlightTTL is flightTTL, and FlightMS the script that runs the scripts'
// flight_ms on its arguments, to check that they agree.
var FlightTTL, FlightMS = flightTTL, luaLib + "return flight_ms(ARGV[1], ARGV[2], ARGV[3])"

// EncTime and EncDuration store a time and a duration as the scripts do.
var EncTime, EncDuration = encTime, encDuration
