package redisstore

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/batch"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/idcache"
)

// DefaultPrefix is the key prefix used when Options.Prefix is empty.
const DefaultPrefix = "mcpi:"

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// Now returns the current time; nil means time.Now. Every time the
	// store writes or compares comes from it, never from the server.
	Now func() time.Time
	// Prefix begins every key and channel name; "" means DefaultPrefix. Stores
	// that share records must share it. It may not contain braces, which
	// would change the keys' hash tags.
	Prefix string
	// Logger receives the store's warnings; nil discards them.
	Logger *slog.Logger
	// Eval runs the scripts with EVALSHA even where the server has
	// Redis Functions, as on a server without them (functions.go).
	Eval bool
	// WaitReplicas, if positive, has every write wait until that many
	// replicas have it (WAIT), for at most WaitTimeout; a write they do
	// not confirm in time fails (replicas.go).
	WaitReplicas int
	WaitTimeout  time.Duration
}

// Timeouts set when the URL sets none, so that a server that cannot be
// reached fails a call promptly and the proxy fails closed.
const (
	dialTimeout = 2 * time.Second
	ioTimeout   = 2 * time.Second
)

// Wait checks on a record on this backoff, besides being woken.
const (
	pollMin = 10 * time.Millisecond
	pollMax = time.Second
)

// Store is a record.Store kept in Redis. It is safe for concurrent use;
// Close releases it.
type Store struct {
	rdb     redis.UniversalClient
	cluster *redis.ClusterClient // rdb, if it is a Cluster's (cluster.go); else nil
	now     func() time.Time
	prefix  string
	channel string // where settles are published
	name    string // "redis store <addr>/<db>", for errors
	tlsAddr string // client.tlsAddr
	log     *slog.Logger

	pollMin, pollMax time.Duration // Wait's backoff; tests change them

	evalOnly  bool        // Options.Eval
	functions atomic.Bool // the server has the library (functions.go)

	tags  *idcache.Cache[loc]
	known *idcache.Cache[known] // the records this Store last wrote or read (known.go)

	mu      sync.Mutex                  // protects owned, ownerOf and gen
	owned   map[string]map[string]owned // owner -> id -> its records in flight
	ownerOf map[string]string           // id -> its key in owned
	gen     uint64                      // counts calls to track

	wmu     sync.Mutex        // protects waiters
	waiters map[string]*watch // id -> the channel its waiters share

	smu    sync.Mutex // protects secret and its checks (secret.go)
	secret []byte
	// secretChecked is when keepSecret last looked for the secret, and
	// secretOther that it found another there, said once.
	secretChecked time.Time
	secretOther   bool

	ps         *redis.PubSub
	subscribed chan struct{} // closed once the subscription is first confirmed
	stop       context.CancelFunc
	done       chan struct{} // closed when the listener has returned
	closeOnce  sync.Once
	closeErr   error

	attaches record.AttachCounts // counted by Reserve, not yet written (attach.go)

	batch *batch.Queue[*call] // sends the scripts of Reserve and Update (batch.go)
}

var (
	_ record.Store   = (*Store)(nil)
	_ record.Decider = (*Store)(nil)
)

