package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	neturl "net/url"
	"strconv"
	"strings"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/intercept"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/pgstore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/redisstore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/sqlitestore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/transport/streamhttp"
)

// A durableStore outlives the process and is shared, so it also keeps the
// fingerprint secret that every proxy using it must agree on.
type durableStore interface {
	record.Store
	Secret(ctx context.Context) ([]byte, error)
	Close() error
}

// The shared stores also keep the accounts' allowances, so that proxies
// sharing a store share them; the memory store does not, and each process
// keeps its own.
var (
	_ intercept.Allowances = (*sqlitestore.Store)(nil)
	_ intercept.Allowances = (*redisstore.Store)(nil)
	_ intercept.Allowances = (*pgstore.Store)(nil)
)

// openStore opens the store a --store URL names; what a shared store cannot
// tell a caller (a purge that failed, a lost subscription) goes to log,
// and orphaned, if set, is told of the orphans its purges settle. A
// durable store comes back with its closer; the memory store has none.
// readOnly is for a command that only reads: a SQLite file is then opened
// to read only, so a copy in a directory nobody may write reads too.
func openStore(ctx context.Context, url string, log *slog.Logger, readOnly bool, orphaned func(*record.Record)) (record.Store, durableStore, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var (
		s   durableStore
		err error
	)
	url = lowerScheme(url)
	switch {
	case url == "" || url == "memory":
		return memstore.New(memstore.Options{}), nil, nil
	case strings.HasPrefix(url, "sqlite:"):
		if _, _, perr := sqlitestore.ParseURL(url, sqlitestore.Options{}); perr != nil {
			return nil, nil, usagef("--store: %s: %v", redact(url), perr)
		}
		s, err = sqlitestore.OpenURL(ctx, url, sqlitestore.Options{Orphaned: orphaned, Logger: log, ReadOnly: readOnly})
	case strings.HasPrefix(url, "redis://"), strings.HasPrefix(url, "rediss://"):
		// prefix= is ours, not the driver's: several deployments can share
		// one Redis database under different key prefixes.
		u, prefix, perr := cutParam(url, "prefix")
		if perr != nil {
			return nil, nil, usagef("--store: %v", perr)
		}
		if pu, perr := neturl.Parse(u); perr == nil && pu.Hostname() == "" {
			// The driver would dial localhost: `redis://$HOST:6379`
			// with HOST not set would keep the records in a Redis of
			// this host, while the user believes them shared.
			return nil, nil, usagef("--store: %s names no host, as redis://$HOST:6379 gives with HOST not set: give the host, as redis://127.0.0.1:6379/0 for this one", redact(url))
		}
		opts := redisstore.Options{Prefix: prefix, Logger: log}
		if u, perr = cutReplicas(u, &opts); perr != nil {
			return nil, nil, usagef("--store: %v", perr)
		}
		s, err = redisstore.Open(ctx, u, opts)
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		// schema= is ours too: pgx would send it to the server.
		u, schema, perr := cutParam(url, "schema")
		if perr != nil {
			return nil, nil, usagef("--store: %v", perr)
		}
		if strings.ContainsRune(schema, 0) {
			// pgx would drop it, and name another deployment's schema.
			return nil, nil, usagef("--store: schema= holds a NUL byte (%%00), which a PostgreSQL name cannot")
		}
		if len(schema) > maxIdentifier {
			// PostgreSQL would cut it short, to a name another
			// deployment's may share.
			return nil, nil, usagef("--store: schema= is %d bytes long; PostgreSQL names are at most %d", len(schema), maxIdentifier)
		}
		s, err = pgstore.Open(ctx, u, pgstore.Options{Schema: schema, Logger: log, Orphaned: orphaned})
	default:
		return nil, nil, usagef("--store: %q is not memory, sqlite:PATH, redis://..., rediss://... or postgres://...", redact(url))
	}
	if err != nil {
		return nil, nil, fmt.Errorf("--store: opening %s: %w", redact(url), err)
	}
	return s, s, nil
}

// lowerScheme writes the scheme of a --store URL in lower case. A scheme
// is read whatever its case (RFC 3986), but the drivers know theirs in
// lower case only: "Redis://..." was refused as not redis://.
func lowerScheme(url string) string {
	scheme, rest, ok := strings.Cut(url, ":")
	if !ok {
		return url
	}
	switch lower := strings.ToLower(scheme); lower {
	case "sqlite", "redis", "rediss", "postgres", "postgresql":
		return lower + ":" + rest
	}
	return url
}

// redact returns a URL fit for a message or a log: its scheme, host and
// path. A user, a password or a query, any of which may hold a credential
// (a token as the user name, ?password=...), shows only as "***".
func redact(raw string) string {
	scheme, _, ok := strings.Cut(raw, "://")
	if !ok {
		return raw // sqlite:PATH, memory: nothing secret
	}
	u, err := neturl.Parse(raw)
	if err != nil {
		return scheme + "://(a URL that does not parse)"
	}
	return streamhttp.ShownURL(u)
}

