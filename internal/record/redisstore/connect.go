package redisstore

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// newClient returns a client of the server rawURL names, and the store's
// name for messages. A URL with master_name= names a Sentinel deployment:
// its host (and each addr=) is a Sentinel, which the client asks for the
// master of that name, and asks again after a failover.
func newClient(rawURL string) (*redis.Client, string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// A url.Error quotes the URL, password included.
		return nil, "", errors.Unwrap(err)
	}
	if n := len(u.Query()["master_name"]); n > 1 {
		// go-redis would take the last; another reader, the first.
		return nil, "", fmt.Errorf("master_name= is given %d times; give it once", n)
	}
	if !u.Query().Has("master_name") {
		o, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, "", unquoted(err)
		}
		setDefaults(o)
		return redis.NewClient(o), "redis store " + o.Addr + "/" + strconv.Itoa(o.DB), nil
	}
	fo, err := redis.ParseFailoverURL(rawURL)
	if err != nil {
		return nil, "", unquoted(err)
	}
	if err := checkFailover(fo); err != nil {
		return nil, "", err
	}
	o := &redis.Options{DialTimeout: fo.DialTimeout, ReadTimeout: fo.ReadTimeout, DialerRetries: fo.DialerRetries, Protocol: fo.Protocol}
	setDefaults(o)
	fo.DialTimeout, fo.ReadTimeout, fo.DialerRetries, fo.Protocol = o.DialTimeout, o.ReadTimeout, o.DialerRetries, o.Protocol
	fo.MaxRetries, fo.ContextTimeoutEnabled = o.MaxRetries, o.ContextTimeoutEnabled
	name := fmt.Sprintf("redis store %s (Sentinel %s)/%d", fo.MasterName, strings.Join(fo.SentinelAddrs, ","), fo.DB)
	return redis.NewFailoverClient(fo), name, nil
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