// Open returns a Store for the server at rawURL, redis://... or
// rediss://... (see redis.ParseURL for its options), for the master
// that Sentinels watch when the URL has master_name= (see
// redis.ParseFailoverURL; its host and each addr= are Sentinels), or for
// a Redis Cluster when it has cluster=true (see redis.ParseClusterURL;
// its host and each addr= are nodes). It tries the server
// once, to load the scripts, and succeeds even if the server cannot be
// reached: each call then fails, promptly, with an error that names the
// store, and the proxy fails closed. Retries (and a Cluster's redirects)
// are turned off whatever the URL says, since a script that timed out
// may have run. The client speaks RESP2 unless the URL asks for another
// protocol.
func Open(ctx context.Context, rawURL string, opts Options) (*Store, error) {
	prefix := opts.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("opening redis store: prefix %q contains a brace", prefix)
	}
	c, err := newClient(rawURL)
	if err != nil {
		return nil, fmt.Errorf("opening redis store: %w", err)
	}
	if err := checkWait(opts.WaitReplicas, opts.WaitTimeout, c.read); err != nil {
		c.rdb.Close()
		return nil, fmt.Errorf("opening redis store: %w", err)
	}
	addHooks(c, opts)
	s := &Store{
		rdb:        c.rdb,
		cluster:    c.cluster,
		now:        opts.Now,
		prefix:     prefix,
		channel:    prefix + "settled",
		name:       c.name,
		tlsAddr:    c.tlsAddr,
		log:        opts.Logger,
		evalOnly:   opts.Eval,
		pollMin:    pollMin,
		pollMax:    pollMax,
		tags:       idcache.New[loc](tagCacheSize),
		known:      idcache.New[known](record.KnownRecords),
		owned:      make(map[string]map[string]owned),
		ownerOf:    make(map[string]string),
		waiters:    make(map[string]*watch),
		subscribed: make(chan struct{}),
		done:       make(chan struct{}),
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	// go-redis logs some failures itself (a dial that failed in its
	// connection pool), by default as plain lines on stderr: they go to
	// the store's logger instead, under its level and format. The client
	// library has one logger per process.
	redis.SetLogger(clientLog{s.log})
	// Loading the scripts now makes each first call one round trip; a
	// server that is down is found out by the calls themselves.
	loadCtx, cancel := context.WithTimeout(ctx, dialTimeout)
	if err := s.loadScripts(loadCtx); err != nil {
		// Not the caller's news to tell twice: the first call that
		// needs the server reports it.
		s.log.Debug("redis store not reachable yet", "store", s.name, "err", err)
	} else {
		s.checkServer(loadCtx, opts.WaitReplicas)
	}
	cancel()
	s.batch = batch.Start(maxBatch, senders, s.sendBatch)
	s.attaches.Start(attachFlush, s.writeAttaches, func(err error) {
		s.log.Warn("writing the counts of attached callers; kept for the next try", "store", s.name, "err", err)
	})
	var listenCtx context.Context
	listenCtx, s.stop = context.WithCancel(context.Background())
	s.ps = s.rdb.Subscribe(listenCtx)
	go s.listen(listenCtx)
	return s, nil
}

// Close stops the subscription and closes the connections. Waits under way
// return errors.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.stop()
		_ = s.ps.Close()
		<-s.done
		flush, cancel := context.WithTimeout(context.Background(), ioTimeout)
		if err := s.attaches.Close(flush); err != nil {
			s.log.Warn("writing the counts of attached callers at close; they are lost", "store", s.name, "err", err)
		}
		cancel()
		s.batch.Close()
		s.closeErr = s.rdb.Close()
		s.wakeAll() // to find the client closed
	})
	return s.closeErr
}

// clock returns now as the scripts take it.
func (s *Store) clock() string { return encTime(s.now()) }

// fail wraps an error of the server or the connection with the operation
// and the store's name.
func (s *Store) fail(op string, err error) error {
	return fmt.Errorf("%s: %s: %w", op, s.name, err)
}

// Keys; see the package doc.

func tagOf(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:16])
}

func (s *Store) holderKey(tag string) string     { return s.prefix + "{" + tag + "}:k" }
func (s *Store) recordPrefix(tag string) string  { return s.prefix + "{" + tag + "}:r:" }
func (s *Store) recordKey(tag, id string) string { return s.recordPrefix(tag) + id }
func (s *Store) indexKey(id string) string       { return s.prefix + "i:" + id }

