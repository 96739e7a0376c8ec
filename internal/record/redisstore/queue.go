package redisstore

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// queue is a go-redis hook that lets a command wait for one of the pool's
// connections as long as other commands get theirs. Under a burst (2,500
// calls at once through one proxy) the queue for the pool takes longer
// than its PoolTimeout while the server answers every command, and the
// callers were told the store was unavailable. A command whose wait ran
// out is tried again if any command of the client was served meanwhile:
// it never had a connection, so nothing was sent. It fails once a whole
// PoolTimeout passes with none served, as when the server stops answering.
type queue struct {
	served atomic.Uint64 // commands and pipelines the server answered
}

func (q *queue) DialHook(next redis.DialHook) redis.DialHook { return next }

func (q *queue) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		for {
			seen := q.served.Load()
			err := next(ctx, cmd)
			if !q.again(ctx, err, seen) {
				return err
			}
			cmd.SetErr(nil)
		}
	}
}

func (q *queue) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for {
			seen := q.served.Load()
			err := next(ctx, cmds)
			if !q.again(ctx, err, seen) {
				return err
			}
			for _, cmd := range cmds {
				cmd.SetErr(nil)
			}
		}
	}
}

// again counts a command the server answered, and reports whether one
// that timed out waiting for a connection, seen being the count when it
// began, is to wait again.
func (q *queue) again(ctx context.Context, err error, seen uint64) bool {
	if _, answered := errors.AsType[redis.Error](err); err == nil || answered {
		q.served.Add(1)
		return false
	}
	return errors.Is(err, redis.ErrPoolTimeout) && ctx.Err() == nil && q.served.Load() != seen
}
