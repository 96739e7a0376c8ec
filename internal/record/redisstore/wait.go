package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// Wait implements record.Store.
func (s *Store) Wait(ctx context.Context, id string) (*record.Record, error) {
	return s.waitUntil(ctx, "waiting for "+id, id, func(r *record.Record) bool { return r.State.Settled() })
}

// WaitDecided implements record.Decider. A decision is published as a
// settle is (see the package doc), so it wakes the same watches.
func (s *Store) WaitDecided(ctx context.Context, id string) (*record.Record, error) {
	return s.waitUntil(ctx, "waiting for the decision on "+id, id, func(r *record.Record) bool { return r.State != record.Accepted })
}

// waitUntil returns the record id once done reports true of it, woken
// by its published changes and checking on a backoff besides.
func (s *Store) waitUntil(ctx context.Context, op, id string, done func(*record.Record) bool) (*record.Record, error) {
	reading, l, _, err := s.find(ctx, op, id)
	if err != nil {
		return nil, err
	}
	poll := s.pollMin
	for {
		// Watch before reading, so a settle after the read is not missed.
		w := s.watch(id)
		rec, err := s.check(ctx, l, id)
		if err != nil || done(rec) {
			s.unwatch(id, w)
			if err == nil {
				rec, err = reading.Show(ctx, rec, s.storedAttached)
			}
			if err == nil {
				rec = record.ShowOrphanAsItself(rec)
			}
			if cerr := ctxErr(ctx); err != nil && cerr != nil {
				// The deadline passed with a command on the wire: the
				// client says i/o timeout, and the caller's deadline is
				// what happened (Store.Wait returns ctx's error).
				return nil, fmt.Errorf("%s: %w", op, cerr)
			}
			if err != nil {
				return nil, s.wrap(op, err)
			}
			return rec, nil
		}
		woken, err := s.sleep(ctx, w, poll, rec.LeaseUntil)
		s.unwatch(id, w)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		if woken {
			poll = s.pollMin
		} else {
			poll = min(2*poll, s.pollMax)
		}
	}
}

// ctxErr returns ctx's error, or context.DeadlineExceeded once ctx's
// deadline has passed: the client's read times out at the deadline, a
// moment before the context itself says so.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// sleep waits for w to be woken, poll to pass, or lease (if set) to lapse,
// so that an orphan is noticed. It reports whether w was woken.
func (s *Store) sleep(ctx context.Context, w *watch, poll time.Duration, lease time.Time) (bool, error) {
	var lapse <-chan time.Time
	if !lease.IsZero() {
		t := time.NewTimer(lease.Sub(s.now()) + time.Millisecond)
		defer t.Stop()
		lapse = t.C
	}
	t := time.NewTimer(poll)
	defer t.Stop()
	select {
	case <-w.ch:
		return true, nil
	case <-t.C:
	case <-lapse:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	return false, nil
}

// check reads the record id for a waiter, settling it if it is an orphan.
// Once sent, the script runs, even if ctx ends while it waits behind
// other commands: its answer is read, bounded by the store's own
// timeout, so that the orphan it settles is reported (Record.Orphan).
func (s *Store) check(ctx context.Context, l loc, id string) (*record.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ioTimeout)
	defer cancel()
	cmd, replicas := s.run(ctx, checkScript, []string{s.recordKey(l.tag, id), s.holderKey(l.tag)}, s.clock(), s.channel, id)
	v, err := cmd.Slice()
	if err == nil && len(v) == 0 {
		err = errors.New("empty reply")
	}
	if err != nil {
		return nil, err
	}
	if status, _ := v[0].(string); status == "notfound" {
		s.tags.Drop(id)
		return nil, record.ErrNotFound
	}
	if len(v) < 3 {
		return nil, fmt.Errorf("unexpected reply %v", v)
	}
	rec, err := s.decodeReply(v[2], l.tag)
	if ttl, _ := v[1].(int64); ttl > 0 {
		// Settled by this call: the script gives a settled orphan a TTL.
		s.orphanSettled(ctx, id, ttl)
		if replicas != nil {
			return nil, replicas // settled, unconfirmed
		}
		if err == nil {
			rec.Orphan = rec.Clone()
		}
	}
	return rec, err
}