// Reserve implements record.Store.
func (s *Store) Reserve(ctx context.Context, r *record.Record, opts record.ReserveOptions) (*record.Record, bool, error) {
	op := "reserving " + r.ID
	if err := ctx.Err(); err != nil {
		return nil, false, fmt.Errorf("%s: %w", op, err)
	}
	at := s.now()
	now := encTime(at)
	if opts.Lease > 0 {
		r = r.Clone()
		r.LeaseUntil = opts.LeaseFrom(r, at)
	}
	tag := tagOf(r.Key)
	f, hist := newFields(r, now, opts.Dispatch)
	args := append([]any{now, s.channel, s.recordPrefix(tag), r.ID, replaceList(opts.Replace), r.Fingerprint,
		flightTTL(now, encTime(r.LeaseUntil), r.Retention), tag}, f...)
	// The script writes the id's index when it wins, so that another
	// process finds the record by its id from the start (one that
	// attached to it waits on it by id, while this one may wait for its
	// account's room before its first update); a reservation it does
	// not win, a replay or an attach, leaves no key behind.
	keys := []string{s.holderKey(tag), s.recordKey(tag, r.ID), s.indexKey(r.ID)}
	if s.cluster != nil {
		keys = keys[:2] // the index is in another slot: see indexWon
	}
	reading, err := s.attaches.Begin(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", op, err)
	}
	cmds, replicas, err := s.send(ctx, func(p redis.Pipeliner, full bool) {
		s.eval(ctx, p, reserveScript, full, keys, args...)
	})
	if err != nil {
		return nil, false, s.wrap(op, err)
	}
	v, err := cmds[0].(*redis.Cmd).Slice()
	if err != nil {
		// A script never sent reserved nothing: the caller need not
		// fail it later.
		return nil, false, s.fail(op, notSent(err))
	}
	if len(v) < 3 {
		return nil, false, s.fail(op, fmt.Errorf("unexpected reply %v", v))
	}
	won, _ := v[0].(int64)
	oid, _ := v[1].(string)
	if oid != "" {
		ttl, _ := v[2].(int64)
		s.orphanSettled(ctx, oid, ttl)
	}
	if replicas != nil && (won == 1 || oid != "") {
		// It wrote (a reservation, a settled orphan) unconfirmed; a
		// match only read.
		return nil, false, s.fail(op, replicas)
	}
	switch won {
	case 1:
		return s.won(ctx, reading, reserved(r, now, opts.Dispatch), hist, tag, oid, v)
	case -1:
		return nil, false, fmt.Errorf("%s: execution id already used", op)
	}
	if len(v) < 4 {
		return nil, false, s.fail(op, fmt.Errorf("unexpected reply %v", v))
	}
	return s.lost(ctx, reading, v[3], tag, oid, r.Fingerprint, op)
}

// won ends a reservation the script won with rec, the record it wrote
// (reserved), and v, the script's reply: rec is remembered and tracked,
// and carries the orphan the script settled, oid, if any.
func (s *Store) won(ctx context.Context, reading record.Reading, rec *record.Record, hist int, tag, oid string, v []any) (*record.Record, bool, error) {
	s.remember(rec, hist)
	s.tags.Put(rec.ID, loc{tag, rec.Retention})
	s.track(rec, loc{tag, rec.Retention})
	if s.cluster != nil {
		if err := s.indexWon(ctx, rec.ID, tag); err != nil {
			return nil, false, s.fail("reserving "+rec.ID, madeError{err})
		}
	}
	if oid != "" && len(v) > 3 {
		rec = rec.WithOrphan(s.settledOrphan(ctx, reading, v[3], tag, oid))
	}
	return rec, true, nil
}

// lost ends a reservation the script did not win: reply is the key's
// holder, which the call is matched against by fingerprint, and which
// shows itself as it was before this attach counts if it is the orphan
// this call settled (oid).
func (s *Store) lost(ctx context.Context, reading record.Reading, reply any, tag, oid, fingerprint, op string) (*record.Record, bool, error) {
	rec, err := s.decodeReply(reply, tag)
	if err != nil {
		return nil, false, s.fail(op, err)
	}
	if oid != "" {
		if rec.Orphan, err = reading.Show(ctx, rec.Clone(), s.storedAttached); err != nil {
			return nil, false, s.wrap(op, err)
		}
	}
	if rec, err = reading.Match(ctx, rec, fingerprint, s.storedAttached); err != nil {
		return nil, false, s.wrap(op, err)
	}
	return rec, false, nil
}

// replaceList is the states a reservation may replace, as the reservation
// script reads them: ",failed,unknown,".
func replaceList(states []record.State) string {
	list := ","
	for _, st := range states {
		list += string(st) + ","
	}
	return list
}

// settledOrphan decodes oid, the orphan that a won reservation's script
// settled, from reply, with its attaches not yet written counted in. A
// failure is logged: the reservation is made. An orphan whose count
// cannot be read again is kept as read, for its report is the takeover's
// only one.
func (s *Store) settledOrphan(ctx context.Context, reading record.Reading, reply any, tag, oid string) *record.Record {
	orphan, err := s.decodeReply(reply, tag)
	if err != nil {
		s.log.Warn("decoding the orphan a reservation settled", "execution", oid, "store", s.name, "err", err)
		return nil
	}
	shown, err := reading.Show(ctx, orphan.Clone(), s.storedAttached)
	if err != nil {
		s.log.Warn("counting the attaches of the orphan a reservation settled", "execution", oid, "store", s.name, "err", err)
		return orphan
	}
	return shown
}

// decodeReply decodes a record's fields from a script's reply and
// remembers where it is.
func (s *Store) decodeReply(v any, tag string) (*record.Record, error) {
	rec, _, err := s.decodeFields(v, tag)
	return rec, err
}

