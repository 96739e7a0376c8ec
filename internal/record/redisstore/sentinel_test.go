package redisstore_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/redisstore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/servicetest"
	"github.com/mcp-idempotent/mcp-idempotent/internal/skipnote"
)

// TestSentinel: through a URL with master_name=, the store finds the
// master the Sentinels watch, and after a failover finds the new one:
// a record written before is there, and calls go on. With WaitReplicas,
// each write is on the replica before the call returns.
func TestSentinel(t *testing.T) {
	master := startServer(t)
	replica := startServer(t, "--replicaof", "127.0.0.1", master.port)
	waitReplicas(t, master, 1)
	sentinel := startSentinel(t, master)

	url := "redis://127.0.0.1:" + sentinel.port + "/0?master_name=mcpi"
	s := openWith(t, url, redisstore.Options{WaitReplicas: 1, WaitTimeout: 1500 * time.Millisecond})
	ctx := t.Context()
	r := newRecord("before the failover")
	if _, won, err := s.Reserve(ctx, r, record.ReserveOptions{Dispatch: true}); err != nil || !won {
		t.Fatalf("Reserve through Sentinel = %v, %v", won, err)
	}
	if _, err := s.Update(ctx, r.ID, record.Change{To: record.Completed, Result: []byte(`{"ok":true}`)}); err != nil {
		t.Fatal(err)
	}
	// WAIT: the replica has it already, without waiting for it.
	if n := replica.client(t).Exists(ctx, "mcpi:i:"+r.ID).Val(); n != 1 {
		t.Fatalf("the replica lacks the record's index right after the write")
	}

	// Until the Sentinel has asked the replica itself, it has no
	// replica to promote (NOGOODSLAVE).
	servicetest.Eventually(t, "the Sentinel to begin a failover", func() error {
		return sentinel.client(t).Do(ctx, "sentinel", "failover", "mcpi").Err()
	})
	servicetest.Eventually(t, "the Sentinel to promote the replica", func() error {
		addr, err := sentinel.client(t).Do(ctx, "sentinel", "get-master-addr-by-name", "mcpi").StringSlice()
		if err != nil || len(addr) != 2 || addr[1] != replica.port {
			return fmt.Errorf("master is %v (%v)", addr, err)
		}
		return nil
	})
	// The old master rejoins as the new one's replica; until it does,
	// a write is not confirmed, and fails. The Sentinel has it rejoin when
	// it next asks it, which a busy machine put off past a minute once:
	// the test has it rejoin now, as the Sentinel would.
	if err := master.client(t).Do(ctx, "replicaof", "127.0.0.1", replica.port).Err(); err != nil {
		t.Fatal(err)
	}
	servicetest.Eventually(t, "a write on the new master", func() error {
		_, err := s.Update(ctx, r.ID, record.Change{To: record.Delivered})
		return err
	})
	got, err := s.Get(ctx, r.ID)
	if err != nil || got.State != record.Delivered || string(got.Result) != `{"ok":true}` {
		t.Fatalf("after the failover: %v, %v; want the record delivered with its result", got, err)
	}
	if _, won, err := s.Reserve(ctx, newRecord("after the failover"), record.ReserveOptions{Dispatch: true}); err != nil || !won {
		t.Fatalf("Reserve after the failover = %v, %v", won, err)
	}
}

// TestWaitReplicasRefusesUnconfirmed: with WaitReplicas, a write no
// replica confirms in time fails with ErrNotReplicated, though it ran on
// the master: the proxy then runs nothing on it (fails closed). What
// only reads is answered: a replay, a wait on a settled record.
func TestWaitReplicasRefusesUnconfirmed(t *testing.T) {
	master := startServer(t)
	replica := startServer(t, "--replicaof", "127.0.0.1", master.port)
	waitReplicas(t, master, 1)
	s := openWith(t, "redis://127.0.0.1:"+master.port+"/0", redisstore.Options{WaitReplicas: 1, WaitTimeout: 1500 * time.Millisecond})
	ctx := t.Context()
	done := newRecord("confirmed")
	if _, won, err := s.Reserve(ctx, done, record.ReserveOptions{Dispatch: true}); err != nil || !won {
		t.Fatalf("Reserve with its replica up = %v, %v", won, err)
	}
	if _, err := s.Update(ctx, done.ID, record.Change{To: record.Completed, Result: []byte(`{"ok":true}`)}); err != nil {
		t.Fatal(err)
	}
	replica.stop(t)
	if rec, won, err := s.Reserve(ctx, newRecord("confirmed"), record.ReserveOptions{Dispatch: true}); err != nil || won || rec.ID != done.ID {
		t.Errorf("a replay with the replica down = %v, %v; want the record it matches", won, err)
	}
	if rec, err := s.Wait(ctx, done.ID); err != nil || rec.State != record.Completed {
		t.Errorf("Wait on a completed record with the replica down: %v", err)
	}
	if _, err := s.Update(ctx, done.ID, record.Change{To: record.Delivered}); !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Errorf("Update with the replica down = %v; want ErrNotReplicated", err)
	}
	r := newRecord("unconfirmed")
	if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{Dispatch: true}); !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Fatalf("Reserve with its replica down = %v; want ErrNotReplicated", err)
	}
	if n := master.client(t).Exists(ctx, "mcpi:i:"+r.ID).Val(); n != 1 {
		t.Errorf("the reservation did not run on the master; ErrNotReplicated says it ran")
	}
	// Reads wait for nothing.
	if _, err := s.Get(ctx, r.ID); err != nil {
		t.Errorf("Get with the replica down: %v", err)
	}
}

