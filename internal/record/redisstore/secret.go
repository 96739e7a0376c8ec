package redisstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// The secret lives under <prefix>secret. A Redis that loses its data (a
// restart without persistence) loses it with the records, and the next
// process to ask makes another: its calls then match none of the older
// processes'. So a process that holds the secret writes it again once it
// finds it gone: looked for with its lease renewals, at most once every
// secretCheckEvery, and at once when a record is gone from under it. It
// says so, and says when the store holds another secret than its own.

// secretCheckEvery bounds how often Renew looks for the secret.
const secretCheckEvery = time.Minute

// Secret returns the key every proxy sharing this store signs
// fingerprints with: 32 random bytes, written once by whichever process
// asks first.
func (s *Store) Secret(ctx context.Context) ([]byte, error) {
	s.smu.Lock()
	defer s.smu.Unlock()
	if s.secret != nil {
		return append([]byte(nil), s.secret...), nil
	}
	b := make([]byte, 32)
	if _, err := io.ReadFull(rand.Reader, b); err != nil {
		return nil, fmt.Errorf("making the secret: %w", err)
	}
	key := s.prefix + "secret"
	// One pipeline, so that a store that waits for its replicas
	// (replicas.go) waits for the secret too: a failover that lost it
	// would change every fingerprint.
	var stored *redis.BoolCmd
	var read *redis.StringCmd
	var probes []redis.Cmder
	var r replication
	_, _ = s.rdb.Pipelined(withReplication(ctx, &r), func(p redis.Pipeliner) error {
		stored, read = p.SetNX(ctx, key, b, 0), p.Get(ctx, key)
		probes = s.queueProbes(ctx, p)
		return nil
	})
	if err := stored.Err(); err != nil && !keptFromWrites(err, read) {
		if takesNoWrites(err) {
			// It answered: not a store that cannot be reached.
			return nil, record.WritesRefused(s.fail("storing the secret", err))
		}
		return nil, s.needs("setnx", s.refusal(s.fail("storing the secret", err)))
	}
	if err := s.probesRefused(probes); err != nil {
		return nil, err
	}
	if stored.Val() && r.err != nil {
		return nil, s.fail("storing the secret", r.err) // stored, unconfirmed
	}
	got, err := read.Bytes()
	if err != nil {
		return nil, s.fail("reading the secret", err)
	}
	if len(got) != 32 {
		return nil, fmt.Errorf("reading the secret: %s holds %d bytes under %s; want 32", s.name, len(got), key)
	}
	s.secret = got
	return append([]byte(nil), got...), nil
}

// keepSecret writes the secret this process holds again if the store no
// longer has it, and says if the store holds another. Unless now is set,
// it does so at most once every secretCheckEvery. A store that does not
// answer is left for the next check: its failures are the callers' to
// report.
func (s *Store) keepSecret(ctx context.Context, now bool) {
	s.smu.Lock()
	secret, at := s.secret, s.now()
	due := secret != nil && (now || at.Sub(s.secretChecked) >= secretCheckEvery)
	if due {
		s.secretChecked = at
	}
	s.smu.Unlock()
	if !due {
		return
	}
	key := s.prefix + "secret"
	var stored *redis.BoolCmd
	var read *redis.StringCmd
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		stored, read = p.SetNX(ctx, key, secret, 0), p.Get(ctx, key)
		return nil
	})
	got, err := read.Bytes()
	switch {
	case stored.Err() != nil || err != nil:
	case stored.Val():
		s.log.Error("the store had lost the fingerprint secret, with its data: this process wrote its own again, so that processes started since match its calls",
			"store", s.name, "key", key)
	case !bytes.Equal(got, secret):
		s.smu.Lock()
		said := s.secretOther
		s.secretOther = true
		s.smu.Unlock()
		if !said {
			s.log.Error("the store holds another fingerprint secret than this process's: it lost its data, and a process started since made a new one; processes on different secrets never match each other's calls, so restart this one",
				"store", s.name, "key", key)
		}
	}
}

// keptFromWrites says if err, SETNX's, is a server that answered but
// takes no writes (OOM at its maxmemory, READONLY a replica), while the
// GET after it read the secret: it is known, and the calls fail closed
// naming the server's error, not the secret, or are answered where they
// only read (a replay on a full server). A refusal (NOPERM) stays one.
func keptFromWrites(err error, read *redis.StringCmd) bool {
	return takesNoWrites(err) && read.Err() == nil
}

// takesNoWrites says if err is a server's that answered but takes no
// writes: OOM at its maxmemory, READONLY a replica.
func takesNoWrites(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "OOM ") || strings.HasPrefix(msg, "READONLY ")
}

// queueProbes queues on p what the ACL may keep from the store's user
// although it takes the secret: a PUBLISH on the store's channel, where
// every transition's script publishes after its write (Redis 7 gives new
// users no channel), and a script that reads a record no one has. A
// user kept from either would have each call fail, or run and then fail
// to record its outcome. An empty id wakes no waiter.
func (s *Store) queueProbes(ctx context.Context, p redis.Pipeliner) []redis.Cmder {
	return []redis.Cmder{
		p.Publish(ctx, s.channel, ""),
		s.eval(ctx, p, checkScript, false, []string{s.recordKey("probe", ""), s.holderKey("probe")}, s.clock(), s.channel, ""),
	}
}

// probesRefused returns the first refusal among the probes' results, with
// what the store's user needs, or nil: any other error, such as a
// script the server forgot, is the calls' to report.
func (s *Store) probesRefused(probes []redis.Cmder) error {
	for _, c := range probes {
		err := c.Err()
		if err == nil {
			continue
		}
		if err = s.refusal(s.fail(c.Name(), err)); errors.Is(err, record.ErrStoreRefused) {
			return s.needs(c.Name(), err)
		}
	}
	return nil
}

// needs adds to err, a refusal of the command cmd, what the store's user
// lacks, if the server said NOPERM: the command itself, the store's keys
// or its channel. Redis 7.0 says "one of the keys" or "one of the
// channels"; later versions name the key or channel.
func (s *Store) needs(cmd string, err error) error {
	msg := err.Error()
	i := strings.Index(msg, "NOPERM")
	if i < 0 || !errors.Is(err, record.ErrStoreRefused) {
		return err
	}
	var need string
	switch msg = msg[i:]; {
	case strings.Contains(msg, " channel"):
		need = "the channel: ACL SETUSER ... &" + s.channel
	case strings.Contains(msg, " key"):
		need = "the keys: ACL SETUSER ... ~" + s.prefix + "*"
	case cmd == "publish":
		need = "the publish command, to wake the waiters of other processes"
	case cmd == "setnx":
		need = "the setnx and get commands, to keep the fingerprint secret"
	default:
		need = "the " + cmd + " command, to run the store's scripts"
	}
	return fmt.Errorf("%w (the store's user needs %s)", err, need)
}