// decodeFields is decodeReply, and returns the length of the record's
// history field too.
func (s *Store) decodeFields(v any, tag string) (*record.Record, int, error) {
	m, err := fields(v)
	if err != nil {
		return nil, 0, err
	}
	rec, err := decode(m)
	if err != nil {
		return nil, 0, err
	}
	s.tags.Put(rec.ID, loc{tag, rec.Retention})
	return rec, len(m["history"]), nil
}

// orphanSettled follows up a script that settled the orphan id: its
// index, kept for a day while it was in flight, gets the record's TTL.
// Orphans are rare, so the extra round trip is too.
func (s *Store) orphanSettled(ctx context.Context, id string, ttl int64) {
	s.untrack(id)
	if ttl <= 0 {
		return
	}
	if err := s.rdb.PExpire(ctx, s.indexKey(id), time.Duration(ttl)*time.Millisecond).Err(); err != nil {
		s.log.Warn("setting the TTL of a settled orphan's index", "execution", id, "store", s.name, "err", err)
	}
}

// Update implements record.Store.
func (s *Store) Update(ctx context.Context, id string, c record.Change) (*record.Record, error) {
	return s.update(ctx, id, c, true)
}

// update is Update; by the settle script where it can make c, if
// trySettle.
func (s *Store) update(ctx context.Context, id string, c record.Change, trySettle bool) (*record.Record, error) {
	op := "updating " + id
	reading, l, cached, err := s.find(ctx, op, id)
	if err != nil {
		return nil, err
	}
	u := s.newUpdateCall(ctx, id, l, cached, &c, trySettle)
	cmds, replicas, err := s.send(ctx, u.fill)
	if err != nil {
		return nil, s.wrap(op, err)
	}
	if u.indexInPipeline {
		if err := cmds[1].Err(); err != nil && cmds[0].Err() == nil {
			s.log.Warn("writing an index", "execution", id, "store", s.name, "err", err)
		}
	}
	v, err := cmds[0].(*redis.Cmd).Slice()
	if err == nil && len(v) == 0 {
		err = errors.New("empty reply")
	}
	if err != nil {
		return nil, s.fail(op, err)
	}
	status, _ := v[0].(string)
	if status == "moved" {
		// The record is no longer as this Store knew it: the update
		// script makes the change, or says why not.
		s.known.Drop(id)
		return s.update(ctx, id, c, false)
	}
	if status == "notfound" {
		s.tags.Drop(id)
		s.known.Drop(id)
		s.untrack(id)
		s.keepSecret(ctx, true) // the store may have lost its data
		if u.indexInPipeline {
			// The index just written points nowhere.
			_ = s.rdb.Del(ctx, s.indexKey(id)).Err()
		}
		return nil, fmt.Errorf("%s: %w", op, record.ErrNotFound)
	}
	if replicas != nil && (status == "applied" || status == "ok") {
		return nil, s.fail(op, replicas) // it wrote, unconfirmed
	}
	var rec *record.Record
	if status == "applied" {
		rec, err = s.applied(u.known, c, u.at, v)
	} else {
		rec, err = s.updatedReply(v, l.tag, status == "ok")
	}
	if err != nil {
		return nil, s.fail(op, err)
	}
	if status == "conflict" {
		if u.indexInPipeline {
			s.fixIndex(ctx, rec) // the pipeline set it for the change refused
		}
		return nil, fmt.Errorf("%s from %s to %s: %w", op, rec.State, c.To, record.ErrConflict)
	}
	if !u.indexInPipeline && !u.indexInScript {
		s.fixIndex(ctx, rec)
	}
	if rec.State.Settled() || decided(rec) {
		s.wake(id) // at once, without waiting for our own message
	}
	s.track(rec, loc{l.tag, rec.Retention})
	if rec, err = reading.Show(ctx, rec, s.storedAttached); err != nil {
		return nil, s.wrap(op, err)
	}
	return rec, nil
}

// decided reports whether rec's last transition took it out of Accepted
// other than to Dispatched, which every execution does: its decision's
// waiters (WaitDecided) are woken. The update script publishes that, and
// a dispatch of a record that awaited an approval too.
func decided(rec *record.Record) bool {
	n := len(rec.History)
	return n >= 2 && rec.History[n-2].State == record.Accepted && rec.State != record.Accepted && rec.State != record.Dispatched
}

