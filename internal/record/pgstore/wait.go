package pgstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// waiters fans one notification for a record out to every Wait of it in
// this process.
type waiters struct {
	mu sync.Mutex          // protects m
	m  map[string]*waitGen // by record id
}

// A waitGen is the channel the current waiters of one record share; a
// notification closes it and the next waiters get a new one.
type waitGen struct {
	ch   chan struct{}
	refs int // waiters holding ch; w.mu protects it
}

// add registers a waiter of id and returns what it waits on.
func (w *waiters) add(id string) *waitGen {
	w.mu.Lock()
	defer w.mu.Unlock()
	g := w.m[id]
	if g == nil {
		g = &waitGen{ch: make(chan struct{})}
		w.m[id] = g
	}
	g.refs++
	return g
}

// remove unregisters a waiter that add returned g to.
func (w *waiters) remove(id string, g *waitGen) {
	w.mu.Lock()
	defer w.mu.Unlock()
	g.refs--
	if g.refs == 0 && w.m[id] == g {
		delete(w.m, id)
	}
}

// wake wakes every waiter of id.
func (w *waiters) wake(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if g := w.m[id]; g != nil {
		close(g.ch)
		delete(w.m, id)
	}
}

// wakeAll wakes every waiter, to look again at records whose
// notifications may have been missed.
func (w *waiters) wakeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, g := range w.m {
		close(g.ch)
		delete(w.m, id)
	}
}

// listen starts the listener unless it runs or the store is closed.
func (s *Store) listen() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listening || s.closed {
		return
	}
	s.listening = true
	s.wg.Go(s.listenLoop)
}

// listenLoop holds the store's listening connection until Close,
// reconnecting on a backoff when it breaks. Waiters poll meanwhile.
func (s *Store) listenLoop() {
	const minBackoff, maxBackoff = 100 * time.Millisecond, 5 * time.Second
	backoff := minBackoff
	for {
		connected, err := s.listenConn()
		if s.ctx.Err() != nil {
			return
		}
		s.log.Warn("listening for settled executions", "store", s.name, "err", err)
		if connected {
			backoff = minBackoff
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-s.ctx.Done():
			t.Stop()
			return
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// listenConn opens a connection, listens on the schema's channel and wakes
// the waiters of each record notified, until the connection fails or the
// store closes. connected reports whether LISTEN succeeded.
func (s *Store) listenConn() (connected bool, err error) {
	conn, err := pgx.ConnectConfig(s.ctx, s.pool.Config().ConnConfig)
	if err != nil {
		return false, err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn.Close(ctx)
	}()
	if _, err := conn.Exec(s.ctx, "LISTEN "+s.quoted); err != nil {
		return false, err
	}
	// Whatever settled before LISTEN took effect was not notified: every
	// waiter looks again. Once the connection drops, each looks again and
	// polls until it is back.
	s.heard.Store(true)
	defer s.waiters.wakeAll()
	defer s.heard.Store(false)
	s.waiters.wakeAll()
	for {
		n, err := conn.WaitForNotification(s.ctx)
		if err != nil {
			return true, err
		}
		s.waiters.wake(n.Payload)
	}
}

var _ record.Decider = (*Store)(nil)

// Wait implements record.Store. It returns when a notification, the
// fallback poll or the lease's end finds the record settled (settling an
// orphan itself), or when ctx is done.
func (s *Store) Wait(ctx context.Context, id string) (*record.Record, error) {
	return s.wait(ctx, "waiting for "+id, id, record.State.Settled)
}

// WaitDecided implements record.Decider as Wait does: the trigger
// notifies a watched record that awaited an approval as it leaves
// accepted, whichever process decided it. One that awaited none is not
// notified as it moves on to dispatched (Wait's waiters need not be):
// the safety poll finds it.
func (s *Store) WaitDecided(ctx context.Context, id string) (*record.Record, error) {
	return s.wait(ctx, "waiting for the decision on "+id, id, func(st record.State) bool { return st != record.Accepted })
}

// wait returns the record id once it is in a state that done accepts,
// woken by the notifications of the records_settled trigger, which must
// fire on every change into such a state.
func (s *Store) wait(ctx context.Context, op, id string, done func(record.State) bool) (*record.Record, error) {
	ectx, cancel := s.bounded(ctx) // the waiting is ctx's; each step is bounded
	err := s.ensure(ectx)
	cancel()
	if err != nil {
		return nil, s.fail(op, err)
	}
	s.listen()
	reading, err := s.attaches.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	poll := s.minPoll
	for watched := false; ; watched = true {
		// Registered before reading, so that a settling committed
		// after the read still wakes this waiter.
		g := s.waiters.add(id)
		if !watched {
			if err := s.watch(ctx, id); err != nil {
				s.waiters.remove(id, g)
				return nil, s.fail(op, err)
			}
		}
		rec, err := s.boundedCheck(ctx, id)
		if err != nil || done(rec.State) {
			s.waiters.remove(id, g)
			if err == nil {
				rec, err = reading.Show(ctx, rec, s.storedAttached)
			}
			if err == nil {
				rec = record.ShowOrphanAsItself(rec)
			}
			if err != nil {
				return nil, s.wrap(op, err)
			}
			return rec, nil
		}
		next := heardPoll
		if !s.heard.Load() {
			next = poll
		}
		if !rec.LeaseUntil.IsZero() {
			// Wake as the lease lapses, to settle the orphan.
			next = max(min(next, rec.LeaseUntil.Sub(s.now())+time.Millisecond), time.Millisecond)
		}
		t := time.NewTimer(next)
		select {
		case <-g.ch:
		case <-t.C:
			poll = min(2*poll, s.maxPoll)
		case <-ctx.Done():
		}
		t.Stop()
		s.waiters.remove(id, g)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
	}
}

// watch asks the server to notify the waiters of id, within the store's
// timeout.
func (s *Store) watch(ctx context.Context, id string) error {
	conn, _, err := s.acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	_, err = conn.Exec(ctx, s.q.watch, id)
	return err
}

// boundedCheck is check within the store's timeout, once it has a
// connection.
func (s *Store) boundedCheck(ctx context.Context, id string) (*record.Record, error) {
	conn, _, err := s.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	ctx, cancel := s.bounded(ctx)
	defer cancel()
	return s.check(ctx, conn, id)
}

// check reads the record id and settles it if it is an orphan, setting
// the Orphan of the record it returns if it did.
func (s *Store) check(ctx context.Context, q db, id string) (*record.Record, error) {
	for {
		now := s.clock()
		rec, err := s.get(ctx, q, id)
		if err != nil || !rec.Orphaned(now) {
			return rec, err
		}
		rec, ok, err := s.settleOrphan(ctx, q, rec, now)
		if ok {
			return rec.WithOrphan(rec.Clone()), err
		}
		if err != nil || !rec.Orphaned(now) {
			return rec, err
		}
	}
}
