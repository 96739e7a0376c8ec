package redisstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/redisstore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/servicetest"
)

// clusterPrefix returns a key prefix of its own, on a cluster that the
// test started and that goes with it.
func clusterPrefix() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "mcpi-test-" + hex.EncodeToString(b) + ":"
}

// TestClusterSemantics: on a Redis Cluster of three masters the store
// keeps every rule of a Store, whose keys are spread across the masters:
// the scripts, the index of a record in another slot than the record,
// pub/sub across nodes, List over every master, attach counts and
// allowances.
func TestClusterSemantics(t *testing.T) {
	c := servicetest.StartRedisCluster(t, 3, 0)
	recordtest.Run(t, func(t *testing.T, now func() time.Time) record.Store {
		return openWith(t, c.URL(), redisstore.Options{Now: now, Prefix: clusterPrefix()})
	})
	t.Run("Decisions", func(t *testing.T) {
		recordtest.RunDecisions(t, func(t *testing.T) (record.Store, record.Store) {
			prefix := clusterPrefix()
			s := openWith(t, c.URL(), redisstore.Options{Prefix: prefix})
			redisstore.SetPoll(s, time.Hour, time.Hour) // woken by pub/sub only
			select {
			case <-redisstore.Subscribed(s):
			case <-time.After(10 * time.Second):
				t.Fatal("the store never subscribed")
			}
			return s, openWith(t, c.URL(), redisstore.Options{Prefix: prefix})
		})
	})
	t.Run("AttachCounts", func(t *testing.T) {
		recordtest.RunAttachCounts(t, func(t *testing.T) (record.Store, record.Store, func(string) int) {
			prefix := clusterPrefix()
			s := openWith(t, c.URL(), redisstore.Options{Prefix: prefix})
			return s, openWith(t, c.URL(), redisstore.Options{Prefix: prefix}), func(id string) int {
				_, rec, _ := redisstore.Keys(s, "attached", id)
				n, err := redisstore.Client(s).HGet(context.Background(), rec, "attached").Int()
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
		})
	})
	t.Run("Allowances", func(t *testing.T) {
		recordtest.RunAllowances(t, func(t *testing.T) (recordtest.AllowanceStore, recordtest.AllowanceStore) {
			prefix := clusterPrefix()
			return openWith(t, c.URL(), redisstore.Options{Prefix: prefix}), openWith(t, c.URL(), redisstore.Options{Prefix: prefix})
		})
	})
}

// spread reserves n records of keys whose records fall on every master
// of c, and returns them, their master's index in c.Masters for each.
func spread(t *testing.T, c *servicetest.RedisCluster, s *redisstore.Store, n int) ([]*record.Record, []int) {
	t.Helper()
	ctx := t.Context()
	master := map[string]int{}
	for i, m := range c.Masters {
		master[m.Addr()] = i
	}
	var recs []*record.Record
	var on []int
	seen := make([]bool, len(c.Masters))
	for i := range n {
		r := newRecord("key " + strconv.Itoa(i))
		r.Owner, r.LeaseUntil = "proxy-1", time.Now().Add(time.Minute)
		if _, won, err := s.Reserve(ctx, r, record.ReserveOptions{Dispatch: true}); err != nil || !won {
			t.Fatalf("Reserve(%s) = %v, %v", r.Key, won, err)
		}
		_, key, _ := redisstore.Keys(s, r.Key, r.ID)
		m, err := redisstore.Client(s).(*redis.ClusterClient).MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		recs, on = append(recs, r), append(on, master[m.Options().Addr])
		seen[on[i]] = true
	}
	for i, ok := range seen {
		if !ok {
			t.Fatalf("none of %d records is on master %d: the test does not spread", n, i)
		}
	}
	return recs, on
}

// TestClusterFindsAndLists: a record is found by its id from another
// process from its reservation on, though its index is on another
// master; List finds the records of every master.
func TestClusterFindsAndLists(t *testing.T) {
	c := servicetest.StartRedisCluster(t, 3, 0)
	prefix := clusterPrefix()
	s := openWith(t, c.URL(), redisstore.Options{Prefix: prefix})
	other := openWith(t, c.URL(), redisstore.Options{Prefix: prefix})
	ctx := t.Context()
	recs, _ := spread(t, c, s, 30)
	for _, r := range recs {
		if got, err := other.Get(ctx, r.ID); err != nil || got.State != record.Dispatched {
			t.Fatalf("another process's Get(%s) = %v, %v; want it, dispatched", r.ID, got, err)
		}
	}
	got, err := other.List(ctx, record.Filter{})
	if err != nil || len(got) != len(recs) {
		t.Fatalf("List = %d records, %v; want all %d, from every master", len(got), err, len(recs))
	}
	for i, r := range got {
		if want := recs[len(recs)-1-i].ID; r.ID != want {
			t.Fatalf("List[%d] = %s; want %s, newest first", i, r.ID, want)
		}
	}
}

// TestClusterFunctionsOnEveryMaster: the store loads its library on
// every master, and loads it again on every master when calls find it
// missing (a new master, one that lost it), without failing a call.
func TestClusterFunctionsOnEveryMaster(t *testing.T) {
	c := servicetest.StartRedisCluster(t, 3, 0)
	s := openWith(t, c.URL(), redisstore.Options{Prefix: clusterPrefix()})
	ctx := t.Context()
	loaded := func(when string) {
		t.Helper()
		for i, m := range c.Masters {
			libs, err := m.Client().FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: redisstore.Library()}).Result()
			if err != nil || len(libs) != 1 {
				t.Errorf("%s: master %d has libraries %v (%v); want the store's", when, i, libs, err)
			}
		}
	}
	loaded("once the store opened")
	for _, m := range c.Masters {
		if err := m.Client().FunctionDelete(ctx, redisstore.Library()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	h := &names{}
	redisstore.Client(s).AddHook(h)
	recs, _ := spread(t, c, s, 30)
	for _, r := range recs {
		if _, err := s.Update(ctx, r.ID, record.Change{To: record.Completed, Result: []byte(`{}`)}); err != nil {
			t.Fatalf("Update(%s) once the library was deleted: %v", r.ID, err)
		}
	}
	loaded("after calls found it missing")
	if n := h.sent("fcall"); n < 2*len(recs)-3 {
		t.Errorf("%d of %d calls were FCALLs; want all but those that found the library missing", n, 2*len(recs))
	}
}

// TestClusterWaitReplicas: with WaitReplicas, each master's writes wait
// for its own replicas. With one master's replica down, an update fails
// with ErrNotReplicated if it wrote to that master (its record, or the
// record's index, which is in another slot), and passes if it did not.
func TestClusterWaitReplicas(t *testing.T) {
	c := servicetest.StartRedisCluster(t, 3, 1)
	s := openWith(t, c.URL(), redisstore.Options{Prefix: clusterPrefix(), WaitReplicas: 1, WaitTimeout: 500 * time.Millisecond})
	ctx := t.Context()
	recs, on := spread(t, c, s, 12)
	c.Replicas[0].Stop() // Masters[0]'s
	var failed, passed int
	for i, r := range recs {
		_, _, index := redisstore.Keys(s, r.Key, r.ID)
		m, err := redisstore.Client(s).(*redis.ClusterClient).MasterForKey(ctx, index)
		if err != nil {
			t.Fatal(err)
		}
		down := on[i] == 0 || m.Options().Addr == c.Masters[0].Addr()
		_, err = s.Update(ctx, r.ID, record.Change{To: record.Completed, Result: []byte(`{}`)})
		switch {
		case down && !errors.Is(err, redisstore.ErrNotReplicated):
			t.Errorf("Update(%s), which wrote to the master whose replica is down = %v; want ErrNotReplicated", r.ID, err)
		case !down && err != nil:
			t.Errorf("Update(%s), which wrote to masters whose replicas are up = %v", r.ID, err)
		case down:
			failed++
		default:
			passed++
		}
	}
	if failed == 0 || passed == 0 {
		t.Errorf("%d updates failed and %d passed; the test wants some of each", failed, passed)
	}
}

// TestClusterFailover: once a replica has taken over the slots of a
// master that died, the records written before are there and calls go on:
// the first call that finds the old master gone has the client reload the
// Cluster's layout (go-redis alone would wait up to a minute).
func TestClusterFailover(t *testing.T) {
	c := servicetest.StartRedisCluster(t, 3, 1)
	prefix := clusterPrefix()
	// The writes before the failover are on the replicas: the test is
	// not of asynchronous replication.
	writer := openWith(t, c.URL(), redisstore.Options{Prefix: prefix, WaitReplicas: 1, WaitTimeout: 500 * time.Millisecond})
	s := openWith(t, c.URL(), redisstore.Options{Prefix: prefix})
	ctx := t.Context()
	recs, on := spread(t, c, writer, 12)
	dead, heir := c.Masters[1], c.Replicas[1]
	dead.Stop()
	alive := []*servicetest.RedisNode{c.Masters[0], c.Masters[2], c.Replicas[0], heir, c.Replicas[2]}
	for _, n := range alive {
		servicetest.Eventually(t, "node "+n.Port+" to see the replica take over", func() error {
			slots, err := n.Client().ClusterSlots(ctx).Result()
			if err != nil {
				return err
			}
			for _, sl := range slots {
				if sl.Nodes[0].Addr == dead.Addr() {
					return fmt.Errorf("slots %d-%d are still on the dead master", sl.Start, sl.End)
				}
			}
			return nil
		})
	}
	reloads := func() int {
		n := 0
		for _, node := range alive {
			stats, err := node.Client().Info(ctx, "commandstats").Result()
			if err != nil {
				t.Fatal(err)
			}
			_, line, _ := strings.Cut(stats, "cmdstat_cluster|slots:calls=")
			calls, _, _ := strings.Cut(line, ",")
			k, _ := strconv.Atoi(calls)
			n += k
		}
		return n
	}
	before := reloads()
	first := -1
	for i := range recs {
		if on[i] == 1 {
			first = i
			break
		}
	}
	// Its record was on the dead master, and a client that has not
	// reloaded the layout since still sends it there: the call fails,
	// and the client must reload. One whose settle subscription has
	// already reconnected (go-redis reloads a layout over 10 s old then,
	// as on a busy machine, where the failover takes longer) knows the
	// new master already.
	if _, err := s.Get(ctx, recs[first].ID); err != nil {
		servicetest.Eventually(t, "the client to reload the Cluster's layout", func() error {
			if n := reloads(); n == before {
				return errors.New("no CLUSTER SLOTS since the call that failed")
			}
			return nil
		})
	} else {
		t.Logf("the client knew the new layout before its first call (%d reloads since the failover)", reloads()-before)
	}
	for i, r := range recs {
		if on[i] != 1 {
			continue
		}
		servicetest.Eventually(t, "an update on the new master", func() error {
			_, err := s.Update(ctx, r.ID, record.Change{To: record.Completed, Result: []byte(`{}`)})
			return err
		})
		if got, err := s.Get(ctx, r.ID); err != nil || got.State != record.Completed {
			t.Fatalf("after the failover: %v, %v; want the record completed", got, err)
		}
	}
}

// TestClusterScriptNotSentAgain: a script whose answer timed out is not
// sent again, though the cluster client would send it again after a MOVED
// reply: it may have run, and a reservation run twice finds itself and
// answers as a replay.
func TestClusterScriptNotSentAgain(t *testing.T) {
	c := servicetest.StartRedisCluster(t, 3, 0)
	s := openWith(t, c.URL()+"&read_timeout=200ms", redisstore.Options{Prefix: clusterPrefix()})
	ctx := t.Context()
	r := newRecord("paused")
	holder, _, _ := redisstore.Keys(s, r.Key, r.ID)
	m, err := redisstore.Client(s).(*redis.ClusterClient).MasterForKey(ctx, holder)
	if err != nil {
		t.Fatal(err)
	}
	var master *servicetest.RedisNode
	for _, n := range c.Masters {
		if n.Addr() == m.Options().Addr {
			master = n
		}
	}
	// scripts counts the scripts the master ran, as functions or not.
	scripts := func() int {
		stats, err := master.Client().Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, name := range []string{"fcall", "evalsha", "eval"} {
			_, line, _ := strings.Cut(stats, "cmdstat_"+name+":calls=")
			calls, _, _ := strings.Cut(line, ",")
			k, _ := strconv.Atoi(calls)
			n += k
		}
		return n
	}
	// Connections in the pool of the master's client, to send the script
	// again on without a handshake, which the busy master would not
	// answer: as under load.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { m.BLPop(ctx, 100*time.Millisecond, holder) })
	}
	wg.Wait()
	before := scripts()
	// A script of two seconds holds the master up: the store's script
	// waits behind it, unanswered, and its read times out.
	busy := make(chan error, 1)
	go func() {
		busy <- master.Client().Eval(ctx, "local t = redis.call('TIME'); repeat local n = redis.call('TIME') until (n[1] - t[1]) * 1e6 + n[2] - t[2] > 2e6; return 1", nil).Err()
	}()
	probe := redis.NewClient(&redis.Options{Addr: master.Addr(), ReadTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer probe.Close()
	servicetest.Eventually(t, "the busy script to run", func() error {
		if err := probe.Ping(ctx).Err(); err == nil {
			return errors.New("the master answers")
		}
		return nil
	})
	if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); err == nil {
		t.Fatal("Reserve behind a busy script succeeded; want its read to time out")
	}
	if err := <-busy; err != nil {
		t.Fatal(err)
	}
	// The busy script counts as one.
	servicetest.Eventually(t, "the reservation to run", func() error {
		if scripts()-before < 2 {
			return errors.New("no reservation has run yet")
		}
		return nil
	})
	// Every copy sent was read before the busy script ended, and run in
	// the same turn of the server's loop as the first: the INFO after
	// the one that saw it comes in a later one.
	if n := scripts() - before - 1; n != 1 {
		t.Errorf("the master ran the reservation %d times; want once", n)
	}
}

// TestClusterURLRefusals: what makes no sense in a Redis Cluster is
// refused when the store opens, with an error naming it.
func TestClusterURLRefusals(t *testing.T) {
	for q, want := range map[string]string{
		"/1?cluster=true":                        "database /1",
		"?cluster=true&read_only=true":           "read_only=",
		"?cluster=true&route_randomly=true":      "route_randomly=",
		"?cluster=true&route_by_latency=true":    "route_by_latency=",
		"?cluster=true&master_name=m":            "master_name=",
		"?cluster=true&cluster=true":             "cluster= is given 2 times",
		"?cluster=yes":                           "cluster=yes",
		"?cluster=true&db=1":                     "db",
		"?cluster=true&addr=nohost":              "nohost",
		"/0?cluster=true&route_by_latency=1&x=1": "x",
	} {
		s, err := redisstore.Open(t.Context(), "redis://127.0.0.1:1"+q, redisstore.Options{})
		if err == nil {
			s.Close()
			t.Errorf("%s: opened; want it refused", q)
			continue
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want an error naming %q", q, err, want)
		}
	}
}

// TestClusterReservedWithoutIndex: a reservation the script made, whose
// index could not be written (the index's master is down, as in a
// failover), fails with an error that does not say the call never
// reached the store, as a refused connection would: the proxy then fails
// the reservation once the store answers, where it would otherwise leave
// it in flight, its lease renewed, every retry of the call waiting on it.
func TestClusterReservedWithoutIndex(t *testing.T) {
	c := servicetest.StartRedisCluster(t, 2, 0)
	s := openWith(t, c.URL(), redisstore.Options{Prefix: clusterPrefix()})
	ctx := t.Context()
	on := func(key string) string {
		m, err := redisstore.Client(s).(*redis.ClusterClient).MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return m.Options().Addr
	}
	var r *record.Record
	for i := 0; r == nil; i++ {
		try := newRecord("index elsewhere " + strconv.Itoa(i))
		_, rec, index := redisstore.Keys(s, try.Key, try.ID)
		if on(rec) == c.Masters[0].Addr() && on(index) == c.Masters[1].Addr() {
			r = try
		}
	}
	c.Masters[1].Stop()
	_, won, err := s.Reserve(ctx, r, record.ReserveOptions{Dispatch: true, Lease: time.Minute})
	if err == nil {
		t.Fatalf("Reserve with the index's master down = %v, nil; want an error", won)
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, record.ErrNotSent) {
		t.Errorf("Reserve = %v; want an error that does not say it never reached the store: the reservation was made", err)
	}
	holder, _, _ := redisstore.Keys(s, r.Key, r.ID)
	if id, err := c.Masters[0].Client().Get(ctx, holder).Result(); err != nil || id != r.ID {
		t.Fatalf("the key's holder = %q, %v; want the reservation made, %s", id, err, r.ID)
	}
}
