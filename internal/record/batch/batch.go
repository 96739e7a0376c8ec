// Package batch sends the writes of concurrent callers to a store
// together: one round trip, and where the store allows one commit, for
// what would each have paid alone.
//
// A Queue's senders take every call waiting, up to the batch's limit, and
// hand them to the store's send function at once. They never wait for
// more to come. A call that finds nothing waiting and a sender free is
// sent by its caller, alone, as it would be without the queue: batching
// costs a caller alone nothing, and helps only when calls wait anyway.
package batch

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed is the error of a call whose Queue closed before it was sent.
var ErrClosed = errors.New("batch: queue closed")

// A Call is one caller's job, queued or being sent.
type Call[J any] struct {
	// Ctx is the caller's. A call whose caller left before it was sent
	// is not sent.
	Ctx context.Context
	// Job is what the caller asked for; send writes its answer there.
	Job J

	state atomic.Int32 // queued, then taken by a sender or left by the caller
	err   error        // Ctx.Err() of a call found left when taken; set before done is closed
	done  chan struct{}
}

const (
	queued = iota
	taken
	left
)

// A Queue batches the calls of concurrent callers for one store.
type Queue[J any] struct {
	max  int
	send func(ctx context.Context, calls []*Call[J])

	queue   chan *Call[J]
	sending chan struct{} // holds a token for each batch being sent
	parked  atomic.Int32  // senders holding a call from the queue while they wait for a token
	closed  chan struct{} // closed by Close
	wg      sync.WaitGroup
}

// Start returns a Queue that sends batches of at most max calls, at most
// senders batches at once, with send. send answers every call it is
// given through its Job, under ctx (batchContext), and returns once each
// is answered.
func Start[J any](max, senders int, send func(ctx context.Context, calls []*Call[J])) *Queue[J] {
	q := &Queue[J]{
		max:     max,
		send:    send,
		queue:   make(chan *Call[J], 2*max),
		sending: make(chan struct{}, senders),
		closed:  make(chan struct{}),
	}
	for range senders {
		q.wg.Go(q.sender)
	}
	return q
}

// Close stops the senders once the batches they are sending are
// answered. Calls still queued are answered by their callers, which also
// watch for it, with ErrClosed.
func (q *Queue[J]) Close() {
	close(q.closed)
	q.wg.Wait()
}

// Queued returns how many calls wait for a sender.
func (q *Queue[J]) Queued() int { return len(q.queue) + int(q.parked.Load()) }

// Do sends job, batched with other callers' jobs, and returns once send
// has answered it. A caller whose ctx ends, or whose Queue closes, while
// its call still waits in the queue gets ctx.Err() (ErrClosed) and its
// job is not sent. Once a sender has taken it, it is seen through: its
// answer comes as send gives it, within the batch's context
// (batchContext).
func (q *Queue[J]) Do(ctx context.Context, job J) error {
	c := &Call[J]{Ctx: ctx, Job: job, done: make(chan struct{})}
	if len(q.queue) == 0 {
		select {
		case <-q.closed:
			return ErrClosed
		case q.sending <- struct{}{}:
			// Nothing waits and a batch may go: the caller sends its
			// call itself. The handoff to a sender and back cost a call
			// alone about a tenth of its time on a busy 2-core machine.
			c.state.Store(taken)
			q.sendBatch([]*Call[J]{c})
			<-q.sending
			return c.err
		default:
		}
	}
	select {
	case q.queue <- c:
	case <-ctx.Done():
		return ctx.Err()
	case <-q.closed:
		return ErrClosed
	}
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
	case <-q.closed:
	}
	if c.state.CompareAndSwap(queued, left) {
		if err := ctx.Err(); err != nil {
			return err
		}
		return ErrClosed
	}
	<-c.done
	return c.err
}

// sender sends the queued calls in batches until the Queue closes.
func (q *Queue[J]) sender() {
	batch := make([]*Call[J], 0, q.max)
	for {
		batch = batch[:0]
		var first *Call[J]
		select {
		case first = <-q.queue:
		case <-q.closed:
			return
		}
		// The token is taken once there is a call: a sender holding one
		// while it waits for calls would keep a caller alone from sending
		// its own. Till then the call is still queued, and its caller may
		// leave.
		q.parked.Add(1)
		q.sending <- struct{}{}
		q.parked.Add(-1)
		batch = take(batch, first)
		// Callers answered by the last batch, ready to queue their next
		// call, run first: a yield, not a wait, so a call alone goes at
		// once.
		runtime.Gosched()
	fill:
		for len(batch) < q.max {
			select {
			case c := <-q.queue:
				batch = take(batch, c)
			default:
				break fill
			}
		}
		q.sendBatch(batch)
		<-q.sending
	}
}

// take adds c to batch unless its caller has left.
func take[J any](batch []*Call[J], c *Call[J]) []*Call[J] {
	if !c.state.CompareAndSwap(queued, taken) {
		return batch // left: its caller has returned
	}
	if err := c.Ctx.Err(); err != nil {
		c.err = err
		close(c.done)
		return batch
	}
	return append(batch, c)
}

// sendBatch has send answer batch, and then its callers.
func (q *Queue[J]) sendBatch(batch []*Call[J]) {
	if len(batch) == 0 {
		return
	}
	ctx, cancel := batchContext(batch)
	defer cancel()
	q.send(ctx, batch)
	for _, c := range batch {
		close(c.done)
	}
}

// batchContext returns the context a batch is sent under. A call alone is
// sent under its caller's, as it would be without batching. A batch of
// several has the latest of their deadlines (none if one has none), so
// that no caller's deadline cuts the others' answers short, and is
// cancelled once every caller has left, which ends a wait for a pooled
// connection that no caller waits for any more.
func batchContext[J any](batch []*Call[J]) (context.Context, context.CancelFunc) {
	if len(batch) == 1 {
		return batch[0].Ctx, func() {}
	}
	var latest time.Time
	for _, c := range batch {
		d, ok := c.Ctx.Deadline()
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
	var remaining atomic.Int32
	remaining.Store(int32(len(batch)))
	stops := make([]func() bool, 0, len(batch))
	for _, c := range batch {
		stops = append(stops, context.AfterFunc(c.Ctx, func() {
			if remaining.Add(-1) == 0 {
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
