package redisstore_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/redisstore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/skipnote"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		skipnote.Report("internal/record/redisstore")
		os.Exit(code)
	}))
}

const howToRun = "MCPI_REDIS_URL=redis://127.0.0.1:6379/0 go test ./internal/record/redisstore"

// serverURL returns the URL of the Redis server the tests use, from
// MCPI_REDIS_URL. Without a reachable one the test is skipped, or fails
// when MCPI_REQUIRE_SERVICES=1.
func serverURL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv("MCPI_REDIS_URL")
	if u == "" {
		unavailable(tb, "MCPI_REDIS_URL is not set")
	}
	opt, err := redis.ParseURL(u)
	if err != nil {
		tb.Fatalf("MCPI_REDIS_URL: %v", err)
	}
	c := redis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		unavailable(tb, fmt.Sprintf("no Redis server answers at %s (%v)", opt.Addr, err))
	}
	return u
}

func unavailable(tb testing.TB, why string) {
	tb.Helper()
	skipnote.Unavailable(tb, "Redis store", why+"; to run the Redis store tests: "+howToRun)
}

// newPrefix returns a key prefix of the test's own, and deletes every key
// under it when the test ends.
func newPrefix(tb testing.TB, url string) string {
	tb.Helper()
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	prefix := "mcpi-test-" + hex.EncodeToString(b) + ":"
	tb.Cleanup(func() { deleteKeys(tb, url, prefix) })
	return prefix
}

// deleteKeys deletes the keys under prefix, which has no glob characters.
func deleteKeys(tb testing.TB, url, prefix string) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		tb.Error(err)
		return
	}
	c := redis.NewClient(opt)
	defer c.Close()
	ctx := context.Background()
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var batch []string
	flush := func() {
		if len(batch) > 0 {
			if err := c.Unlink(ctx, batch...).Err(); err != nil {
				tb.Errorf("deleting the test's keys: %v", err)
			}
			batch = batch[:0]
		}
	}
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == 1000 {
			flush()
		}
	}
	flush()
	if err := iter.Err(); err != nil {
		tb.Errorf("listing the test's keys: %v", err)
	}
}

// open returns a store under prefix, closed when the test ends.
func open(tb testing.TB, url, prefix string, now func() time.Time) *redisstore.Store {
	tb.Helper()
	return openWith(tb, url, redisstore.Options{Now: now, Prefix: prefix})
}