// TestWaitReplicasWarnsAtOpen: a store that waits for more replicas than
// its master has online says so when it opens, naming wait_replicas:
// every write would fail after the wait. With the replica linked it says
// nothing, and pointed at the replica it says that writes fail there.
// Setting up a connection is not a write: no WAIT follows it, which with
// a replica down made every new connection wait out the timeout.
func TestWaitReplicasWarnsAtOpen(t *testing.T) {
	master := startServer(t)
	// A database and a client name, so that go-redis sets up each
	// connection with SELECT and CLIENT SETNAME as well.
	url := "redis://127.0.0.1:" + master.port + "/1?client_name=mcpi-test"
	// opened opens a store and returns what it logged while opening.
	opened := func(url string) string {
		var mu sync.Mutex
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, nil))
		s := openWith(t, url, redisstore.Options{WaitReplicas: 1, WaitTimeout: 500 * time.Millisecond, Logger: log})
		if _, err := s.Get(t.Context(), "exe_none"); !errors.Is(err, record.ErrNotFound) {
			t.Errorf("Get of no record = %v; want ErrNotFound", err)
		}
		mu.Lock()
		defer mu.Unlock()
		return buf.String()
	}
	if got := opened(url); !strings.Contains(got, "level=WARN") || !strings.Contains(got, "wait_replicas=1 online=0") {
		t.Errorf("opening with no replica logged %q; want a warning naming wait_replicas and the replicas online", got)
	}
	if stats := master.client(t).Info(t.Context(), "commandstats").Val(); strings.Contains(stats, "cmdstat_wait:") {
		t.Errorf("opening a store and reading sent WAIT:\n%s", stats)
	}

	replica := startServer(t, "--replicaof", "127.0.0.1", master.port)
	waitReplicas(t, master, 1)
	if got := opened(url); got != "" {
		t.Errorf("opening with the replica linked logged %q; want nothing", got)
	}
	if got := opened("redis://127.0.0.1:" + replica.port + "/1"); !strings.Contains(got, "level=WARN") || !strings.Contains(got, "is a replica") {
		t.Errorf("opening at the replica logged %q; want a warning that it is a replica", got)
	}
}

func TestOnlineReplicas(t *testing.T) {
	for info, want := range map[string]int{
		"# Replication\r\nrole:master\r\nconnected_slaves:0\r\nmaster_repl_offset:0\r\n": 0,
		"role:master\r\nconnected_slaves:2\r\nslave0:ip=127.0.0.1,port=7001,state=online,offset=42,lag=0\r\n" +
			"slave1:ip=127.0.0.1,port=7002,state=wait_bgsave,offset=0,lag=0\r\n": 1,
		"slave0:ip=a,port=1,state=online,offset=1,lag=0\nslave12:ip=b,port=2,state=online,offset=1,lag=0\n": 2,
		// A replica's own INFO has slave_ fields, which are not replicas.
		"role:slave\r\nslave_repl_offset:42\r\nslave_read_only:1\r\nslave_priority:100\r\n": 0,
		"slaveX:state=online\r\n": 0,
		"replica0:ip=a,port=1,state=online,offset=1,lag=0\r\nreplica_announced:1\r\n": 1,
	} {
		if got := redisstore.OnlineReplicas(info); got != want {
			t.Errorf("OnlineReplicas(%q) = %d, want %d", info, got, want)
		}
	}
}

