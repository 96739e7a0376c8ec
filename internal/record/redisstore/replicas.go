package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis replicates asynchronously: a master acknowledges a write before
// any replica has it, and a failover to a replica that had not got it
// loses it; a reservation lost so lets the same call run again. With
// Options.WaitReplicas, every pipeline that may write ends with WAIT, on
// the same connection, which returns once that many replicas have every
// write made before it there. If fewer confirm within the timeout, a call
// that wrote fails with ErrNotReplicated: its write ran on the master, and
// the proxy treats a reservation failed so as one whose answer was lost.
// A call whose script only read (a replay, a waiter's check of a record
// in flight) is answered: WAIT protects writes, not what a read saw.
// WAIT makes an acknowledged write outlive its master; it does not make
// Redis a consensus store (a Sentinel may still promote a replica that
// lacks it, though it prefers the most up to date).

// ErrNotReplicated is the error of a write that fewer replicas than
// Options.WaitReplicas confirmed in time. The write ran on the master.
var ErrNotReplicated = errors.New("fewer replicas than asked for confirmed the write")

// replicated is a go-redis hook that ends each pipeline that may write
// with WAIT n timeout. If fewer than n replicas confirm, it tells the
// pipeline's sender (withReplication), who knows which of its calls
// wrote; a sender that does not ask has every command of the pipeline
// fail. Every write the store relies on goes in a pipeline; the few
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
		if r, ok := ctx.Value(replicationKey{}).(*replication); ok {
			r.set(werr)
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

// A replication is the outcome of the WAIT that ended a pipeline: nil if
// enough replicas confirmed its writes, or if it had no WAIT. In a
// Cluster a pipeline is sent to each master at once, each part ending
// with a WAIT of its own; err is the first that failed. It is read once
// the pipeline has returned.
type replication struct {
	mu  sync.Mutex // protects err while the pipeline is sent
	err error
}

// set keeps err, unless an earlier part of the pipeline failed.
func (r *replication) set(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
}

type replicationKey struct{}

// withReplication returns ctx with r, where the hook leaves the outcome
// of the WAIT of the pipeline sent under it, instead of failing its
// commands.
func withReplication(ctx context.Context, r *replication) context.Context {
	return context.WithValue(ctx, replicationKey{}, r)
}

// minWaitMargin is the least time a pipeline's read allows past its
// WAIT's timeout: Redis answers a WAIT that timed out a little late (about
// 100 ms on 7.0), and a read cut off there would fail the replies read
// before it too.
const minWaitMargin = 250 * time.Millisecond

// checkWait refuses a wait for replicas that a read could cut off.
func checkWait(n int, wait, read time.Duration) error {
	margin := max(minWaitMargin, read/4)
	switch {
	case n < 0:
		return fmt.Errorf("waiting for %d replicas: want at least one", n)
	case n == 0:
		return nil
	case wait < time.Millisecond:
		// WAIT n 0 waits for ever.
		return fmt.Errorf("a wait for replicas of %v: want at least 1ms", wait)
	case read > 0 && wait > read-margin:
		return fmt.Errorf("a wait for replicas of %v leaves the read timeout of %v less than %v past it: shorten the wait or raise read_timeout", wait, read, margin)
	}
	return nil
}

// checkServer warns when the server cannot take the store's writes as
// asked: it is a replica, which refuses them (or keeps them from the
// master and its other replicas), or a master with fewer than n replicas
// online (Options.WaitReplicas), whose every write then fails after the
// wait until more link. It warns rather than refuses, since a replica may
// be on its way back (a restart, a failover), and meanwhile replays and
// calls passed through still work.
func (s *Store) checkServer(ctx context.Context, n int) {
	if s.cluster != nil {
		s.checkMasters(ctx, n)
		return
	}
	s.checkEviction(ctx, s.rdb)
	info, err := s.rdb.Info(ctx, "replication").Result()
	if err != nil {
		// An ACL may keep INFO from the store's user; the calls that
		// need the server report anything worse.
		s.log.Debug("reading INFO replication", "store", s.name, "err", err)
		return
	}
	if role := infoField(info, "role"); role == "slave" || role == "replica" {
		s.log.Warn("the store's server is a replica, not a master: give the master's address, or a Sentinel's",
			"store", s.name, "role", role)
		return
	}
	if online := onlineReplicas(info); online < n {
		s.log.Warn("fewer replicas online than wait_replicas asks for: until more link, every write fails after wait_timeout",
			"store", s.name, "wait_replicas", n, "online", online)
	}
}

// checkEviction warns when the server c evicts keys at its maxmemory:
// the records in flight and the settled ones have TTLs, and an evicted
// one lets its call run again, as data lost does. A full server that
// does not evict (noeviction) fails new calls closed instead.
func (s *Store) checkEviction(ctx context.Context, c redis.Cmdable) {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		// A server that answered, an ACL keeping INFO from the store's
		// user, leaves the eviction unchecked: say so, as a policy that
		// evicts would be said.
		if errors.As(err, new(redis.Error)) {
			s.log.Warn("cannot read INFO memory to check that the store's server evicts no keys: a record it evicts lets its call run again; make sure its maxmemory-policy is noeviction",
				"store", s.name, "err", err)
			return
		}
		s.log.Debug("reading INFO memory", "store", s.name, "err", err)
		return
	}
	limit, policy := infoField(info, "maxmemory"), infoField(info, "maxmemory_policy")
	if limit != "" && limit != "0" && policy != "" && policy != "noeviction" {
		s.log.Warn("the store's server evicts keys when full: a record it evicts lets its call run again; set maxmemory-policy noeviction",
			"store", s.name, "maxmemory", limit, "maxmemory_policy", policy)
	}
}

// infoField returns the value of name in the text of an INFO section.
func infoField(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// onlineReplicas counts the replicas that INFO replication, from a
// master, lists as online: lines such as
// "slave0:ip=10.0.0.2,port=6379,state=online,offset=42,lag=0" (or
// "replica0:", should a server name them so).
func onlineReplicas(info string) int {
	n := 0
	for line := range strings.Lines(info) {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		digits, slave := strings.CutPrefix(name, "slave")
		if !slave {
			digits, _ = strings.CutPrefix(name, "replica")
		}
		if !ok || digits == name || digits == "" || strings.Trim(digits, "0123456789") != "" {
			continue
		}
		if slices.Contains(strings.Split(fields, ","), "state=online") {
			n++
		}
	}
	return n
}

// readOnly names the commands the store sends that never write, and
// those go-redis sends to set up each connection it opens (a WAIT after
// them made every new connection wait out the timeout while a replica was
// down).
var readOnly = map[string]bool{
	"get": true, "hget": true, "hgetall": true, "hmget": true, "exists": true,
	"scan": true, "ping": true, "pttl": true, "type": true, "info": true,
	"hello": true, "auth": true, "select": true, "client": true, "readonly": true,
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
