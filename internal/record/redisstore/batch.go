package redisstore

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record/batch"
)

// The scripts of Reserve and Update are sent in batches (package batch):
// the scripts of every call waiting, up to maxBatch, go in one pipeline,
// one round trip and one write and read on each side for all. With 32
// executions in flight each paid a round trip of its own, and the
// client's and the server's system calls.
//
// A pipeline is not a transaction: Redis still runs each script alone,
// and one script's error (a script's own, a conflict) is its caller's
// only. The calls whose scripts the server had forgotten (NOSCRIPT) are
// sent again, in full, in a second pipeline, as a call alone was. An
// error of the connection fails every call of the pipeline, each as it
// would have failed alone.
//
// Each batch is one pipeline on one connection (a Sentinel's failover
// client is a Client too). On a Redis Cluster the client splits it by
// master and sends the parts at once, each on one connection, every
// script keeping to its one slot (cluster.go).
const (
	maxBatch = 64
	// senders is how many pipelines are sent at once, by the senders or
	// by callers alone: while one waits for its replies the next is
	// sent, so a round trip does not hold the others up.
	senders = 2
)

// A call is one caller's commands.
type call struct {
	// fill queues the call's commands on p, the scripts by their hash or,
	// if full, in full.
	fill func(p redis.Pipeliner, full bool)
	cmds []redis.Cmder // the commands fill queued, with their replies
	// replicas is why the replicas asked for did not confirm the
	// pipeline's writes, or nil (replicas.go).
	replicas error
}

// send runs the commands fill queues in one round trip, batched with
// other callers', and returns them, each with its result or error, as
// pipe does for a caller alone, and why the replicas asked for did not
// confirm their writes (nil if they did). A caller whose ctx ends, or
// whose Store closes, while its call still waits gets ctx.Err()
// (redis.ErrClosed) and its commands are not sent.
func (s *Store) send(ctx context.Context, fill func(p redis.Pipeliner, full bool)) ([]redis.Cmder, error, error) {
	c := &call{fill: fill}
	if err := s.batch.Do(ctx, c); err != nil {
		if errors.Is(err, batch.ErrClosed) {
			return nil, nil, redis.ErrClosed
		}
		return nil, nil, err
	}
	return c.cmds, c.replicas, nil
}

// sendBatch sends calls in one pipeline, and once more, in full, the
// calls whose scripts the server had forgotten.
func (s *Store) sendBatch(ctx context.Context, calls []*batch.Call[*call]) {
	s.exec(ctx, calls, false)
	var again []*batch.Call[*call]
	for _, c := range calls {
		if forgotten(c.Job.cmds) {
			again = append(again, c)
		}
	}
	if len(again) > 0 {
		// What the calls run is safe to run twice: a script the server
		// did not know did not run.
		s.relearn(ctx)
		s.exec(ctx, again, true)
	}
}

// exec sends the commands of calls in one pipeline and gives each call
// its own.
func (s *Store) exec(ctx context.Context, calls []*batch.Call[*call], full bool) {
	p := s.rdb.Pipeline()
	ends := make([]int, len(calls))
	for i, c := range calls {
		c.Job.fill(p, full)
		ends[i] = p.Len()
	}
	var r replication
	cmds, _ := p.Exec(withReplication(ctx, &r))
	start := 0
	for i, c := range calls {
		c.Job.cmds = cmds[start:ends[i]:ends[i]]
		c.Job.replicas = r.err
		start = ends[i]
	}
}
