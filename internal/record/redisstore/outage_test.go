package redisstore_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	neturl "net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/redisstore"
)

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

// TestConnectionSetupErrorIsNamed: a server that refuses to set up the
// connection (here a database number it does not have; a wrong password
// alike) fails the calls with its own reason, not with the empty replies
// of commands never sent ("holds 0 bytes", "unexpected type=<nil>").
func TestConnectionSetupErrorIsNamed(t *testing.T) {
	u, err := neturl.Parse(serverURL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/9999"
	s := open(t, u.String(), newPrefix(t, serverURL(t)), nil)
	ctx := t.Context()
	r := newRecord("k")
	calls := map[string]func() error{
		"Secret":  func() error { _, err := s.Secret(ctx); return err },
		"Reserve": func() error { _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); return err },
		"Update":  func() error { _, err := s.Update(ctx, r.ID, record.Change{To: record.Dispatched}); return err },
	}
	for op, call := range calls {
		err := call()
		if err == nil || !strings.Contains(err.Error(), "DB index is out of range") {
			t.Errorf("%s on database 9999 = %v; want the server's reason", op, err)
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

// TestBadClientNameIsRefused: a client_name= the server will not take
// (CLIENT SETNAME, sent on each new connection) fails every connection,
// however long the proxy waits: it is a refusal, as a wrong password is.
func TestBadClientNameIsRefused(t *testing.T) {
	url := serverURL(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	s := open(t, url+sep+"client_name=two%20words", newPrefix(t, url), nil)
	if err := s.Check(t.Context()); !errors.Is(err, record.ErrStoreRefused) {
		t.Errorf("Check with client_name=two words: %v; want a refusal", err)
	}
}

// TestTLSURLToPlainServerIsRefused: rediss:// naming a server that
// serves no TLS is a refusal that says so, not a store that cannot be
// reached yet: the handshake would wait out its timeout on every try, for
// as long as the proxy runs.
func TestTLSURLToPlainServerIsRefused(t *testing.T) {
	url := serverURL(t)
	if !strings.HasPrefix(url, "redis://") {
		t.Skipf("MCPI_REDIS_URL %s is not redis://", url)
	}
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	// Short timeouts: the handshake waits them out.
	tlsURL := "rediss://" + strings.TrimPrefix(url, "redis://") + sep + "dial_timeout=300ms&read_timeout=300ms"
	s := open(t, tlsURL, newPrefix(t, url), nil)
	if _, err := s.Secret(t.Context()); !errors.Is(err, record.ErrStoreRefused) || !strings.Contains(err.Error(), "answers without TLS") {
		t.Errorf("Secret with %s: %v; want a refusal saying the server answers without TLS", tlsURL, err)
	}
	if err := s.Check(t.Context()); !errors.Is(err, record.ErrStoreRefused) || !strings.Contains(err.Error(), "give redis://") {
		t.Errorf("Check with %s: %v; want a refusal naming redis://", tlsURL, err)
	}
}
