package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// In a Redis Cluster (a URL with cluster=true) the store runs on
// go-redis's ClusterClient, which sends each command to the master of its
// key's slot. Every script keeps to one slot (doc.go), and a pipeline of
// them is split by master and sent to each at once: the scripts of a
// batch still take one round trip, to each master they touch.
//
// What differs from one server:
//
//   - The index of a record (Pi:<id>) is in another slot than the
//     record, so the reservation script cannot write it: a won
//     reservation writes it in a round trip of its own (indexWon).
//   - The library of functions is loaded on every master, and again on
//     every master when one lacks it (a new master, or one that lost it);
//     the call that found it missing is sent again with its script in
//     full, as on one server (functions.go).
//   - List scans every master.
//   - Each master's part of a pipeline ends with a WAIT of its own
//     (Options.WaitReplicas), and waits for its own connection pool
//     (queue.go): the hooks are the masters' clients', not the Cluster's.
//   - Settles are published with PUBLISH, which a Cluster sends to every
//     node, so the store's one subscription, on any node, hears them all.
//     Sharded pub/sub (SPUBLISH) would need a channel in the slot of each
//     script's keys, and a subscription to every slot's channel.
//   - The client neither follows a MOVED or ASK reply nor tries a command
//     again (connect.go): a call whose slot moved fails, closed (nothing
//     ran), and the client reloads the Cluster's layout, as it does when a
//     master stops answering (relocator), so the next call goes where the
//     slot went.

// addHooks adds the store's go-redis hooks to c: to the client of one
// server, or to the client of each node of a Cluster.
func addHooks(c client, opts Options) {
	hook := func(rdb *redis.Client) {
		rdb.AddHook(&queue{})
		if opts.WaitReplicas > 0 {
			rdb.AddHook(&replicated{n: opts.WaitReplicas, timeout: opts.WaitTimeout})
		}
		rdb.AddHook(unsent{}) // innermost: next to the pipeline's send
	}
	if c.cluster == nil {
		hook(c.rdb.(*redis.Client))
		return
	}
	c.cluster.OnNewNode(func(rdb *redis.Client) {
		rdb.AddHook(relocator{c.cluster})
		hook(rdb)
	})
}

// eachMaster calls fn with the client of the server, or of each master of
// a Cluster, all at once; it returns the first error.
func (s *Store) eachMaster(ctx context.Context, fn func(ctx context.Context, c redis.UniversalClient) error) error {
	if s.cluster == nil {
		return fn(ctx, s.rdb)
	}
	return s.cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		if err := fn(ctx, c); err != nil {
			return fmt.Errorf("master %s: %w", c.Options().Addr, err)
		}
		return nil
	})
}

// indexWon writes, in a Cluster, the index of the record id that a
// reservation won, which the script could not: it is in another slot.
// It goes in the next batch, with a WAIT if the store waits for
// replicas. A reservation whose index could not be written fails, and
// the proxy sends nothing: another process could not find the record by
// its id.
func (s *Store) indexWon(ctx context.Context, id, tag string) error {
	cmds, replicas, err := s.send(ctx, func(p redis.Pipeliner, _ bool) {
		p.Set(ctx, s.indexKey(id), tag, indexFlightTTL)
	})
	if err == nil {
		err = cmds[0].Err()
	}
	if err == nil {
		err = replicas
	}
	if err != nil {
		return fmt.Errorf("writing its index: %w", err)
	}
	return nil
}

// madeError is the error of a reservation made whose index could not be
// written. It hides a failed connection to the index's master, which
// would say the call never reached the store: the proxy then takes the
// reservation for never made, and leaves it in flight, its lease renewed
// and every retry of the call waiting on it, where it must fail it.
type madeError struct{ err error }

func (e madeError) Error() string { return e.err.Error() }

// Unwrap keeps the errors callers check for that hold of a made
// reservation too: replicas that did not confirm it, the context's end.
func (e madeError) Unwrap() []error {
	var keep []error
	for _, target := range []error{ErrNotReplicated, context.Canceled, context.DeadlineExceeded} {
		if errors.Is(e.err, target) {
			keep = append(keep, target)
		}
	}
	return keep
}

// checkMasters warns, as checkServer does, of each master of a Cluster
// that evicts keys, or has fewer than n replicas online.
func (s *Store) checkMasters(ctx context.Context, n int) {
	err := s.cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		s.checkEviction(ctx, c)
		if n == 0 {
			return nil
		}
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if online := onlineReplicas(info); online < n {
			s.log.Warn("fewer replicas online than wait_replicas asks for: until more link, every write to this master fails after wait_timeout",
				"store", s.name, "master", c.Options().Addr, "wait_replicas", n, "online", online)
		}
		return nil
	})
	if err != nil {
		s.log.Debug("reading INFO replication", "store", s.name, "err", err)
	}
}

// relocate has a Cluster's client reload the Cluster's layout: the
// subscription's node stopped answering.
func (s *Store) relocate(ctx context.Context) {
	if s.cluster != nil {
		s.cluster.ReloadState(ctx)
	}
}

// relocator is a go-redis hook on each node of a Cluster: when a node
// does not answer, the client reloads the Cluster's layout (go-redis
// does so itself after a MOVED reply, and once a minute). After a
// failover the calls on the old master's slots then go to the new one as
// soon as the Cluster has promoted it, not a minute later. Reloads are
// made one at a time, at most five a second.
type relocator struct{ c *redis.ClusterClient }

func (r relocator) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r relocator) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if cmd.Name() != "cluster" {
			// Not the reload's own CLUSTER SLOTS: a dead node it
			// tried would have it reload again, and again.
			r.check(ctx, err)
		}
		return err
	}
}

func (r relocator) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		r.check(ctx, err)
		return err
	}
}

func (r relocator) check(ctx context.Context, err error) {
	if _, answered := errors.AsType[redis.Error](err); err == nil || answered || ctx.Err() != nil {
		return
	}
	r.c.ReloadState(ctx)
}
