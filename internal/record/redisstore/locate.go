package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// tagCacheSize bounds the records whose place a Store remembers: between
// one and two times this many.
const tagCacheSize = 1 << 16

// A loc says where a record is: its tag, and its retention, which the TTL
// of its index follows.
type loc struct {
	tag       string
	retention time.Duration
}

// locate returns where the record id is, and whether this Store knew it;
// if not, it reads the index (one more round trip).
func (s *Store) locate(ctx context.Context, id string) (loc, bool, error) {
	if l, ok := s.tags.Get(id); ok {
		return l, true, nil
	}
	s.mu.Lock()
	o, ok := s.owned[s.ownerOf[id]][id]
	s.mu.Unlock()
	if ok {
		return o.loc, true, nil
	}
	tag, err := s.rdb.Get(ctx, s.indexKey(id)).Result()
	if errors.Is(err, redis.Nil) {
		return loc{}, false, record.ErrNotFound
	}
	if err != nil {
		return loc{}, false, err
	}
	return loc{tag: tag}, false, nil
}

// find begins op on the record id: it takes a Reading for the counts of
// the record's attaches (record.AttachCounts), and locates the record.
func (s *Store) find(ctx context.Context, op, id string) (record.Reading, loc, bool, error) {
	if err := ctx.Err(); err != nil {
		return record.Reading{}, loc{}, false, fmt.Errorf("%s: %w", op, err)
	}
	reading, err := s.attaches.Begin(ctx)
	if err != nil {
		return record.Reading{}, loc{}, false, fmt.Errorf("%s: %w", op, err)
	}
	l, cached, err := s.locate(ctx, id)
	if err != nil {
		return record.Reading{}, loc{}, false, s.wrap(op, err)
	}
	return reading, l, cached, nil
}
