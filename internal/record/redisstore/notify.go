package redisstore

import (
	"context"
	"errors"
	"net"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A watch is the channel that the waiters of one record in this process
// share: it is closed, waking them all, when the record settles.
type watch struct {
	ch chan struct{}
	n  int // waiters holding it; s.wmu protects it
}

// watch registers a waiter of id and returns its watch.
func (s *Store) watch(id string) *watch {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	w := s.waiters[id]
	if w == nil {
		w = &watch{ch: make(chan struct{})}
		s.waiters[id] = w
	}
	w.n++
	return w
}

// unwatch removes a waiter of id; the last one out drops the watch.
func (s *Store) unwatch(id string, w *watch) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	w.n--
	if w.n == 0 && s.waiters[id] == w {
		delete(s.waiters, id)
	}
}

// wake wakes every waiter of id.
func (s *Store) wake(id string) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if w := s.waiters[id]; w != nil {
		close(w.ch)
		delete(s.waiters, id)
	}
}

// wakeAll wakes every waiter, to look again after messages may have been
// missed.
func (s *Store) wakeAll() {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	for id, w := range s.waiters {
		close(w.ch)
		delete(s.waiters, id)
	}
}

// The subscription pings the server when it has heard nothing for
// pingEvery, and after an error tries again on a backoff.
const (
	pingEvery = 30 * time.Second
	retryMin  = 100 * time.Millisecond
	retryMax  = 5 * time.Second
)

// listen is the Store's one subscription: it wakes the waiters of each id
// published on s.channel until Close. Go-redis reconnects and resubscribes
// after an error; each (re)subscription wakes every waiter, since settles
// in the gap were not heard.
func (s *Store) listen(ctx context.Context) {
	defer close(s.done)
	// The channel is recorded even when this fails, and subscribed to on
	// every connection the PubSub makes.
	_ = s.ps.Subscribe(ctx, s.channel)
	first, warned := true, false
	retry := retryMin
	for {
		m, err := s.ps.ReceiveTimeout(ctx, pingEvery)
		if ctx.Err() != nil {
			return // Close closed the connection under the read
		}
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			err = s.ps.Ping(ctx) // the answer comes as a message
			if err == nil {
				continue
			}
		}
		if err != nil {
			if !warned && errors.As(err, new(redis.Error)) && strings.HasPrefix(err.Error(), "NOPERM") {
				// Calls still settle; their waiters in other processes
				// find out by their poll alone.
				warned = true
				s.log.Warn("the store's user may not subscribe to its channel: waiters on other processes' calls learn of their outcome up to a second late",
					"store", s.name, "channel", s.channel, "err", err)
			}
			s.log.Debug("redis store subscription", "store", s.name, "err", err)
			s.relocate(ctx)
			s.wakeAll()
			t := time.NewTimer(retry)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			retry = min(2*retry, retryMax)
			continue
		}
		retry = retryMin
		switch m := m.(type) {
		case *redis.Message:
			s.wake(m.Payload)
		case *redis.Subscription:
			if m.Kind != "subscribe" {
				continue
			}
			if first {
				first = false
				close(s.subscribed)
			}
			s.wakeAll()
		}
	}
}
