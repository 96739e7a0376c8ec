package redisstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A client is the store's connection: to one server, to the master that
// Sentinels watch, or to a Redis Cluster.
type client struct {
	rdb     redis.UniversalClient
	cluster *redis.ClusterClient // rdb, if it is a Cluster's; else nil
	name    string               // the store's name for messages
	read    time.Duration        // the read timeout
	// tlsAddr is the server's address when the URL asks for TLS
	// (rediss://) and names one server; else "".
	tlsAddr string
}

// newClient returns a client of the server rawURL names. A URL with
// master_name= names a Sentinel deployment: its host (and each addr=) is
// a Sentinel, which the client asks for the master of that name, and
// asks again after a failover. A URL with cluster=true names a Redis
// Cluster: its host (and each addr=) is a node, which the client asks
// for the others and for the slots each master serves.
func newClient(rawURL string) (client, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// A url.Error quotes the URL, password included.
		return client{}, errors.Unwrap(err)
	}
	q := u.Query()
	if err := checkPorts(u.Port(), q["addr"]); err != nil {
		return client{}, err
	}
	if err := checkTimeouts(q); err != nil {
		return client{}, err
	}
	if err := checkSizes(q); err != nil {
		return client{}, err
	}
	if n := len(q["master_name"]); n > 1 {
		// go-redis would take the last; another reader, the first.
		return client{}, fmt.Errorf("master_name= is given %d times; give it once", n)
	}
	cluster, err := clusterParam(q)
	switch {
	case err != nil:
		return client{}, err
	case cluster && q.Has("master_name"):
		return client{}, errors.New("cluster=true and master_name= are both given: a URL names a Redis Cluster or a master that Sentinels watch, not both")
	case cluster:
		q.Del("cluster")
		u.RawQuery = q.Encode()
		return newClusterClient(u)
	case !q.Has("master_name"):
		o, err := redis.ParseURL(rawURL)
		if err != nil {
			return client{}, unquoted(err)
		}
		if err := checkProtocol(o.Protocol); err != nil {
			return client{}, err
		}
		if err := checkDB(o.DB); err != nil {
			return client{}, err
		}
		setDefaults(o)
		rdb := redis.NewClient(o)
		c := client{rdb: rdb, name: "redis store " + o.Addr + "/" + strconv.Itoa(o.DB), read: rdb.Options().ReadTimeout}
		if o.TLSConfig != nil {
			c.tlsAddr = o.Addr
		}
		return c, nil
	}
	fo, err := redis.ParseFailoverURL(rawURL)
	if err != nil {
		return client{}, unquoted(err)
	}
	if err := checkFailover(fo); err != nil {
		return client{}, err
	}
	if err := checkProtocol(fo.Protocol); err != nil {
		return client{}, err
	}
	if err := checkDB(fo.DB); err != nil {
		return client{}, err
	}
	o := &redis.Options{DialTimeout: fo.DialTimeout, ReadTimeout: fo.ReadTimeout, DialerRetries: fo.DialerRetries, Protocol: fo.Protocol}
	setDefaults(o)
	fo.DialTimeout, fo.ReadTimeout, fo.DialerRetries, fo.Protocol = o.DialTimeout, o.ReadTimeout, o.DialerRetries, o.Protocol
	fo.MaxRetries, fo.ContextTimeoutEnabled = o.MaxRetries, o.ContextTimeoutEnabled
	name := fmt.Sprintf("redis store %s (Sentinel %s)/%d", fo.MasterName, strings.Join(fo.SentinelAddrs, ","), fo.DB)
	rdb := redis.NewFailoverClient(fo)
	return client{rdb: rdb, name: name, read: rdb.Options().ReadTimeout}, nil
}

// checkTimeouts refuses a timeout of go-redis's that is not above zero:
// it takes -1 for none, and a server that hangs would then hold every
// call for ever, where the store promises an error in seconds. A value
// that is no number is left for go-redis to name.
func checkTimeouts(q url.Values) error {
	for _, name := range []string{"dial_timeout", "read_timeout", "write_timeout", "pool_timeout"} {
		for _, v := range q[name] {
			d, err := time.ParseDuration(v)
			if n, nerr := strconv.Atoi(v); nerr == nil {
				d, err = time.Duration(n)*time.Second, nil // go-redis reads a number as seconds
			}
			if err == nil && d <= 0 {
				return fmt.Errorf("%s=%s: want a duration above zero, such as 2s: with none, a server that hangs holds every call for ever", name, v)
			}
		}
	}
	return nil
}

// checkSizes refuses a count of connections go-redis cannot make a pool
// of: it panics, at start, on a pool_size below zero or any count past
// 2^31-1. Zero is go-redis's default. A negative pipeline_pool_size is
// no count: it runs pipelines on the main pool. A value that is no
// number is left for go-redis to name.
func checkSizes(q url.Values) error {
	for _, name := range []string{"pool_size", "pipeline_pool_size", "min_idle_conns", "max_idle_conns", "max_active_conns"} {
		for _, v := range q[name] {
			n, err := strconv.ParseInt(v, 10, 64)
			if err == nil && ((n < 0 && name != "pipeline_pool_size") || n > math.MaxInt32) {
				return fmt.Errorf("%s=%s: want a number of connections from 0 (the default) to %d", name, v, math.MaxInt32)
			}
		}
	}
	return nil
}

// checkDB refuses a database number below zero: go-redis selects none
// then, and the store would share database 0 with whoever uses it.
func checkDB(db int) error {
	if db < 0 {
		return fmt.Errorf("database /%d: want a number from 0", db)
	}
	return nil
}

