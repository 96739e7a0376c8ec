package redisstore

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// unsent is a go-redis hook that gives every command of a pipeline the
// pipeline's error when none of them has one. go-redis fails a pipeline
// whose connection it could not set up (a wrong password, a database
// number the server does not have) without marking its commands, and
// their empty replies would read as answers: "holds 0 bytes under
// secret", "unexpected type=<nil>", in place of the server's own reason.
type unsent struct{}

func (unsent) DialHook(next redis.DialHook) redis.DialHook          { return next }
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
			c.SetErr(err)
		}
		return err
	}
}
