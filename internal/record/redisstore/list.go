package redisstore

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

var _ record.Lister = (*Store)(nil)

// listBatch is how many keys one SCAN step asks for, and one pipeline
// reads.
const listBatch = 1000

// List implements record.Lister. Records have no index by time, so it
// scans the keys under the prefix (SCAN, listBatch at a time; on every
// master of a Cluster) and reads the records whose id is late enough: its
// cost grows with the database. It is meant for the activity commands,
// not for the request path.
func (s *Store) List(ctx context.Context, f record.Filter) ([]*record.Record, error) {
	op := "listing executions"
	if err := ctx.Err(); err != nil {
		return nil, s.wrap(op, err)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	floor := ""
	if !f.Since.IsZero() {
		floor = record.IDFloor(f.Since)
	}
	var mu sync.Mutex // protects recs: a Cluster's masters are scanned at once
	var recs []*record.Record
	// keep trims recs to the newest limit once it holds twice that.
	keep := func(force bool) {
		if len(recs) < 2*limit && !force {
			return
		}
		slices.SortFunc(recs, func(a, b *record.Record) int { return strings.Compare(b.ID, a.ID) })
		if len(recs) > limit {
			clear(recs[limit:])
			recs = recs[:limit]
		}
	}
	add := func(batch []*record.Record) {
		mu.Lock()
		defer mu.Unlock()
		recs = append(recs, batch...)
		keep(false)
	}
	err := s.eachMaster(ctx, func(ctx context.Context, c redis.UniversalClient) error {
		return s.listOn(ctx, c, f, floor, add)
	})
	if err != nil {
		return nil, s.wrap(op, err)
	}
	keep(true)
	return recs, nil
}

// listOn scans the records on the server c, reads those whose id is not
// before floor, and passes those f matches to add, a batch at a time.
func (s *Store) listOn(ctx context.Context, c redis.UniversalClient, f record.Filter, floor string, add func([]*record.Record)) error {
	pattern := globEscape(s.prefix) + "{*}:r:*"
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, pattern, listBatch).Result()
		if err != nil {
			return err
		}
		keys = slices.DeleteFunc(keys, func(k string) bool {
			_, id, _ := strings.Cut(k, "}:r:")
			return id < floor
		})
		if len(keys) > 0 {
			reading, err := s.attaches.Begin(ctx)
			if err != nil {
				return err
			}
			cmds := make([]*redis.MapStringStringCmd, len(keys))
			if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i, k := range keys {
					cmds[i] = p.HGetAll(ctx, k)
				}
				return nil
			}); err != nil {
				return err
			}
			var batch []*record.Record
			for _, c := range cmds {
				if len(c.Val()) == 0 {
					continue // expired since the scan
				}
				r, err := decode(c.Val())
				if err != nil {
					return err
				}
				if f.Matches(r) {
					batch = append(batch, r)
				}
			}
			if batch, err = reading.ShowAll(ctx, batch, s.storedAttached); err != nil {
				return err
			}
			add(batch)
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// globEscape escapes the characters special in a SCAN pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`*?[]\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}