// openWith returns a store with opts, closed when the test ends.
func openWith(tb testing.TB, url string, opts redisstore.Options) *redisstore.Store {
	tb.Helper()
	s, err := redisstore.Open(context.Background(), url, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestSemantics(t *testing.T) {
	url := serverURL(t)
	recordtest.Run(t, func(t *testing.T, now func() time.Time) record.Store {
		return open(t, url, newPrefix(t, url), now)
	})
}

func newRecord(key string) *record.Record {
	return &record.Record{ID: record.NewID(time.Now()), Key: key, Fingerprint: key, Tool: "charge_card", Retention: time.Hour}
}

// TestQueueIsNotAnOutage: a call that waits longer than the pool's
// timeout for a connection, while other commands get theirs, is under
// load, not facing a server that stopped answering: it waits its turn
// instead of failing.
func TestQueueIsNotAnOutage(t *testing.T) {
	url := serverURL(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	prefix := newPrefix(t, url)
	const poolTimeout = 700 * time.Millisecond
	s := open(t, url+sep+"pool_size=2&pool_timeout=700ms", prefix, nil)
	ctx := t.Context()
	r, _, err := s.Reserve(ctx, newRecord("k"), record.ReserveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The pool's two connections go from holder to holder, each keeping
	// one for a second (BLPOP's timeout, in whole seconds on older
	// servers): A from 0 s, B from 0.5 s, C from 1 s when A lets go. The
	// Get queues behind C, and gets B's at 1.5 s; its pool timeout runs
	// out at 1.3 s, after A was served.
	client := redisstore.Client(s)
	var wg sync.WaitGroup
	for _, after := range []time.Duration{0, 500 * time.Millisecond, 50 * time.Millisecond} {
		time.Sleep(after)
		wg.Go(func() {
			if err := client.BLPop(ctx, time.Second, prefix+"nothing").Err(); err != redis.Nil {
				t.Errorf("BLPOP: %v; want nil, after the wait", err)
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	got, err := s.Get(ctx, r.ID)
	waited := time.Since(start)
	wg.Wait()
	if err != nil || got.ID != r.ID {
		t.Fatalf("Get behind a queue that moves = %v, %v; want the record", got, err)
	}
	if waited < poolTimeout {
		t.Fatalf("Get waited %v, less than the pool's timeout: the queue under test did not form", waited)
	}
}

func TestUnreachableFailsPromptly(t *testing.T) {
	s, err := redisstore.Open(t.Context(), "redis://127.0.0.1:1/0", redisstore.Options{})
	if err != nil {
		t.Fatalf("Open of a server that is down = %v; want a store whose calls fail", err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	r := newRecord("k")
	calls := []struct {
		op   string
		call func() error
	}{
		{"reserving " + r.ID, func() error { _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); return err }},
		{"updating " + r.ID, func() error { _, err := s.Update(ctx, r.ID, record.Change{To: record.Dispatched}); return err }},
		{"getting " + r.ID, func() error { _, err := s.Get(ctx, r.ID); return err }},
		{"waiting for " + r.ID, func() error { _, err := s.Wait(ctx, r.ID); return err }},
		{"storing the secret", func() error { _, err := s.Secret(ctx); return err }},
	}
	for _, c := range calls {
		start := time.Now()
		err := c.call()
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("%s took %v against a server that is down; want a prompt error", c.op, took)
		}
		if err == nil {
			t.Fatalf("%s succeeded against a server that is down", c.op)
		}
		if msg := err.Error(); !strings.HasPrefix(msg, c.op+": redis store 127.0.0.1:1/0: ") {
			t.Errorf("error = %q; want it to say %q and name the store", msg, c.op)
		}
	}
}

// TestClientMessagesGoToTheLogger: what go-redis logs itself (a failed
// dial in its pool) reaches the store's logger, under the proxy's level
// and format, not stderr as plain lines.
func TestClientMessagesGoToTheLogger(t *testing.T) {
	var mu sync.Mutex
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(lockedWriter{&mu, &buf}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := redisstore.Open(t.Context(), "redis://127.0.0.1:1/0", redisstore.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := s.Get(ctx, "exe_x"); err == nil {
		t.Fatal("Get succeeded against a server that is down")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		got := buf.String()
		mu.Unlock()
		if strings.Contains(got, `"msg":"redis client"`) && strings.Contains(got, "connection pool") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the logger got %q; want go-redis's message about the failed dial", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// counter counts round trips: a command, or a pipeline. It keeps their
// names, for a failure to show. The handshake of a new pooled connection
// (HELLO, CLIENT SETINFO), which go-redis sends through the hooks too, is
// the connection's, not the operation's, and is not counted.
type counter struct {
	n     atomic.Int64
	mu    sync.Mutex
	names []string
}

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !handshake[cmd.Name()] {
			c.count(cmd.Name())
		}
		return next(ctx, cmd)
	}
}

// handshake names the commands go-redis sends on a new connection.
var handshake = map[string]bool{"hello": true, "client": true, "auth": true, "select": true}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var names []string
		setup := true
		for _, cmd := range cmds {
			names = append(names, cmd.Name())
			setup = setup && handshake[cmd.Name()]
		}
		if !setup {
			c.count(fmt.Sprint(names))
		}
		return next(ctx, cmds)
	}
}

func (c *counter) count(name string) {
	c.n.Add(1)
	c.mu.Lock()
	c.names = append(c.names, name)
	c.mu.Unlock()
}

func (c *counter) reset() {
	c.mu.Lock()
	c.n.Store(0)
	c.names = nil
	c.mu.Unlock()
}

// seen returns the names of the round trips counted from the nth.
func (c *counter) seen(n int64) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.names[min(int(n), len(c.names)):])
}

func TestRoundTrips(t *testing.T) {
	url := serverURL(t)
	s := open(t, url, newPrefix(t, url), nil)
	ctx := t.Context()
	var c counter
	redisstore.Client(s).AddHook(&c)

	execute := func(key string, count bool) {
		t.Helper()
		r := newRecord(key)
		r.Owner, r.LeaseUntil = "proxy-1", time.Now().Add(time.Minute)
		steps := []struct {
			name string
			do   func() error
		}{
			{"Reserve and dispatch", func() error {
				got, won, err := s.Reserve(ctx, r, record.ReserveOptions{Dispatch: true})
				if err == nil && (!won || got.State != record.Dispatched) {
					err = fmt.Errorf("won=%v, %s; want won, dispatched", won, got.State)
				}
				return err
			}},
			{"Update completed", func() error {
				_, err := s.Update(ctx, r.ID, record.Change{To: record.Completed, Result: json.RawMessage(`{}`)})
				return err
			}},
			{"Update delivered", func() error { _, err := s.Update(ctx, r.ID, record.Change{To: record.Delivered}); return err }},
		}
		for _, st := range steps {
			before := c.n.Load()
			if err := st.do(); err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
			if n := c.n.Load() - before; count && n != 1 {
				t.Errorf("%s took %d round trips (%v); want 1", st.name, n, c.seen(before))
			}
		}
	}
	execute("warm-up", false) // connections made; their handshakes are not counted
	c.reset()
	execute("one", true)
	if n := c.n.Load(); n != 3 {
		t.Errorf("a new execution took %d round trips; want 3 (Reserve, dispatched with it, and 2 Updates)", n)
	}

	before := c.n.Load()
	if _, won, err := s.Reserve(ctx, newRecord("one"), record.ReserveOptions{}); err != nil || won {
		t.Fatalf("replay: won=%v err=%v", won, err)
	}
	if n := c.n.Load() - before; n != 1 {
		t.Errorf("a replay took %d round trips; want 1", n)
	}

	for i := range 3 {
		r := newRecord("renew" + strconv.Itoa(i))
		r.Owner, r.LeaseUntil = "proxy-1", time.Now().Add(time.Minute)
		if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	before = c.n.Load()
	if err := s.Renew(ctx, "proxy-1", time.Now().Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if n := c.n.Load() - before; n != 1 {
		t.Errorf("Renew of 3 records took %d round trips; want 1", n)
	}
}

// TestReplaysLeaveNoKeys: a reservation that does not win (a replay, an
// attach) writes no key of its own; the won one is found by its id from
// another process.
func TestReplaysLeaveNoKeys(t *testing.T) {
	url := serverURL(t)
	prefix := newPrefix(t, url)
	s := open(t, url, prefix, nil)
	ctx := t.Context()
	first := newRecord("charge")
	first.Owner, first.LeaseUntil = "proxy-1", time.Now().Add(time.Minute)
	if _, won, err := s.Reserve(ctx, first, record.ReserveOptions{}); err != nil || !won {
		t.Fatalf("first reservation: won=%v err=%v", won, err)
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	defer c.Close()
	keys := func() []string {
		t.Helper()
		var all []string
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			all = append(all, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
		slices.Sort(all)
		return all
	}
	before := keys()
	for range 100 {
		if _, won, err := s.Reserve(ctx, newRecord("charge"), record.ReserveOptions{}); err != nil || won {
			t.Fatalf("replay: won=%v err=%v", won, err)
		}
	}
	if after := keys(); !slices.Equal(before, after) {
		t.Errorf("100 replays left %d keys more: before %v, after %v", len(after)-len(before), before, after)
	}
	other := open(t, url, prefix, nil)
	if got, err := other.Get(ctx, first.ID); err != nil || got.ID != first.ID {
		t.Errorf("another process's Get(%s) = %v, %v; want the record, by its index", first.ID, got, err)
	}
}

func TestAttachCounts(t *testing.T) {
	recordtest.RunAttachCounts(t, func(t *testing.T) (record.Store, record.Store, func(string) int) {
		url := serverURL(t)
		prefix := newPrefix(t, url)
		s := open(t, url, prefix, nil)
		return s, open(t, url, prefix, nil), func(id string) int {
			_, rec, _ := redisstore.Keys(s, "attached", id)
			n, err := redisstore.Client(s).HGet(context.Background(), rec, "attached").Int()
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	})
}

// evalHook signals each script that a client ran.
type evalHook struct{ ran chan struct{} }

func (h evalHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h evalHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.saw(cmd)
		return err
	}
}

func (h evalHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.saw(cmd)
		}
		return err
	}
}

func (h evalHook) saw(cmd redis.Cmder) {
	if n := cmd.Name(); n == "evalsha" || n == "eval" || n == "fcall" {
		select {
		case h.ran <- struct{}{}:
		default:
		}
	}
}

// TestReservedIsFoundByIDFromAnotherProcess: a record is found by its id
// from any process from its reservation on, before its first update.
func TestReservedIsFoundByIDFromAnotherProcess(t *testing.T) {
	url := serverURL(t)
	prefix := newPrefix(t, url)
	a, b := open(t, url, prefix, nil), open(t, url, prefix, nil)
	r, won, err := a.Reserve(t.Context(), newRecord("k"), record.ReserveOptions{})
	if err != nil || !won {
		t.Fatalf("Reserve = %v, won %v", err, won)
	}
	if got, err := b.Get(t.Context(), r.ID); err != nil || got.State != record.Accepted {
		t.Fatalf("another process's Get of a reserved record: %+v, %v; want it, accepted", got, err)
	}
}

// A waiter in one process is woken by a settle in another through pub/sub:
// its fallback poll is set too slow to find it in time.
func TestWaitWokenByAnotherProcess(t *testing.T) {
	url := serverURL(t)
	prefix := newPrefix(t, url)
	waiter, runner := open(t, url, prefix, nil), open(t, url, prefix, nil)
	redisstore.SetPoll(waiter, time.Hour, time.Hour)
	hook := evalHook{ran: make(chan struct{}, 1)}
	redisstore.Client(waiter).AddHook(hook)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	select {
	case <-redisstore.Subscribed(waiter):
	case <-ctx.Done():
		t.Fatal("the store never subscribed")
	}

	r, _, err := runner.Reserve(ctx, newRecord("k"), record.ReserveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runner.Update(ctx, r.ID, record.Change{To: record.Dispatched}); err != nil {
		t.Fatal(err)
	}
	done := make(chan *record.Record, 1)
	go func() {
		// The waiter never saw the record: it finds it by id.
		got, err := waiter.Wait(ctx, r.ID)
		if err != nil {
			t.Error(err)
		}
		done <- got
	}()
	select {
	case <-hook.ran: // the waiter has seen the record in flight
	case <-ctx.Done():
		t.Fatal("the waiter never checked the record")
	}
	if _, err := runner.Update(ctx, r.ID, record.Change{To: record.Completed, Result: json.RawMessage(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-done:
		if got == nil || got.State != record.Completed || string(got.Result) != `{"n":1}` {
			t.Fatalf("the waiter got %+v; want the completed record", got)
		}
	case <-ctx.Done():
		t.Fatal("the waiter was not woken by the other store's settle")
	}
	if got, err := waiter.Get(ctx, r.ID); err != nil || got.State != record.Completed {
		t.Fatalf("Get from the other store = %+v, %v", got, err)
	}
}

// pttl returns a function that reads a key's Redis TTL (-1 for none).
func pttl(t *testing.T, url string) func(key string) time.Duration {
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	raw := redis.NewClient(opt)
	t.Cleanup(func() { raw.Close() })
	return func(key string) time.Duration {
		t.Helper()
		d, err := raw.PTTL(t.Context(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
}

// A Renew that finds a record it tracked settled or taken over leaves
// the record's index the TTL its record gave it: a day past the record
// was a key left behind. The index of one in flight for over half a day
// it gives another day.
func TestRenewLeavesASettledIndex(t *testing.T) {
	url := serverURL(t)
	prefix := newPrefix(t, url)
	clock := recordtest.NewClock(time.Now())
	p1, p2 := open(t, url, prefix, clock.Now), open(t, url, prefix, clock.Now)
	ctx := t.Context()
	ttl := pttl(t, url)
	r := newRecord("k")
	r.Retention = time.Second
	r.Owner, r.LeaseUntil = "proxy-1", clock.Now().Add(10*time.Second)
	if _, _, err := p1.Reserve(ctx, r, record.ReserveOptions{Dispatch: true}); err != nil {
		t.Fatal(err)
	}
	_, rec, index := redisstore.Keys(p1, "k", r.ID)
	clock.Advance(11 * time.Second)
	if got, _, err := p2.Reserve(ctx, newRecord("k"), record.ReserveOptions{}); err != nil || got.State != record.Unknown {
		t.Fatalf("takeover: %+v, %v", got, err)
	}
	long := newRecord("long")
	long.Owner, long.LeaseUntil = "proxy-1", clock.Now().Add(10*time.Second)
	if _, _, err := p1.Reserve(ctx, long, record.ReserveOptions{Dispatch: true}); err != nil {
		t.Fatal(err)
	}
	_, _, longIndex := redisstore.Keys(p1, "long", long.ID)
	if err := p1.Renew(ctx, "proxy-1", clock.Now().Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if ttl(index) > ttl(rec)+time.Second {
		t.Errorf("after a Renew by its former owner, the index of settled %s lives %v, its record %v", r.ID, ttl(index), ttl(rec))
	}
	// The day its reservation gave the index of the other nearly over:
	if err := rawClient(t, url).PExpire(ctx, longIndex, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	clock.Advance(13 * time.Hour)
	if err := p1.Renew(ctx, "proxy-1", clock.Now().Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if d := ttl(longIndex); d < 23*time.Hour {
		t.Errorf("the index of %s, in flight for 13 hours, lives %v after a Renew; want a day", long.ID, d)
	}
}

// An update that a settled record refuses leaves its index expiring with
// it, though the update's round trip wrote the index: a second delivery
// a while after the first (two callers, each delivering) kept the index
// that while past the record.
func TestRefusedUpdateLeavesTheIndex(t *testing.T) {
	url := serverURL(t)
	prefix := newPrefix(t, url)
	p1, p2 := open(t, url, prefix, time.Now), open(t, url, prefix, time.Now)
	ctx := t.Context()
	ttl := pttl(t, url)
	r := newRecord("k")
	if _, _, err := p1.Reserve(ctx, r, record.ReserveOptions{Dispatch: true}); err != nil {
		t.Fatal(err)
	}
	mustUpdate(t, p1, r.ID, record.Change{To: record.Completed, Result: json.RawMessage(`{}`)})
	mustUpdate(t, p2, r.ID, record.Change{To: record.Delivered, From: record.Completed})
	time.Sleep(1500 * time.Millisecond)
	if _, err := p1.Update(ctx, r.ID, record.Change{To: record.Delivered, From: record.Completed}); !errors.Is(err, record.ErrConflict) {
		t.Fatalf("a second delivery: %v; want ErrConflict", err)
	}
	_, rec, index := redisstore.Keys(p1, "k", r.ID)
	if d, want := ttl(index), ttl(rec); d > want+500*time.Millisecond {
		t.Errorf("after a refused update, the index of %s lives %v, its record %v", r.ID, d, want)
	}
}

// Settled records, their holder and their index carry a Redis TTL of their
// retention and a grace; records in flight without a lease (which never
// become orphans) and their holder carry none.
func TestSettledRecordsExpireInRedis(t *testing.T) {
	url := serverURL(t)
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	s := open(t, url, newPrefix(t, url), clock.Now)
	ctx := t.Context()
	ttl := pttl(t, url)
	settled := func(what, key string) {
		t.Helper()
		if d := ttl(key); d <= time.Hour || d > time.Hour+redisstore.TTLGrace {
			t.Errorf("%s TTL = %v; want the retention and a grace", what, d)
		}
	}
	inFlight := func(what, key string) {
		t.Helper()
		if d := ttl(key); d != -1 {
			t.Errorf("%s TTL = %v; want none (-1)", what, d)
		}
	}
	indexInFlight := func(what, key string) {
		t.Helper()
		if d := ttl(key); d <= 23*time.Hour || d > 24*time.Hour {
			t.Errorf("%s TTL = %v; want a day, renewed while in flight", what, d)
		}
	}

	r, _, err := s.Reserve(ctx, newRecord("k"), record.ReserveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	holder, rec, index := redisstore.Keys(s, "k", r.ID)
	inFlight("accepted record", rec)
	inFlight("holder of an accepted record", holder)
	mustUpdate(t, s, r.ID, record.Change{To: record.Dispatched})
	indexInFlight("index of a dispatched record", index)
	mustUpdate(t, s, r.ID, record.Change{To: record.Unknown})
	settled("unknown record", rec)
	settled("holder of an unknown record", holder)
	settled("index of an unknown record", index)
	mustUpdate(t, s, r.ID, record.Change{To: record.Dispatched, Note: "retry"})
	inFlight("re-dispatched record", rec)
	inFlight("holder of a re-dispatched record", holder)
	indexInFlight("index of a re-dispatched record", index)
	mustUpdate(t, s, r.ID, record.Change{To: record.Completed, Result: json.RawMessage(`{}`)})
	settled("completed record", rec)

	// A replaced record that moves on leaves its successor's holder alone.
	next, won, err := s.Reserve(ctx, newRecord("k"), record.ReserveOptions{Replace: []record.State{record.Completed}})
	if err != nil || !won {
		t.Fatalf("Reserve with Replace: won=%v err=%v", won, err)
	}
	inFlight("holder of the successor", holder)
	mustUpdate(t, s, r.ID, record.Change{To: record.Delivered})
	inFlight("holder of the successor after its predecessor's delivery", holder)

	// An orphan settled by another caller's reservation: its index expires
	// with it.
	mustUpdate(t, s, next.ID, record.Change{To: record.Dispatched, Owner: "proxy-1", LeaseUntil: clock.Now().Add(10 * time.Second)})
	_, _, nextIndex := redisstore.Keys(s, "k", next.ID)
	indexInFlight("index of a dispatched record", nextIndex)
	clock.Advance(11 * time.Second)
	if got, _, err := s.Reserve(ctx, newRecord("k"), record.ReserveOptions{}); err != nil || got.State != record.Unknown {
		t.Fatalf("Reserve over an orphan = %+v, %v", got, err)
	}
	settled("index of a settled orphan", nextIndex)
}

// A record in flight with a lease, and its holder, expire one retention
// and the grace after the lease ends, so that an orphan no one asks for
// again is dropped as if it had been settled then; a renewal or a new
// claim moves that along with the lease.
func TestOrphansExpireInRedis(t *testing.T) {
	url := serverURL(t)
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	s := open(t, url, newPrefix(t, url), clock.Now)
	ctx := t.Context()
	ttl := pttl(t, url)
	// want checks that key's TTL is lease, the retention (an hour) and
	// the grace, less the few seconds a slow test may take.
	want := func(what, key string, lease time.Duration) {
		t.Helper()
		d := ttl(key)
		full := lease + time.Hour + redisstore.TTLGrace
		if d > full || d < full-10*time.Second {
			t.Errorf("%s TTL = %v; want %v: the lease, the retention and the grace", what, d, full)
		}
	}

	r := newRecord("k")
	r.Owner, r.LeaseUntil = "proxy-1", clock.Now().Add(30*time.Second)
	if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	holder, rec, _ := redisstore.Keys(s, "k", r.ID)
	want("accepted record", rec, 30*time.Second)
	want("holder of an accepted record", holder, 30*time.Second)

	clock.Advance(10 * time.Second)
	if err := s.Renew(ctx, "proxy-1", clock.Now().Add(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	want("renewed record", rec, 10*time.Minute)
	want("holder of a renewed record", holder, 10*time.Minute)
	mustUpdate(t, s, r.ID, record.Change{To: record.Dispatched})
	want("dispatched record", rec, 10*time.Minute)

	// Settled unknown, then claimed again by another owner: in flight
	// under the new lease.
	mustUpdate(t, s, r.ID, record.Change{To: record.Unknown})
	mustUpdate(t, s, r.ID, record.Change{To: record.Dispatched, Owner: "proxy-2", LeaseUntil: clock.Now().Add(time.Minute)})
	want("record re-dispatched by another owner", rec, time.Minute)
	want("holder of a re-dispatched record", holder, time.Minute)

	// A lease already over when the TTL is set leaves the retention and
	// the grace.
	clock.Advance(5 * time.Minute)
	late := newRecord("late")
	late.Owner, late.LeaseUntil = "proxy-3", clock.Now().Add(-time.Second)
	if _, _, err := s.Reserve(ctx, late, record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	_, lateRec, _ := redisstore.Keys(s, "late", late.ID)
	want("record whose lease is over", lateRec, 0)
}

// Times are kept to the nanosecond: expiry is exact, with a carry into
// the seconds, and a lease lapses one nanosecond after its end, not at it.
func TestTimesAreExact(t *testing.T) {
	url := serverURL(t)
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 999_999_999, time.UTC))
	s := open(t, url, newPrefix(t, url), clock.Now)
	ctx := t.Context()
	r := newRecord("k")
	r.Retention = 1500*time.Millisecond + 1
	r.Owner, r.LeaseUntil = "proxy-1", clock.Now().Add(time.Nanosecond)
	if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Nanosecond) // at the lease's end: still held
	got, _, err := s.Reserve(ctx, newRecord("k"), record.ReserveOptions{})
	if err != nil || got.ID != r.ID || got.State != record.Accepted {
		t.Fatalf("Reserve at the lease's end = %+v, %v; want the record still accepted", got, err)
	}
	clock.Advance(time.Nanosecond) // past it: an orphan
	next, won, err := s.Reserve(ctx, newRecord("k"), record.ReserveOptions{})
	if err != nil || !won {
		t.Fatalf("Reserve past the lease = %+v won=%v, %v; want the orphan failed and replaced", next, won, err)
	}
	old, err := s.Get(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	settledAt := time.Date(2026, 7, 28, 12, 0, 1, 1, time.UTC)
	if len(old.History) != 2 || !old.History[1].At.Equal(settledAt) {
		t.Fatalf("History = %+v; want failed at %v", old.History, settledAt)
	}
	if want := settledAt.Add(r.Retention); !old.ExpiresAt.Equal(want) {
		t.Errorf("ExpiresAt = %v; want %v", old.ExpiresAt, want)
	}
	if want := "owner proxy-1 went away before sending it"; old.History[1].Note != want {
		t.Errorf("note = %q; want %q", old.History[1].Note, want)
	}
}

// List keeps the newest records across scan batches.
func TestListNewestFirst(t *testing.T) {
	url := serverURL(t)
	s := open(t, url, newPrefix(t, url), nil)
	ctx := t.Context()
	var ids []string
	for i := range 250 {
		r := newRecord("list" + strconv.Itoa(i))
		if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	got, err := s.List(ctx, record.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 100 {
		t.Fatalf("List returned %d records; want the default limit, 100", len(got))
	}
	for i, r := range got {
		if want := ids[len(ids)-1-i]; r.ID != want {
			t.Fatalf("List[%d] = %s; want %s, newest first", i, r.ID, want)
		}
	}
}

func mustUpdate(t *testing.T, s *redisstore.Store, id string, c record.Change) *record.Record {
	t.Helper()
	got, err := s.Update(t.Context(), id, c)
	if err != nil {
		t.Fatalf("Update(%s): %v", c.To, err)
	}
	return got
}

// The keys one script touches share a hash tag: one Redis Cluster slot.
func TestKeysShareAHashTag(t *testing.T) {
	s, err := redisstore.Open(t.Context(), "redis://127.0.0.1:1/0", redisstore.Options{Prefix: "p:"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tag := func(key string) string {
		_, after, ok := strings.Cut(key, "{")
		tag, _, ok2 := strings.Cut(after, "}")
		if !ok || !ok2 || tag == "" {
			t.Fatalf("key %q has no hash tag", key)
		}
		return tag
	}
	holder, rec, _ := redisstore.Keys(s, "some key {with braces}", "exe_1")
	_, other, _ := redisstore.Keys(s, "some key {with braces}", "exe_2")
	if tag(holder) != tag(rec) || tag(rec) != tag(other) {
		t.Errorf("keys %s %s %s do not share a hash tag", holder, rec, other)
	}
	if h2, _, _ := redisstore.Keys(s, "another key", "exe_1"); tag(h2) == tag(holder) {
		t.Errorf("two record keys share the tag %s", tag(h2))
	}
	if !strings.HasPrefix(holder, "p:") || !strings.HasPrefix(rec, "p:") {
		t.Errorf("keys %s %s do not begin with the prefix", holder, rec)
	}
	if _, err := redisstore.Open(t.Context(), "redis://127.0.0.1:1/0", redisstore.Options{Prefix: "a{b}:"}); err == nil {
		t.Error("Open accepted a prefix with braces")
	}
}

func TestSecret(t *testing.T) {
	url := serverURL(t)
	prefix := newPrefix(t, url)
	const n = 8
	secrets := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		s := open(t, url, prefix, nil) // a process each
		wg.Go(func() {
			b, err := s.Secret(t.Context())
			if err != nil {
				t.Error(err)
			}
			secrets[i] = b
		})
	}
	wg.Wait()
	for i, b := range secrets {
		if len(b) != 32 || !bytes.Equal(b, secrets[0]) {
			t.Fatalf("store %d has secret %x, store 0 %x; want the same 32 bytes", i, b, secrets[0])
		}
	}
	other := open(t, url, newPrefix(t, url), nil)
	if b, err := other.Secret(t.Context()); err != nil || bytes.Equal(b, secrets[0]) {
		t.Errorf("another prefix's secret = %x, %v; want its own", b, err)
	}
}

const (
	helperEnv   = "MCPI_REDIS_HELPER_PREFIX"
	helperCalls = 50
)

// Four processes, each reserving one key 50 times at once against one
// store: exactly one reservation wins.
func TestMultiProcessReserve(t *testing.T) {
	url := serverURL(t)
	prefix := newPrefix(t, url)
	const procs = 4
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	type child struct {
		cmd    *exec.Cmd
		stdin  io.WriteCloser
		out    *bufio.Scanner
		stderr bytes.Buffer
	}
	children := make([]*child, procs)
	for i := range children {
		c := &child{cmd: exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")}
		c.cmd.Env = append(os.Environ(), helperEnv+"="+prefix, "MCPI_REDIS_URL="+url)
		c.cmd.Stderr = &c.stderr
		var err error
		if c.stdin, err = c.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		stdout, err := c.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		c.out = bufio.NewScanner(stdout)
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		children[i] = c
	}
	// Start them together, once all are connected.
	line := func(c *child, prefix string) string {
		for c.out.Scan() {
			if v, ok := strings.CutPrefix(c.out.Text(), prefix); ok {
				return v
			}
		}
		return ""
	}
	for i, c := range children {
		if line(c, "ready") == "" && c.out.Err() != nil {
			t.Fatalf("process %d: %v", i, c.out.Err())
		}
	}
	for _, c := range children {
		_, _ = io.WriteString(c.stdin, "go\n")
		_ = c.stdin.Close()
	}
	wins := 0
	for i, c := range children {
		v := line(c, "wins=")
		for c.out.Scan() { // drain, so Wait can return
		}
		err := c.cmd.Wait()
		n, perr := strconv.Atoi(v)
		if err != nil || perr != nil {
			t.Fatalf("process %d: %v (wins=%q)\n%s", i, err, v, c.stderr.String())
		}
		wins += n
	}
	if wins != 1 {
		t.Fatalf("%d of %d reservations across %d processes won; want exactly 1", wins, procs*helperCalls, procs)
	}
}

// TestHelperProcess is one process of TestMultiProcessReserve.
func TestHelperProcess(t *testing.T) {
	prefix := os.Getenv(helperEnv)
	if prefix == "" {
		t.Skip("a helper process of TestMultiProcessReserve")
	}
	url := serverURL(t)
	s, err := redisstore.Open(t.Context(), url, redisstore.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Get(t.Context(), "exe_none"); err == nil { // connected
		t.Fatal("Get of a missing record succeeded")
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	var wins atomic.Int32
	var wg sync.WaitGroup
	for range helperCalls {
		wg.Go(func() {
			_, won, err := s.Reserve(t.Context(), newRecord("contested"), record.ReserveOptions{})
			if err != nil {
				t.Error(err)
			}
			if won {
				wins.Add(1)
			}
		})
	}
	wg.Wait()
	fmt.Printf("wins=%d\n", wins.Load())
}

func TestAllowances(t *testing.T) {
	url := serverURL(t)
	recordtest.RunAllowances(t, func(t *testing.T) (recordtest.AllowanceStore, recordtest.AllowanceStore) {
		prefix := newPrefix(t, url)
		return open(t, url, prefix, nil), open(t, url, prefix, nil)
	})
}
