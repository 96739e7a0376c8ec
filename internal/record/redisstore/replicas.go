package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis replicates asynchronously: a master acknowledges a write before
// any replica has it, and a failover to a replica that had not got it
// loses it; a reservation lost so lets the same call run again. With
// Options.WaitReplicas, every pipeline that writes ends with WAIT, on the
// same connection, which returns once that many replicas have every
// write made before it there. If fewer confirm within the timeout, the
// pipeline's commands fail with ErrNotReplicated: they ran on the master,
// and the proxy treats a reservation failed so as one whose answer was
// lost. WAIT makes an acknowledged write outlive its master; it does not
// make Redis a consensus store (a Sentinel may still promote a replica
// that lacks it, though it prefers the most up to date).

// ErrNotReplicated is the error of a write that fewer replicas than
// Options.WaitReplicas confirmed in time. The write ran on the master.
var ErrNotReplicated = errors.New("fewer replicas than asked for confirmed the write")

// replicated is a go-redis hook that ends each pipeline that writes with
// WAIT n timeout, and fails its commands if fewer than n replicas
// confirm. Every write the store relies on goes in a pipeline; the few
// single commands (the TTLs of index keys) are not waited for.
type replicated struct {
	n       int
	timeout time.Duration
}

func (r *replicated) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (r *replicated) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (r *replicated) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !writes(cmds) {
			return next(ctx, cmds)
		}
		wait := redis.NewIntCmd(ctx, "wait", r.n, r.timeout.Milliseconds())
		err := next(ctx, append(cmds[:len(cmds):len(cmds)], wait))
		got, werr := wait.Result()
		switch {
		case werr != nil:
			werr = fmt.Errorf("%w: WAIT for %d replicas: %w", ErrNotReplicated, r.n, werr)
		case got < int64(r.n):
			werr = fmt.Errorf("%w: %d of %d within %v, so a failover could lose it", ErrNotReplicated, got, r.n, r.timeout)
		default:
			return err
		}
		for _, c := range cmds {
			if c.Err() == nil {
				c.SetErr(werr)
			}
		}
		return cmp.Or(err, werr)
	}
}

// readOnly names the commands the store sends that never write.
var readOnly = map[string]bool{
	"get": true, "hget": true, "hgetall": true, "hmget": true, "exists": true,
	"scan": true, "ping": true, "pttl": true, "type": true,
}

// writes reports whether any of cmds may write; a script may.
func writes(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if !readOnly[c.Name()] {
			return true
		}
	}
	return false
}
