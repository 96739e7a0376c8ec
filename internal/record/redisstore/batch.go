package redisstore

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The scripts of Reserve and Update are sent in batches: a sender
// goroutine takes every call waiting in the queue, up to maxBatch, and
// sends their commands in one pipeline, one round trip and one write and
// read on each side for all. It never waits for more to come. A call
// that finds nothing waiting and a pipeline free is sent by its caller,
// alone, as before. With 32 executions in flight each paid a round trip
// of its own, and the client's and the server's system calls.
//
// A pipeline is not a transaction: Redis still runs each script alone,
// and one script's error (a script's own, a conflict) is its caller's
// only. The calls whose scripts the server had forgotten (NOSCRIPT) are
// sent again, in full, in a second pipeline, as a call alone was. An
// error of the connection fails every call of the pipeline, each as it
// would have failed alone.
//
// Each batch is one pipeline on one connection (a Sentinel's failover
// client is a Client too). A ClusterClient would split it by node and
// send the parts at once, every script keeping to its one slot; the
// store has no Cluster client yet (see doc.go).
const (
	maxBatch = 64
	// senders is how many pipelines are sent at once, by the senders or
	// by callers alone: while one waits for its replies the next is
	// sent, so a round trip does not hold the others up.
	senders = 2
	// queueLen is how many calls may wait beyond the batches being
	// sent; callers past it wait to join the queue.
	queueLen = 2 * maxBatch
)

// A call is one caller's commands, queued for a sender.
type call struct {
	ctx context.Context // the caller's: a call whose caller left before it was sent is not sent
	// fill queues the call's commands on p, the scripts by their hash or,
	// if full, in full.
	fill  func(p redis.Pipeliner, full bool)
	state atomic.Int32  // callQueued, then callTaken by a sender or callLeft by the caller
	cmds  []redis.Cmder // set by whoever sends it before it closes done
	err   error         // ctx.Err() of a caller that left before its call was sent; set before done is closed
	done  chan struct{}
}

const (
	callQueued = iota
	callTaken
	callLeft
)

// batcher holds the queue and its senders.
type batcher struct {
	queue   chan *call
	sending chan struct{} // holds a token for each pipeline being sent, senders at most
	parked  atomic.Int32  // senders holding a call from the queue while they wait for a token
	closed  chan struct{} // closed by stopBatcher
	wg      sync.WaitGroup
}

// startBatcher starts the senders of s.
func (s *Store) startBatcher() {
	s.batch = batcher{
		queue:   make(chan *call, queueLen),
		sending: make(chan struct{}, senders),
		closed:  make(chan struct{}),
	}
	for range senders {
		s.batch.wg.Go(s.sender)
	}
}

// stopBatcher stops the senders once the batches they are sending are
// answered. Calls still queued are answered by their callers, which
// also watch closed.
func (s *Store) stopBatcher() {
	close(s.batch.closed)
	s.batch.wg.Wait()
}

// send runs the commands fill queues in one round trip, batched with
// other callers', and returns them, each with its result or error, as
// pipe does for a caller alone. A caller whose ctx ends, or whose Store
// closes, while its call still waits in the queue gets ctx.Err()
// (redis.ErrClosed) and its commands are not sent; once a sender has
// taken it, it is seen through: its caller has the replies, if they
// come by the latest deadline of the batch's callers and within the
// client's timeouts (batchContext).
func (s *Store) send(ctx context.Context, fill func(p redis.Pipeliner, full bool)) ([]redis.Cmder, error) {
	c := &call{ctx: ctx, fill: fill, done: make(chan struct{})}
	if len(s.batch.queue) == 0 {
		select {
		case <-s.batch.closed:
			return nil, redis.ErrClosed
		case s.batch.sending <- struct{}{}:
			// Nothing waits and a pipeline may go: the caller sends its
			// call itself. The handoff to a sender and back cost a call
			// alone about a tenth of its time on a busy 2-core machine.
			c.state.Store(callTaken)
			s.sendBatch([]*call{c})
			<-s.batch.sending
			return c.cmds, c.err
		default:
		}
	}
	select {
	case s.batch.queue <- c:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.batch.closed:
		return nil, redis.ErrClosed
	}
	select {
	case <-c.done:
		return c.cmds, c.err
	case <-ctx.Done():
	case <-s.batch.closed:
	}
	if c.state.CompareAndSwap(callQueued, callLeft) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		return nil, redis.ErrClosed
	}
	<-c.done
	return c.cmds, c.err
}