// storeShown is redact(raw) and, for a Redis or PostgreSQL URL, the key
// prefix or schema it reads, which redact hides with the rest of the
// query: of an execution the store lacks, a prefix or schema mistyped,
// or another deployment's, is the likely cause.
func storeShown(raw string) string {
	url := lowerScheme(raw)
	name, dflt := "", ""
	switch {
	case strings.HasPrefix(url, "redis://"), strings.HasPrefix(url, "rediss://"):
		name, dflt = "prefix", redisstore.DefaultPrefix
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		name, dflt = "schema", pgstore.DefaultSchema
	default:
		return redact(raw)
	}
	_, v, err := cutParam(url, name)
	if err != nil {
		return redact(raw)
	}
	if v == "" {
		v = dflt
	}
	return fmt.Sprintf("%s (%s %s)", redact(raw), name, strconv.Quote(v))
}

// cutParam removes the query parameter name from rawURL and returns its
// value.
func cutParam(rawURL, name string) (string, string, error) {
	u, err := neturl.Parse(rawURL)
	if err != nil {
		// Not err itself: a *url.Error quotes the whole URL.
		return "", "", fmt.Errorf("%q is not a URL: %v", redact(rawURL), errors.Unwrap(err))
	}
	// Not u.Query, which drops what it cannot read: a prefix or schema
	// holding a ";" would go unnoticed, and two deployments meant to be
	// kept apart would share records and the fingerprint key.
	q, err := neturl.ParseQuery(u.RawQuery)
	if err != nil {
		return "", "", fmt.Errorf("the query of %q is not NAME=VALUE pairs joined by &: %v (write a ; in a value as %%3B)", redact(rawURL), err)
	}
	v := q.Get(name)
	if len(q[name]) > 1 {
		// Which one counts would depend on the reader.
		return "", "", fmt.Errorf("%s= is given %d times; give it once", name, len(q[name]))
	}
	if q.Has(name) && v == "" {
		// Left empty, it would mean the default: another deployment's.
		return "", "", fmt.Errorf("%s= is empty; leave it out for the default", name)
	}
	u.RawQuery = dropParam(u.RawQuery, name)
	s := u.String()
	if u.Host == "" && u.User == nil && u.Path == "" && u.Opaque == "" && strings.HasPrefix(rawURL[len(u.Scheme):], "://") {
		// String drops the // of a URL with no host, user or path, as
		// postgres://?host=/tmp, which pgx then refuses as no
		// postgres:// URL; libpq reads it as its defaults and PGHOST.
		s = u.Scheme + "://" + strings.TrimPrefix(s, u.Scheme+":")
	}
	return s, v, nil
}

// dropParam returns rawQuery without its name= pairs, the others as they
// were written. Not written back from url.Values: pgx reads a query as
// libpq does, a "+" as itself, where url reads a space, so either way a
// password or an options= would reach the server changed.
func dropParam(rawQuery, name string) string {
	var kept []string
	for pair := range strings.SplitSeq(rawQuery, "&") {
		key, _, _ := strings.Cut(pair, "=")
		if k, err := neturl.QueryUnescape(key); pair == "" || err == nil && k == name {
			continue
		}
		kept = append(kept, pair)
	}
	return strings.Join(kept, "&")
}

// cutReplicas takes wait_replicas= and wait_timeout= from a Redis URL
// (ours, not the driver's) into opts: how many replicas must confirm each
// write, and for how long to wait, one second by default.
func cutReplicas(rawURL string, opts *redisstore.Options) (string, error) {
	u, n, err := cutParam(rawURL, "wait_replicas")
	if err != nil {
		return "", err
	}
	u, timeout, err := cutParam(u, "wait_timeout")
	if err != nil {
		return "", err
	}
	if n == "" {
		if timeout != "" {
			return "", errors.New("wait_timeout= is given without wait_replicas=")
		}
		return u, nil
	}
	if opts.WaitReplicas, err = strconv.Atoi(n); err != nil || opts.WaitReplicas < 1 || opts.WaitReplicas > 1000 {
		return "", fmt.Errorf("wait_replicas=%s: want a number of replicas from 1 to 1000", n)
	}
	opts.WaitTimeout = time.Second
	if timeout != "" {
		if opts.WaitTimeout, err = time.ParseDuration(timeout); err != nil || opts.WaitTimeout < time.Millisecond {
			return "", fmt.Errorf("wait_timeout=%s: want a duration of at least 1ms, such as 500ms or 1s", timeout)
		}
	}
	return u, nil
}

// maxIdentifier is the longest name PostgreSQL keeps whole (NAMEDATALEN-1).
const maxIdentifier = 63
