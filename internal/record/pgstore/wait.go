package pgstore

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
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