// sender sends the queued calls in batches until the Store closes.
func (s *Store) sender() {
	batch := make([]*call, 0, maxBatch)
	for {
		batch = batch[:0]
		var first *call
		select {
		case first = <-s.batch.queue:
		case <-s.batch.closed:
			return
		}
		// The token is taken once there is a call: a sender holding one
		// while it waits for calls would keep a caller alone from sending
		// its own. Till then the call is still queued, and its caller may
		// leave.
		s.batch.parked.Add(1)
		s.batch.sending <- struct{}{}
		s.batch.parked.Add(-1)
		batch = takeCall(batch, first)
		// Callers answered by the last batch, ready to queue their next
		// call, run first: a yield, not a wait, so a call alone goes at
		// once.
		runtime.Gosched()
	fill:
		for len(batch) < maxBatch {
			select {
			case c := <-s.batch.queue:
				batch = takeCall(batch, c)
			default:
				break fill
			}
		}
		s.sendBatch(batch)
		<-s.batch.sending
	}
}

// takeCall adds c to batch unless its caller has left.
func takeCall(batch []*call, c *call) []*call {
	if !c.state.CompareAndSwap(callQueued, callTaken) {
		return batch // callLeft: its caller has returned
	}
	if err := c.ctx.Err(); err != nil {
		c.err = err
		close(c.done)
		return batch
	}
	return append(batch, c)
}

// sendBatch sends batch in one pipeline, and once more, in full, the
// calls whose scripts the server had forgotten, and answers each call.
func (s *Store) sendBatch(batch []*call) {
	if len(batch) == 0 {
		return
	}
	ctx, cancel := batchContext(batch)
	defer cancel()
	s.exec(ctx, batch, false)
	var again []*call
	for _, c := range batch {
		if noScript(c.cmds) {
			again = append(again, c)
		}
	}
	if len(again) > 0 {
		// What the calls run is safe to run twice: a script the server
		// did not know did not run.
		s.exec(ctx, again, true)
	}
	for _, c := range batch {
		close(c.done)
	}
}

// exec sends the commands of calls in one pipeline and gives each call
// its own.
func (s *Store) exec(ctx context.Context, calls []*call, full bool) {
	p := s.rdb.Pipeline()
	ends := make([]int, len(calls))
	for i, c := range calls {
		c.fill(p, full)
		ends[i] = p.Len()
	}
	cmds, _ := p.Exec(ctx)
	start := 0
	for i, c := range calls {
		c.cmds = cmds[start:ends[i]:ends[i]]
		start = ends[i]
	}
}

// batchContext returns the context a batch is sent under. A call alone
// is sent under its caller's, as it was before batching. A batch of
// several has the latest of their deadlines (none if one has none), so
// that no caller's deadline cuts the others' replies short, and is
// cancelled once every caller has left, which ends a wait for a pooled
// connection that no caller waits for any more.
func batchContext(batch []*call) (context.Context, context.CancelFunc) {
	if len(batch) == 1 {
		return batch[0].ctx, func() {}
	}
	var latest time.Time
	for _, c := range batch {
		d, ok := c.ctx.Deadline()
		if !ok {
			latest = time.Time{}
			break
		}
		if d.After(latest) {
			latest = d
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	if !latest.IsZero() {
		ctx, cancel = context.WithDeadline(context.Background(), latest)
	}
	var left atomic.Int32
	left.Store(int32(len(batch)))
	stops := make([]func() bool, 0, len(batch))
	for _, c := range batch {
		stops = append(stops, context.AfterFunc(c.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		}))
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}