// fixIndex sets the TTL of the index of rec as its state requires, when the
// update did not: a settled record's index expires with the record, its
// retention and the grace after it settled.
func (s *Store) fixIndex(ctx context.Context, rec *record.Record) {
	var err error
	if rec.State.InFlight() || rec.ExpiresAt.IsZero() || rec.Retention > maxTTL {
		err = s.rdb.PExpire(ctx, s.indexKey(rec.ID), indexTTL(rec.State, rec.Retention)).Err()
	} else {
		err = s.rdb.PExpireAt(ctx, s.indexKey(rec.ID), rec.ExpiresAt.Add(ttlGrace)).Err()
	}
	if err != nil {
		s.log.Warn("setting the TTL of an index", "execution", rec.ID, "store", s.name, "err", err)
	}
}

// Get implements record.Store.
func (s *Store) Get(ctx context.Context, id string) (*record.Record, error) {
	op := "getting " + id
	reading, l, _, err := s.find(ctx, op, id)
	if err != nil {
		return nil, err
	}
	m, err := s.rdb.HGetAll(ctx, s.recordKey(l.tag, id)).Result()
	if err != nil {
		return nil, s.fail(op, err)
	}
	if len(m) == 0 {
		s.tags.Drop(id)
		return nil, fmt.Errorf("%s: %w", op, record.ErrNotFound)
	}
	rec, err := decode(m)
	if err != nil {
		return nil, s.fail(op, err)
	}
	s.tags.Put(id, loc{l.tag, rec.Retention})
	if rec, err = reading.Show(ctx, rec, s.storedAttached); err != nil {
		return nil, s.wrap(op, err)
	}
	return rec, nil
}

// Renew implements record.Store. It renews, in one round trip, the records
// in flight that this Store reserved or claimed for owner.
func (s *Store) Renew(ctx context.Context, owner string, until time.Time) error {
	op := "renewing the leases of " + owner
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	s.mu.Lock()
	mine := make([]owned, 0, len(s.owned[owner]))
	for _, o := range s.owned[owner] {
		mine = append(mine, o)
	}
	s.mu.Unlock()
	if len(mine) == 0 {
		s.keepSecret(ctx, false)
		return nil
	}
	lease, now := encTime(until), s.clock()
	cmds, replicas := s.pipe(ctx, len(mine), func(p redis.Pipeliner, i int, full bool) {
		o := mine[i]
		s.eval(ctx, p, renewScript, full, []string{s.recordKey(o.tag, o.id), s.holderKey(o.tag)}, owner, lease, o.id, now)
	})
	var first error
	var renewed []owned
	at := s.now()
	for i, o := range mine {
		n, err := cmds[i][0].(*redis.Cmd).Int64()
		switch {
		case err != nil:
			first = cmp.Or(first, err)
		case n == 0:
			// Settled, or taken over by another owner.
			s.untrackIf(o.id, o.gen)
		case replicas != nil:
			first = cmp.Or(first, replicas) // renewed, unconfirmed
		case at.Sub(o.indexed) > indexFlightTTL/2:
			renewed = append(renewed, o)
		}
	}
	if len(renewed) > 0 {
		// The index of a record in flight a long while is given another
		// day. It is outside the record's slot, so not in the script;
		// and not in its round trip, which would give the index of a
		// record found settled, or taken over, a day past its record.
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, o := range renewed {
				p.PExpire(ctx, s.indexKey(o.id), indexFlightTTL)
			}
			return nil
		})
		if err == nil {
			s.indexed(renewed, at)
		}
		first = cmp.Or(first, err)
	}
	if first != nil {
		return s.fail(op, first)
	}
	// After the renewal, which a store that stopped answering must not
	// hold up longer than its own timeout.
	s.keepSecret(ctx, false)
	return nil
}

// Check sends the server a PING within the dial and read timeouts, after
// the password and database a new connection sends, and the probes of
// what the ACL may keep from the store's user (queueProbes). An error the server
// gives that waiting does not end is marked record.ErrStoreRefused.
func (s *Store) Check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout+ioTimeout)
	defer cancel()
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return s.refusal(s.fail("connecting", err))
	}
	var probes []redis.Cmder
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		probes = s.queueProbes(ctx, p)
		return nil
	})
	return s.probesRefused(probes)
}

