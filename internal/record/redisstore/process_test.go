package redisstore_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/redisstore"
	"github.com/mcp-idempotent/mcp-idempotent/internal/servicetest"
)

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

// TestSecretWrittenAgainAfterDataLoss: a Redis that loses its data loses
// the secret. A process that holds it writes it again with its lease
// renewals, so that a process started since signs as it does; and one
// that finds another secret there, made before it looked, says so, once.
func TestSecretWrittenAgainAfterDataLoss(t *testing.T) {
	url := serverURL(t)
	prefix := newPrefix(t, url)
	ctx := t.Context()
	clock := recordtest.NewClock(time.Now())
	var mu sync.Mutex
	var logs bytes.Buffer
	s := openWith(t, url, redisstore.Options{Now: clock.Now, Prefix: prefix,
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))})
	secret, err := s.Secret(ctx)
	if err != nil {
		t.Fatal(err)
	}
	deleteKeys(t, url, prefix)
	if err := s.Renew(ctx, "proxy-a", clock.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if b, err := open(t, url, prefix, nil).Secret(ctx); err != nil || !bytes.Equal(b, secret) {
		t.Fatalf("a process started after the loss has secret %x, %v; want the older process's %x", b, err, secret)
	}
	mu.Lock()
	said := logs.String()
	mu.Unlock()
	if !strings.Contains(said, "wrote its own again") {
		t.Errorf("the store did not say it wrote the secret again; its log:\n%s", said)
	}

	deleteKeys(t, url, prefix)
	if b, err := open(t, url, prefix, nil).Secret(ctx); err != nil || bytes.Equal(b, secret) {
		t.Fatalf("a process started before the check has secret %x, %v; want a new one", b, err)
	}
	for range 2 {
		clock.Advance(time.Minute)
		if err := s.Renew(ctx, "proxy-a", clock.Now().Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logs.String(), "holds another fingerprint secret"); n != 1 {
		t.Errorf("the store said %d times that it holds another secret; want once. Its log:\n%s", n, logs.String())
	}
}

// TestSecretReadFromAFullServer: a Redis at its maxmemory with
// noeviction refuses every write, SETNX of a key it holds too. A proxy
// that starts then reads the secret all the same, so that what only
// reads (a replay) is answered; only new reservations fail.
func TestSecretReadFromAFullServer(t *testing.T) {
	srv := startServer(t, "--maxmemory-policy", "noeviction")
	url := "redis://127.0.0.1:" + srv.port + "/0"
	ctx := t.Context()
	secret, err := open(t, url, "mcpi:", nil).Secret(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.client(t).ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := srv.client(t).Set(ctx, "other", "x", 0).Err(); err == nil || !strings.HasPrefix(err.Error(), "OOM") {
		t.Fatalf("a write to the full server: %v; want OOM", err)
	}
	if b, err := open(t, url, "mcpi:", nil).Secret(ctx); err != nil || !bytes.Equal(b, secret) {
		t.Fatalf("a process started on the full server has secret %x, %v; want %x", b, err, secret)
	}
}

// TestUserThatMayNotPublishIsRefused: every transition's script
// publishes on the store's channel, after its write. A user the ACL
// keeps from the channel (Redis 7 gives new users none, with its
// default acl-pubsub-default resetchannels) would have each call run
// and then fail to record its outcome, so the start refuses it, naming
// the channel; with MCP_IDEMPOTENT_SECRET set too (Check). So it does a
// user that may not run the scripts, whose every call would fail.
func TestUserThatMayNotPublishIsRefused(t *testing.T) {
	srv := startServer(t)
	ctx := t.Context()
	for user, rules := range map[string][]any{"app": {"~*", "+@all"}, "chan": {"~*", "&mcpi:settled", "+@all"},
		"noscript": {"~*", "&*", "+@all", "-eval", "-evalsha", "-fcall", "-function"}} {
		args := append([]any{"acl", "setuser", user, "on", ">pw"}, rules...)
		if err := srv.client(t).Do(ctx, args...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	url := "redis://app:pw@127.0.0.1:" + srv.port + "/0"
	_, err := open(t, url, "mcpi:", nil).Secret(ctx)
	if !errors.Is(err, record.ErrStoreRefused) || !strings.Contains(err.Error(), "mcpi:settled") {
		t.Errorf("Secret for a user that may not publish: %v; want a refusal naming the channel", err)
	}
	if err := open(t, url, "mcpi:", nil).Check(ctx); !errors.Is(err, record.ErrStoreRefused) {
		t.Errorf("Check for a user that may not publish: %v; want a refusal", err)
	}
	url = "redis://noscript:pw@127.0.0.1:" + srv.port + "/0"
	if _, err := open(t, url, "mcpi:", nil).Secret(ctx); !errors.Is(err, record.ErrStoreRefused) || !strings.Contains(err.Error(), "scripts") {
		t.Errorf("Secret for a user that may not run scripts: %v; want a refusal naming them", err)
	}
	url = "redis://chan:pw@127.0.0.1:" + srv.port + "/0"
	if _, err := open(t, url, "mcpi:", nil).Secret(ctx); err != nil {
		t.Errorf("Secret for a user that may publish on the channel: %v", err)
	}
}

// TestEvictionUncheckedWarned: a user the ACL keeps from INFO cannot
// tell whether the server evicts keys; the store says so when it opens,
// rather than nothing, as it says nothing of one that does not evict.
func TestEvictionUncheckedWarned(t *testing.T) {
	srv := startServer(t, "--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru")
	if err := srv.client(t).Do(t.Context(), "acl", "setuser", "noinfo", "on", ">pw", "~*", "&*", "+@all", "-info").Err(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, nil))
	openWith(t, "redis://noinfo:pw@127.0.0.1:"+srv.port+"/0", redisstore.Options{Logger: log})
	mu.Lock()
	got := buf.String()
	mu.Unlock()
	if !strings.Contains(got, "level=WARN") || !strings.Contains(got, "maxmemory-policy") {
		t.Errorf("opening a store whose user may not run INFO logged %q; want a warning that eviction is unchecked", got)
	}
}

// TestSubscribeRefusedWarned: a user the ACL keeps from SUBSCRIBE still
// records its calls, but its waiters learn of other processes' outcomes
// by their poll alone: the store says so, once.
func TestSubscribeRefusedWarned(t *testing.T) {
	srv := startServer(t)
	if err := srv.client(t).Do(t.Context(), "acl", "setuser", "nosub", "on", ">pw", "~*", "&*", "+@all", "-subscribe").Err(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, nil))
	openWith(t, "redis://nosub:pw@127.0.0.1:"+srv.port+"/0", redisstore.Options{Logger: log})
	servicetest.Eventually(t, "a warning that the user may not subscribe", func() error {
		mu.Lock()
		defer mu.Unlock()
		if got := buf.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, "may not subscribe") {
			return fmt.Errorf("logged %q", got)
		}
		return nil
	})
}

// TestACLRefusalNamesWhatIsMissing: a user kept from the publish command,
// not its channel, or from the store's keys, is refused naming that, not
// a channel or a command it has already.
func TestACLRefusalNamesWhatIsMissing(t *testing.T) {
	srv := startServer(t)
	ctx := t.Context()
	cases := []struct {
		user  string
		rules []any
		want  string
	}{
		{"nopublish", []any{"~*", "&*", "+@all", "-publish"}, "publish command"},
		{"otherkeys", []any{"~other:*", "&*", "+@all"}, "~mcpi:*"},
		{"noscriptkeys", []any{"%W~*", "%R~mcpi:secret", "&*", "+@all"}, "~mcpi:*"},
	}
	for _, c := range cases {
		args := append([]any{"acl", "setuser", c.user, "on", ">pw"}, c.rules...)
		if err := srv.client(t).Do(ctx, args...).Err(); err != nil {
			t.Fatal(err)
		}
		url := "redis://" + c.user + ":pw@127.0.0.1:" + srv.port + "/0"
		_, err := open(t, url, "mcpi:", nil).Secret(ctx)
		if !errors.Is(err, record.ErrStoreRefused) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "&mcpi:settled") {
			t.Errorf("Secret for user %s: %v; want a refusal naming %s", c.user, err, c.want)
		}
	}
}

// TestEvictionWarnedAtOpen: a server that evicts keys when full may
// evict a record, and its call then runs again: the store says so when
// it opens. One that does not evict, or has no maxmemory, says nothing.
func TestEvictionWarnedAtOpen(t *testing.T) {
	for policy, warns := range map[string]bool{"volatile-lru": true, "allkeys-lru": true, "noeviction": false} {
		srv := startServer(t, "--maxmemory", "100mb", "--maxmemory-policy", policy)
		var mu sync.Mutex
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, nil))
		openWith(t, "redis://127.0.0.1:"+srv.port+"/0", redisstore.Options{Logger: log})
		mu.Lock()
		got := buf.String()
		mu.Unlock()
		if said := strings.Contains(got, "evicts keys") && strings.Contains(got, "maxmemory_policy="+policy); said != warns {
			t.Errorf("opening a store on a server with maxmemory-policy %s logged %q; want a warning: %v", policy, got, warns)
		}
	}
}