// TestSemanticsThroughSentinel: the store keeps every rule of a Store
// when it finds its master through a Sentinel and waits for a replica
// on each write.
func TestSemanticsThroughSentinel(t *testing.T) {
	master := startServer(t)
	startServer(t, "--replicaof", "127.0.0.1", master.port)
	waitReplicas(t, master, 1)
	sentinel := startSentinel(t, master)
	url := "redis://127.0.0.1:" + sentinel.port + "/0?master_name=mcpi"
	recordtest.Run(t, func(t *testing.T, now func() time.Time) record.Store {
		prefix := newPrefix(t, "redis://127.0.0.1:"+master.port+"/0")
		return openWith(t, url, redisstore.Options{Now: now, Prefix: prefix, WaitReplicas: 1, WaitTimeout: 1500 * time.Millisecond})
	})
}

// TestSentinelURLRefusals: what would send calls to a replica, or make
// the client panic, is refused when the store opens.
func TestSentinelURLRefusals(t *testing.T) {
	for _, q := range []string{"master_name=", "master_name=m&route_randomly=true", "master_name=m&route_by_latency=true", "master_name=m&replica_only=true", "master_name=m&master_name=n"} {
		s, err := redisstore.Open(t.Context(), "redis://127.0.0.1:1/0?"+q, redisstore.Options{})
		if err == nil {
			s.Close()
			t.Errorf("%s: opened; want it refused", q)
		}
	}
	// Redis answers a WAIT that timed out late: a read cut off there
	// would fail the replies before it too. WAIT n 0 waits for ever.
	for _, wait := range []time.Duration{2 * time.Second, 950 * time.Millisecond, 500 * time.Microsecond} {
		s, err := redisstore.Open(t.Context(), "redis://127.0.0.1:1/0?read_timeout=1s", redisstore.Options{WaitReplicas: 1, WaitTimeout: wait})
		if err == nil {
			s.Close()
			t.Errorf("a wait for replicas of %v with a read timeout of 1s: opened; want it refused", wait)
		}
	}
}

// A server is a redis-server of the test's own on a loopback port.
type server struct {
	port string
	cmd  *exec.Cmd
}

// startServer starts a redis-server with args, stopped when the test ends.
func startServer(t *testing.T, args ...string) *server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		skipnote.Unavailable(t, "Redis Sentinel", "redis-server is not installed (apt install redis-server): these tests start servers of their own")
	}
	srv := &server{port: servicetest.FreePort(t)}
	srv.cmd = exec.Command(bin, append([]string{"--port", srv.port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0", "--dir", t.TempDir()}, args...)...)
	srv.start(t)
	return srv
}

// startSentinel starts a Sentinel that watches master as "mcpi".
func startSentinel(t *testing.T, master *server) *server {
	t.Helper()
	bin, _ := exec.LookPath("redis-server")
	srv := &server{port: servicetest.FreePort(t)}
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	text := fmt.Sprintf("port %s\nbind 127.0.0.1\nsentinel monitor mcpi 127.0.0.1 %s 1\nsentinel down-after-milliseconds mcpi 1000\nsentinel failover-timeout mcpi 10000\n", srv.port, master.port)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	srv.cmd = exec.Command(bin, conf, "--sentinel")
	srv.start(t)
	servicetest.Eventually(t, "the Sentinel to see the replica", func() error {
		rs, err := srv.client(t).Do(t.Context(), "sentinel", "replicas", "mcpi").Slice()
		if err != nil || len(rs) == 0 {
			return fmt.Errorf("replicas %v (%v)", rs, err)
		}
		return nil
	})
	return srv
}

func (s *server) start(t *testing.T) {
	t.Helper()
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.stop(t) })
	servicetest.Eventually(t, "redis-server on port "+s.port, func() error { return s.client(t).Ping(t.Context()).Err() })
}

func (s *server) stop(t *testing.T) {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}

func (s *server) client(t *testing.T) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + s.port, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

// waitReplicas waits until n replicas are linked to master and confirm
// a write.
func waitReplicas(t *testing.T, master *server, n int) {
	t.Helper()
	servicetest.Eventually(t, "the replica to link", func() error {
		info, err := master.client(t).Info(t.Context(), "replication").Result()
		if err != nil || !strings.Contains(info, "connected_slaves:"+strconv.Itoa(n)) || !strings.Contains(info, "state=online") {
			return fmt.Errorf("%v %q", err, info)
		}
		return nil
	})
	servicetest.Eventually(t, "the replica to confirm a write", func() error {
		c := master.client(t)
		got := redis.NewIntCmd(t.Context(), "wait", n, 1000)
		_, err := c.Pipelined(t.Context(), func(p redis.Pipeliner) error {
			p.Set(t.Context(), "linked", "1", time.Minute)
			return p.Process(t.Context(), got)
		})
		if err != nil || got.Val() < int64(n) {
			return fmt.Errorf("%d replicas confirmed (%v)", got.Val(), err)
		}
		return nil
	})
}