// checkProtocol refuses a protocol= that no Redis speaks: go-redis would
// take it, and every connection's HELLO would then fail, store down for
// good with the cause only in the log.
func checkProtocol(p int) error {
	if p != 0 && p != 2 && p != 3 {
		return fmt.Errorf("protocol=%d: want 2 (RESP2) or 3 (RESP3)", p)
	}
	return nil
}

// clusterParam reads cluster=, which is the store's, not go-redis's: true
// (or 1) names a Redis Cluster.
func clusterParam(q url.Values) (bool, error) {
	vs := q["cluster"]
	switch {
	case len(vs) == 0:
		return false, nil
	case len(vs) > 1:
		return false, fmt.Errorf("cluster= is given %d times; give it once", len(vs))
	}
	b, err := strconv.ParseBool(vs[0])
	if err != nil {
		return false, fmt.Errorf("cluster=%s: want true or false", vs[0])
	}
	return b, nil
}

// newClusterClient returns a client of the Redis Cluster u names (its
// cluster= already taken out).
func newClusterClient(u *url.URL) (client, error) {
	if p := strings.TrimPrefix(u.Path, "/"); p != "" && p != "0" {
		// go-redis's cluster URL ignores the path.
		return client{}, fmt.Errorf("database /%s: a Redis Cluster has database 0 only; leave the path out", p)
	}
	co, err := redis.ParseClusterURL(u.String())
	if err != nil {
		return client{}, unquoted(err)
	}
	if err := checkCluster(co); err != nil {
		return client{}, err
	}
	if err := checkProtocol(co.Protocol); err != nil {
		return client{}, err
	}
	o := &redis.Options{DialTimeout: co.DialTimeout, ReadTimeout: co.ReadTimeout, DialerRetries: co.DialerRetries, Protocol: co.Protocol}
	setDefaults(o)
	co.DialTimeout, co.ReadTimeout, co.DialerRetries, co.Protocol = o.DialTimeout, o.ReadTimeout, o.DialerRetries, o.Protocol
	co.MaxRetries, co.ContextTimeoutEnabled = o.MaxRetries, o.ContextTimeoutEnabled
	// The cluster client sends a command again after a MOVED or ASK
	// reply, which is safe, but also after a read that timed out or a
	// connection that broke, which is not: a script may have run. It
	// cannot do the one without the other, so it does neither; a call
	// whose slot moved fails, closed, and the client learns where the
	// slot went (cluster.go).
	co.MaxRedirects = -1
	rdb := redis.NewClusterClient(co)
	name := "redis store (Cluster " + strings.Join(co.Addrs, ",") + ")"
	return client{rdb: rdb, cluster: rdb, name: name, read: rdb.Options().ReadTimeout}, nil
}

// checkFailover refuses what a Sentinel URL may set that the store cannot
// work with: every call reads and writes the master.
func checkFailover(fo *redis.FailoverOptions) error {
	switch {
	case fo.MasterName == "":
		return errors.New("master_name= is empty: name the master the Sentinels watch")
	case fo.RouteByLatency, fo.RouteRandomly, fo.ReplicaOnly:
		// The first two make go-redis panic outside its cluster
		// client; all three would send reads, or writes, to replicas,
		// which lag the master.
		return errors.New("route_by_latency, route_randomly and replica_only send calls to replicas; the store reads and writes the master only")
	}
	return nil
}

// checkCluster refuses what a Cluster URL may set that the store cannot
// work with: every call reads and writes the master of its slot.
func checkCluster(co *redis.ClusterOptions) error {
	var set []string
	for _, o := range []struct {
		name string
		on   bool
	}{
		{"read_only", co.ReadOnly},
		{"route_by_latency", co.RouteByLatency},
		{"route_by_latency_tolerance", co.RouteByLatencyTolerance != 0},
		{"route_randomly", co.RouteRandomly},
	} {
		if o.on {
			set = append(set, o.name+"=")
		}
	}
	if len(set) > 0 {
		return fmt.Errorf("%s: sends reads to replicas, which lag their master; the store reads and writes the masters only", strings.Join(set, ", "))
	}
	return nil
}

// checkPorts refuses a port no server can have, in the URL's host
// (port, "" if it has none) or an addr=: go-redis takes it, and each
// dial fails as if the server could not be reached yet.
func checkPorts(port string, addrs []string) error {
	ports := []string{port}
	for _, a := range addrs {
		_, p, err := net.SplitHostPort(a)
		if err != nil {
			continue // go-redis names it
		}
		ports = append(ports, p)
	}
	for _, p := range ports {
		if n, err := strconv.Atoi(p); p != "" && (err != nil || n < 1 || n > 65535) {
			return fmt.Errorf("port %q: want a number from 1 to 65535", p)
		}
	}
	return nil
}

// unquoted drops the URL a url.Error quotes, password included.
func unquoted(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err
	}
	return err
}

// setDefaults sets what the URL leaves unset of o, and turns retries off.
func setDefaults(o *redis.Options) {
	if o.DialTimeout == 0 {
		o.DialTimeout = dialTimeout
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = ioTimeout
	}
	if o.DialerRetries == 0 {
		o.DialerRetries = 1
	}
	o.MaxRetries = -1
	o.ContextTimeoutEnabled = true
	if o.Protocol == 0 {
		// With RESP3, go-redis looks for push notifications before
		// reading each reply, about a twelfth of the client's CPU at 32
		// calls in flight; the store's subscription has a connection of
		// its own, and no other connection gets any.
		o.Protocol = 2
	}
}

// plainTextServer reports whether a Redis server that speaks no TLS
// answers at addr: a PING sent in plain text gets a RESP reply, where a
// server that serves TLS answers with an alert or nothing.
func plainTextServer(addr string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	conn.SetDeadline(deadline)
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		return false
	}
	return b[0] == '+' || b[0] == '-'
}