// refusal marks err record.ErrStoreRefused when the server answered and
// refuses the URL: its password or user, its database number, its
// client_name=, or cluster=true for a server that is not in a Cluster;
// or when a rediss:// URL names a server that answers without TLS, where
// the handshake waits out the timeout as if the server were down.
func (s *Store) refusal(err error) error {
	var redisErr redis.Error
	if !errors.As(err, &redisErr) {
		if s.tlsAddr != "" && plainTextServer(s.tlsAddr) {
			return record.StoreRefused(fmt.Errorf("%w: the server at %s answers without TLS; rediss:// is for a server that serves TLS, give redis:// for this one", err, s.tlsAddr))
		}
		return err
	}
	msg := redisErr.Error()
	for _, p := range []string{"WRONGPASS", "NOAUTH", "NOPERM", "ERR invalid password", "ERR DB index is out of range", "ERR invalid DB index", "ERR This instance has cluster support disabled", "ERR Client names cannot contain"} {
		if strings.HasPrefix(msg, p) {
			return record.StoreRefused(err)
		}
	}
	return err
}

// wrap adds the operation to err, and the store's name unless err is one
// of the record package's or the context's.
func (s *Store) wrap(op string, err error) error {
	if errors.Is(err, record.ErrNotFound) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", op, err)
	}
	return s.fail(op, err)
}

// pipe runs n items in one round trip, item i queued by fill as one or
// more commands, and returns each item's commands, each with its result
// or error. An item with a command the server had forgotten the script
// or function of (a restart, a SCRIPT FLUSH, a FUNCTION FLUSH) did not
// run that command, and is sent once more, in full; the others ran and
// are not sent again: a pipeline can fail part way, when the library
// comes back or goes in the middle of it, and an attach count sent twice
// would be counted twice. It returns too why the replicas asked for did
// not confirm the writes, or nil (replicas.go): the caller knows which
// of its items wrote.
func (s *Store) pipe(ctx context.Context, n int, fill func(p redis.Pipeliner, i int, full bool)) ([][]redis.Cmder, error) {
	items := make([][]redis.Cmder, n)
	var r replication
	send := func(which []int, full bool) {
		p := s.rdb.Pipeline()
		ends := make([]int, len(which))
		for j, i := range which {
			fill(p, i, full)
			ends[j] = p.Len()
		}
		cmds, _ := p.Exec(withReplication(ctx, &r))
		start := 0
		for j, i := range which {
			items[i], start = cmds[start:ends[j]], ends[j]
		}
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	send(all, false)
	var again []int
	for i, cmds := range items {
		if forgotten(cmds) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		first := r.err
		s.relearn(ctx)
		send(again, true)
		r.err = cmp.Or(first, r.err)
	}
	return items, r.err
}

// An owned record is one in flight that this Store reserved or claimed for
// an owner, kept for Renew.
type owned struct {
	id string
	loc
	gen     uint64    // when it was tracked
	indexed time.Time // when its index was last given indexFlightTTL
}

// track notes that rec, in flight, is run by rec.Owner, for Renew; a
// record settled or without an owner is forgotten.
func (s *Store) track(rec *record.Record, l loc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forget(rec.ID)
	if rec.State.Settled() || rec.Owner == "" {
		return
	}
	m := s.owned[rec.Owner]
	if m == nil {
		m = make(map[string]owned)
		s.owned[rec.Owner] = m
	}
	s.gen++
	m[rec.ID] = owned{id: rec.ID, loc: l, gen: s.gen, indexed: s.now()}
	s.ownerOf[rec.ID] = rec.Owner
}

// indexed notes that the index of each of os was given indexFlightTTL at
// at, if it has not been tracked again since.
func (s *Store) indexed(os []owned, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range os {
		if cur, ok := s.owned[s.ownerOf[o.id]][o.id]; ok && cur.gen == o.gen {
			cur.indexed = at
			s.owned[s.ownerOf[o.id]][o.id] = cur
		}
	}
}

func (s *Store) untrack(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forget(id)
}

// untrackIf forgets id if it has not been tracked again since gen: Renew
// found it settled, but an update may have claimed it since.
func (s *Store) untrackIf(id string, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.owned[s.ownerOf[id]][id].gen == gen {
		s.forget(id)
	}
}

// forget drops id from owned. s.mu must be held.
func (s *Store) forget(id string) {
	owner, ok := s.ownerOf[id]
	if !ok {
		return
	}
	delete(s.ownerOf, id)
	delete(s.owned[owner], id)
	if len(s.owned[owner]) == 0 {
		delete(s.owned, owner)
	}
}

// clientLog passes go-redis's own messages to a logger, at debug level:
// they repeat what the failed operation's own error says.
type clientLog struct{ log *slog.Logger }

func (l clientLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "redis client", "detail", fmt.Sprintf(format, v...))
}
