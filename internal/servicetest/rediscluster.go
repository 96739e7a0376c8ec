package servicetest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mcp-idempotent/mcp-idempotent/internal/skipnote"
)

// A RedisCluster is a Redis Cluster of a test's own: redis-server
// processes on loopback ports, stopped when the test ends.
type RedisCluster struct {
	Masters  []*RedisNode
	Replicas []*RedisNode // Replicas[i] replicates Masters[i % len(Masters)]
}

// A RedisNode is one redis-server of a RedisCluster.
type RedisNode struct {
	Port   string
	bus    string // its cluster bus port
	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd has exited
	client *redis.Client
}

// Addr is the node's host:port.
func (n *RedisNode) Addr() string { return "127.0.0.1:" + n.Port }

// StartRedisCluster starts a Redis Cluster of masters masters, each
// serving an equal share of the slots, and replicas replicas of each, and
// returns once every node sees every slot served. Without redis-server
// the test is skipped, or fails under MCPI_REQUIRE_SERVICES=1.
func StartRedisCluster(t *testing.T, masters, replicas int) *RedisCluster {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		skipnote.Unavailable(t, "Redis Cluster", "redis-server is not installed (apt install redis-server): the Redis Cluster tests start servers of their own")
	}
	dir := t.TempDir()
	c := &RedisCluster{}
	for range masters {
		c.Masters = append(c.Masters, startNode(t, bin, dir))
	}
	for range masters * replicas {
		c.Replicas = append(c.Replicas, startNode(t, bin, dir))
	}
	all := append(append([]*RedisNode(nil), c.Masters...), c.Replicas...)
	ctx := t.Context()
	per := 16384 / masters
	for i, m := range c.Masters {
		last := (i+1)*per - 1
		if i == masters-1 {
			last = 16383
		}
		if err := m.Client().Do(ctx, "cluster", "addslotsrange", i*per, last).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range all[1:] {
		if err := n.Client().Do(ctx, "cluster", "meet", "127.0.0.1", c.Masters[0].Port, c.Masters[0].bus).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range all {
		Eventually(t, "node "+n.Port+" to know every node", func() error {
			nodes, err := n.Client().ClusterNodes(ctx).Result()
			if got := strings.Count(nodes, "\n"); err != nil || got < len(all) {
				return fmt.Errorf("it knows %d of %d (%v)", got, len(all), err)
			}
			return nil
		})
	}
	for i, r := range c.Replicas {
		id, err := c.Masters[i%masters].Client().Do(ctx, "cluster", "myid").Text()
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Client().Do(ctx, "cluster", "replicate", id).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range all {
		Eventually(t, "node "+n.Port+" to see the cluster ready", func() error {
			cl := n.Client()
			info, err := cl.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return fmt.Errorf("%v %q", err, info)
			}
			slots, err := cl.ClusterSlots(ctx).Result()
			if err != nil || len(slots) != masters {
				return fmt.Errorf("slots %v (%v)", slots, err)
			}
			for _, s := range slots {
				if len(s.Nodes) != 1+replicas {
					return fmt.Errorf("slots %d-%d are on %d nodes; want %d", s.Start, s.End, len(s.Nodes), 1+replicas)
				}
			}
			return nil
		})
	}
	return c
}

// startNode starts a cluster-enabled redis-server on free ports, stopped
// when the test ends, and returns once it answers. One that exits first,
// as when another process took a port between FreePort and its bind, is
// started again on others.
func startNode(t *testing.T, bin, dir string) *RedisNode {
	t.Helper()
	for try := 1; ; try++ {
		// The bus port is given: the default, 10000 past the port, may
		// be taken, or past 65535.
		n := &RedisNode{Port: FreePort(t), bus: FreePort(t), exited: make(chan struct{})}
		if n.Port == n.bus {
			continue
		}
		log := filepath.Join(dir, n.Port+".log")
		n.cmd = exec.Command(bin, "--port", n.Port, "--cluster-port", n.bus, "--bind", "127.0.0.1",
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes-"+n.Port+".conf"),
			"--cluster-node-timeout", "2000", "--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0",
			// A replica is listed for its slots once it has a
			// replication offset, which a master with no writes moves
			// only with its pings to the replicas (10 s by default).
			"--repl-ping-replica-period", "1",
			"--dir", dir, "--logfile", log)
		if err := n.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			n.cmd.Wait()
			close(n.exited)
		}()
		n.client = redis.NewClient(&redis.Options{Addr: n.Addr(), MaxRetries: -1, DialerRetries: 1})
		t.Cleanup(func() {
			n.Stop()
			n.client.Close()
		})
		var gone bool
		Eventually(t, "redis-server on port "+n.Port, func() error {
			select {
			case <-n.exited:
				gone = true
				return nil
			default:
			}
			// A dial first: go-redis would log each refused one.
			conn, err := net.Dial("tcp", n.Addr())
			if err != nil {
				return err
			}
			conn.Close()
			// Its own, not another process's that holds the port.
			info, err := n.Client().Info(t.Context(), "server").Result()
			if err != nil {
				return err
			}
			if pid := "process_id:" + strconv.Itoa(n.cmd.Process.Pid) + "\r\n"; !strings.Contains(info, pid) {
				return fmt.Errorf("another server answers on port %s", n.Port)
			}
			return nil
		})
		if !gone {
			return n
		}
		b, _ := os.ReadFile(log)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if try == 5 {
			t.Fatalf("redis-server on port %s exited at start, %d times: %s", n.Port, try, lines[len(lines)-1])
		}
		t.Logf("redis-server on port %s exited at start; starting it on other ports: %s", n.Port, lines[len(lines)-1])
	}
}

// URL returns the store URL of the cluster, naming its first master.
func (c *RedisCluster) URL() string {
	return "redis://" + c.Masters[0].Addr() + "?cluster=true"
}

// Client returns a client of the node alone, closed when the test ends.
func (n *RedisNode) Client() *redis.Client { return n.client }

// Stop kills the node, and returns once it has exited.
func (n *RedisNode) Stop() {
	if n.cmd != nil && n.cmd.Process != nil {
		_ = n.cmd.Process.Kill()
		<-n.exited
		n.cmd = nil
	}
}

// FreePort returns a TCP port on loopback that was free a moment ago.
func FreePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// Eventually calls f until it succeeds, failing the test with its last
// error after a minute: what it waits for (a server starting, a cluster
// forming, a failover) takes seconds.
func Eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for {
		err := f()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
