package redisstore

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// A replay or an attach is answered by a reservation script that only
// reads; its attach is counted here and written with others every
// attachFlush, and at Close, in one pipeline. A record this Store returns
// shows its own pending counts; another process sees them up to
// attachFlush later.
const attachFlush = time.Second

// attachScript adds ARGV[1] to the attached count of the record KEYS[1],
// if it still exists: a count never makes a key of its own.
var attachScript = newScript("attach", false, `
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.call('HINCRBY', KEYS[1], 'attached', ARGV[1])
end
return 0
`)

// storedAttached reads the attached count of the record id as stored
// (a record.StoredCount).
func (s *Store) storedAttached(ctx context.Context, id string) (int, error) {
	l, _, err := s.locate(ctx, id)
	if err != nil {
		return 0, err
	}
	n, err := s.rdb.HGet(ctx, s.recordKey(l.tag, id), "attached").Int()
	if errors.Is(err, redis.Nil) {
		if exists, err := s.rdb.Exists(ctx, s.recordKey(l.tag, id)).Result(); err != nil || exists == 0 {
			return 0, cmp.Or(err, record.ErrNotFound)
		}
		return 0, nil // a record without the field has none
	}
	return n, err
}

// writeAttaches writes counted attaches in one pipeline (see
// record.AttachCounts.Start), and marks written those the server took:
// a count sent again after it was taken would count twice.
func (s *Store) writeAttaches(ctx context.Context, ids []string, ns []int32) error {
	ctx, cancel := context.WithTimeout(ctx, ioTimeout)
	defer cancel()
	keys := make([]string, len(ids))
	for i, id := range ids {
		l, _, err := s.locate(ctx, id)
		switch {
		case errors.Is(err, record.ErrNotFound):
			continue // gone: nothing to count on
		case err != nil:
			return err
		}
		keys[i] = s.recordKey(l.tag, id)
	}
	cmds, replicas := s.pipe(ctx, len(ids), func(p redis.Pipeliner, i int, full bool) {
		if keys[i] != "" {
			s.eval(ctx, p, attachScript, full, []string{keys[i]}, ns[i])
		}
	})
	var done []string
	var doneN []int32
	var first error
	for i := range ids {
		if len(cmds[i]) > 0 {
			if err := cmds[i][0].Err(); err != nil {
				first = cmp.Or(first, err)
				continue // kept for the next try
			}
		}
		done, doneN = append(done, ids[i]), append(doneN, ns[i])
	}
	s.attaches.Written(done, doneN)
	if replicas != nil && len(done) > 0 {
		// Written on the master: sent again, they would count twice.
		s.log.Warn("the counts of attached callers were written, unconfirmed by the replicas asked for", "store", s.name, "err", replicas)
	}
	return first
}
