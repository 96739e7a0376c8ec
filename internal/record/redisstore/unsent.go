package redisstore

import (
	"context"
	"errors"
	"net"

	"github.com/redis/go-redis/v9"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// unsent is a go-redis hook that gives every command of a pipeline the
// pipeline's error when none of them has one. go-redis fails a pipeline
// whose connection it could not set up (a wrong password, a database
// number the server does not have) without marking its commands, and
// their empty replies would read as answers: "holds 0 bytes under
// secret", "unexpected type=<nil>", in place of the server's own reason.
// It marks that error, and a failed dial's, as never sent (unsentError).
type unsent struct{}

// DialHook marks the error of a dial that failed: the commands that
// wanted the connection were not sent.
func (unsent) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			return nil, unsentError{err}
		}
		return c, nil
	}
}

func (unsent) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (unsent) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err == nil {
			return nil
		}
		for _, c := range cmds {
			if c.Err() != nil {
				return err
			}
		}
		for _, c := range cmds {
			c.SetErr(unsentError{err})
		}
		return err
	}
}

// unsentError is the error of a command that was never sent: no
// connection could be had or set up for its pipeline.
type unsentError struct{ error }

func (e unsentError) Unwrap() error { return e.error }

// notSent marks err record.ErrNotSent if it is a command's that was
// never sent: its connection could not be made or set up, or none came
// free within the pool's timeout.
func notSent(err error) error {
	if _, ok := errors.AsType[unsentError](err); ok || errors.Is(err, redis.ErrPoolTimeout) {
		return record.NotSent(err)
	}
	return err
}
