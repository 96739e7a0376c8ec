package pgstore

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
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/recordtest"
	"github.com/mcp-idempotent/mcp-idempotent/internal/skipnote"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		skipnote.Report("internal/record/pgstore")
		os.Exit(code)
	}))
}

// runHint says how to run the tests that need a server.
const runHint = "MCPI_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test?sslmode=disable go test ./internal/record/pgstore"

var server struct {
	once sync.Once
	url  string
	err  error
}

// serverURL returns MCPI_POSTGRES_URL once a connection to it succeeded,
// and otherwise skips tb (fails it with MCPI_REQUIRE_SERVICES=1).
func serverURL(tb testing.TB) string {
	tb.Helper()
	server.once.Do(func() {
		u := os.Getenv("MCPI_POSTGRES_URL")
		if u == "" {
			server.err = errors.New("MCPI_POSTGRES_URL is not set")
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := connect(ctx, u)
		if err != nil {
			server.err = fmt.Errorf("PostgreSQL at MCPI_POSTGRES_URL is unreachable: %w", err)
			return
		}
		conn.Close(ctx)
		server.url = u
	})
	if server.err != nil {
		skipnote.Unavailable(tb, "PostgreSQL store", fmt.Sprintf("%v; to run these tests: %s", server.err, runHint))
	}
	return server.url
}

// connect opens a connection to the URL as Open understands it (with
// pgxpool's parameters).
func connect(ctx context.Context, rawURL string) (*pgx.Conn, error) {
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, err
	}
	return pgx.ConnectConfig(ctx, cfg.ConnConfig)
}

// newSchema returns a schema name of tb's own, dropped when tb ends.
func newSchema(tb testing.TB) string {
	tb.Helper()
	u := serverURL(tb)
	b := make([]byte, 6)
	rand.Read(b)
	schema := "mcpi_test_" + hex.EncodeToString(b)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := connect(ctx, u)
		if err != nil {
			tb.Errorf("dropping schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			tb.Errorf("dropping schema %s: %v", schema, err)
		}
	})
	return schema
}

// open returns a Store on schema, closed when tb ends.
func open(tb testing.TB, rawURL, schema string, now func() time.Time) *Store {
	tb.Helper()
	s, err := Open(context.Background(), rawURL, Options{Now: now, Schema: schema})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Error(err)
		}
	})
	return s
}

// newStore returns a Store on a schema of tb's own.
func newStore(tb testing.TB, now func() time.Time) *Store {
	tb.Helper()
	return open(tb, serverURL(tb), newSchema(tb), now)
}

func TestSemantics(t *testing.T) {
	serverURL(t)
	recordtest.Run(t, func(t *testing.T, now func() time.Time) record.Store {
		return newStore(t, now)
	})
}

func newRecord(key string, now time.Time) *record.Record {
	return &record.Record{ID: record.NewID(now), Key: key, Fingerprint: key, Actor: "alice", Scope: "session:1",
		Upstream: "stdio:server", Tool: "charge_card", Retention: time.Hour}
}

func TestUnreachableServerFailsPromptly(t *testing.T) {
	s, err := Open(context.Background(), "postgres://postgres:hunter2@127.0.0.1:1/test", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	_, _, err = s.Reserve(ctx, newRecord("k", start), record.ReserveOptions{})
	if err == nil {
		t.Fatal("Reserve against an unreachable server succeeded")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Reserve took %v to fail; want it prompt", d)
	}
	msg := err.Error()
	t.Log(msg)
	if !strings.Contains(msg, "reserving") || !strings.Contains(msg, "postgres://127.0.0.1:1/test") {
		t.Errorf("error %q does not say what failed and name the store", msg)
	}
	if strings.Contains(msg, "hunter2") {
		t.Errorf("error %q shows the password", msg)
	}
}

// silentProxy relays TCP connections to addr until silence is called;
// from then on it takes what either side sends and passes nothing on,
// like a server that stopped answering without closing a connection.
type silentProxy struct {
	ln     net.Listener
	silent atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func newSilentProxy(t *testing.T, addr string) *silentProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &silentProxy{ln: ln}
	t.Cleanup(p.cut)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go io.Copy(p.writer(u), c)
			go io.Copy(p.writer(c), u)
		}
	}()
	return p
}

func (p *silentProxy) silence() { p.silent.Store(true) }

// cut closes every connection, as a network that fails for good does.
func (p *silentProxy) cut() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

type silencing struct {
	p *silentProxy
	w io.Writer
}

func (p *silentProxy) writer(w io.Writer) io.Writer { return silencing{p, w} }

func (s silencing) Write(b []byte) (int, error) {
	if s.p.silent.Load() {
		return len(b), nil
	}
	return s.w.Write(b)
}

// TestSilentServerFailsAtTheTimeout: a server that stops answering
// without closing the connection (a network partition, a hung server)
// fails each operation after the store's timeout, instead of holding its
// caller until the connection is torn down.
func TestSilentServerFailsAtTheTimeout(t *testing.T) {
	u, err := url.Parse(serverURL(t))
	if err != nil {
		t.Fatal(err)
	}
	p := newSilentProxy(t, u.Host)
	u.Host = p.ln.Addr().String()
	s, err := Open(context.Background(), u.String(), Options{Schema: newSchema(t), Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		// pgx closes a connection whose operation timed out by asking
		// the server to cancel it, which a silent server never answers
		// (pgx waits up to 15s): the connections are cut first.
		p.cut()
		s.Close()
	}()
	ctx := t.Context()
	now := time.Now()
	r := newRecord("k", now)
	// The set-up's reservation, while the server still answers, opens the
	// store's first connection: on a loaded machine that took longer than
	// the 300 ms under test, so it may take a few tries.
	for try := 1; ; try++ {
		_, _, err := s.Reserve(ctx, r, record.ReserveOptions{})
		if err == nil {
			break
		}
		if try == 10 {
			t.Fatal(err)
		}
	}
	p.silence()
	for name, op := range map[string]func() error{
		"Reserve": func() error {
			_, _, err := s.Reserve(ctx, newRecord("k2", now), record.ReserveOptions{})
			return err
		},
		"Update": func() error { _, err := s.Update(ctx, r.ID, record.Change{To: record.Dispatched}); return err },
		"Get":    func() error { _, err := s.Get(ctx, r.ID); return err },
		"Wait":   func() error { _, err := s.Wait(ctx, r.ID); return err },
	} {
		start := time.Now()
		err := op()
		if err == nil {
			t.Errorf("%s against a silent server succeeded", name)
			continue
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("%s took %v to fail; want about the 300ms timeout", name, d)
		}
		if !strings.Contains(err.Error(), "postgres store") {
			t.Errorf("%s: error %q does not name the store", name, err)
		}
	}
}

// TestQueueIsNotAnOutage: an operation that waits longer than the
// store's timeout for one of the pool's connections, while others get
// them, is under load, not facing a server that stopped answering: it
// waits its turn instead of failing.
func TestQueueIsNotAnOutage(t *testing.T) {
	const timeout = 500 * time.Millisecond
	s, err := Open(context.Background(), serverURL(t)+"&pool_max_conns=1", Options{Schema: newSchema(t), Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	r := newRecord("k", time.Now())
	if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	// The pool's one connection goes from holder to holder, each keeping
	// it for most of a timeout; the Get queues behind both.
	first, _, err := s.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	second := make(chan error, 1)
	go func() {
		conn, _, err := s.acquire(ctx)
		if err == nil {
			time.Sleep(timeout * 4 / 5)
			conn.Release()
		}
		second <- err
	}()
	time.Sleep(timeout / 5) // the second holder queues first
	go func() {
		time.Sleep(timeout * 3 / 5)
		first.Release()
	}()
	start := time.Now()
	got, err := s.Get(ctx, r.ID)
	waited := time.Since(start)
	if err := <-second; err != nil {
		t.Fatalf("the second holder: %v", err)
	}
	if err != nil || got.ID != r.ID {
		t.Fatalf("Get behind a queue that moves = %v, %v; want the record", got, err)
	}
	if waited < timeout {
		t.Fatalf("Get waited %v, less than the %v timeout: the queue under test did not form", waited, timeout)
	}
}

func TestOpenRejectsOtherURLs(t *testing.T) {
	for _, u := range []string{"redis://127.0.0.1:6379", "sqlite:/tmp/x.db", "postgres://%zz"} {
		if s, err := Open(context.Background(), u, Options{}); err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", u)
		}
	}
}

// Stores on one new schema, used for the first time at once, all create or
// find it, and agree on one secret.
func TestConcurrentFirstUse(t *testing.T) {
	u, schema := serverURL(t), newSchema(t)
	const n = 8
	stores := make([]*Store, n)
	for i := range stores {
		stores[i] = open(t, u, schema, nil)
	}
	secrets := make([][]byte, n)
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Go(func() {
			var err error
			if secrets[i], err = s.Secret(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for i, secret := range secrets {
		if len(secret) != 32 || !bytes.Equal(secret, secrets[0]) {
			t.Fatalf("store %d has secret %x; store 0 has %x: want one 32-byte secret", i, secret, secrets[0])
		}
	}
	again, err := open(t, u, schema, nil).Secret(context.Background())
	if err != nil || !bytes.Equal(again, secrets[0]) {
		t.Fatalf("a later store reads secret %x (%v); want %x", again, err, secrets[0])
	}
}

func TestResultKeptByteForByte(t *testing.T) {
	s := newStore(t, nil)
	ctx := context.Background()
	r, _, err := s.Reserve(ctx, newRecord("k", time.Now()), record.ReserveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	result := json.RawMessage("{\"z\": 1,  \"a\" : [1.0, 1e2],\n\"u\":\"\\u00e9\"}")
	if _, err := s.Update(ctx, r.ID, record.Change{To: record.Dispatched}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, r.ID, record.Change{To: record.Completed, Result: result}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Result, result) || got.Error != nil {
		t.Fatalf("stored result %q, error %q; want %q and none", got.Result, got.Error, result)
	}
}

// A note may hold any text, NUL included, which jsonb would refuse.
func TestNoteWithNUL(t *testing.T) {
	s := newStore(t, nil)
	ctx := context.Background()
	r, _, err := s.Reserve(ctx, newRecord("k", time.Now()), record.ReserveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Update(ctx, r.ID, record.Change{To: record.Failed, Note: "upstream said \x00"})
	if err != nil {
		t.Fatal(err)
	}
	if note := got.History[1].Note; note != "upstream said \uFFFD" {
		t.Fatalf("note = %q", note)
	}
}

func TestExpiredRecordsArePurged(t *testing.T) {
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	s := newStore(t, clock.Now)
	ctx := context.Background()
	var inFlight string
	for i := range 100 {
		r, _, err := s.Reserve(ctx, newRecord(fmt.Sprint("k", i), clock.Now()), record.ReserveOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			inFlight = r.ID // never settled: never purged
			continue
		}
		if _, err := s.Update(ctx, r.ID, record.Change{To: record.Failed}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Hour - time.Second)
	if n, err := s.Purge(ctx, 1000); err != nil || n != 0 {
		t.Fatalf("Purge before the retention ran out = %d, %v; want 0", n, err)
	}
	clock.Advance(time.Second)
	for _, want := range []int{60, 39, 0} {
		if n, err := s.Purge(ctx, 60); err != nil || n != want {
			t.Fatalf("Purge(60) = %d, %v; want %d", n, err, want)
		}
	}
	if _, err := s.Get(ctx, inFlight); err != nil {
		t.Errorf("the record in flight was purged: %v", err)
	}
}

// Reserve purges on its own, a bounded batch every so often.
func TestReservePurges(t *testing.T) {
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	s := newStore(t, clock.Now)
	ctx := context.Background()
	first, _, err := s.Reserve(ctx, newRecord("first", clock.Now()), record.ReserveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, first.ID, record.Change{To: record.Failed}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Hour)
	for i := range purgeEvery {
		if _, _, err := s.Reserve(ctx, newRecord(fmt.Sprint("k", i), clock.Now()), record.ReserveOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Get(ctx, first.ID); !errors.Is(err, record.ErrNotFound) {
		t.Fatalf("an expired record is still there after %d reservations: %v", purgeEvery, err)
	}
}

// Reserve's purge looks for orphans at most every orphanScanEvery, and
// settles those it finds then.
func TestReservePacesTheOrphanScan(t *testing.T) {
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	s := newStore(t, clock.Now)
	ctx := context.Background()
	orphan := newRecord("orphan", clock.Now())
	orphan.Owner, orphan.LeaseUntil = "gone", clock.Now().Add(time.Second)
	if _, _, err := s.Reserve(ctx, orphan, record.ReserveOptions{Dispatch: true}); err != nil {
		t.Fatal(err)
	}
	reserve := func(n int) {
		t.Helper()
		for range n {
			if _, _, err := s.Reserve(ctx, newRecord(fmt.Sprint("k", s.reserves.Load()), clock.Now()), record.ReserveOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	reserve(4 * purgeEvery)
	if n := s.scans.Load(); n != 1 {
		t.Fatalf("%d reservations in one instant looked for orphans %d times; want once", 4*purgeEvery+1, n)
	}
	clock.Advance(max(orphanScanEvery, 2*time.Second)) // and past the orphan's lease
	reserve(purgeEvery)
	if n := s.scans.Load(); n != 2 {
		t.Fatalf("looked for orphans %d times; want twice, once %v passed", n, max(orphanScanEvery, 2*time.Second))
	}
	if got, err := s.Get(ctx, orphan.ID); err != nil || got.State != record.Unknown {
		t.Fatalf("the orphan after the second look: %+v, %v; want it unknown", got, err)
	}
}

// Of concurrent reservations over a replaceable holder, exactly one wins.
func TestConcurrentReplace(t *testing.T) {
	clock := recordtest.NewClock(time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC))
	s := newStore(t, clock.Now)
	ctx := context.Background()
	for _, settle := range []record.State{record.Delivered, record.Failed} {
		r, _, err := s.Reserve(ctx, newRecord("k", clock.Now()), record.ReserveOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if settle == record.Delivered {
			for _, to := range []record.State{record.Dispatched, record.Completed} {
				if _, err := s.Update(ctx, r.ID, record.Change{To: to}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, err := s.Update(ctx, r.ID, record.Change{To: settle}); err != nil {
			t.Fatal(err)
		}
		var wins atomic.Int32
		var wg sync.WaitGroup
		for range 100 {
			wg.Go(func() {
				_, won, err := s.Reserve(ctx, newRecord("k", clock.Now()), record.ReserveOptions{Replace: []record.State{record.Delivered}})
				if err != nil {
					t.Error(err)
				}
				if won {
					wins.Add(1)
				}
			})
		}
		wg.Wait()
		if n := wins.Load(); n != 1 {
			t.Fatalf("%d of 100 reservations over a %s holder won; want 1", n, settle)
		}
	}
}

// waitFor runs Wait in the background; the returned channel yields its
// result.
func waitFor(s *Store, id string) <-chan *record.Record {
	done := make(chan *record.Record, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, _ := s.Wait(ctx, id)
		done <- r
	}()
	return done
}

// waiting blocks until id has n waiters registered and the listener is up.
func waiting(t *testing.T, s *Store, id string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.waiters.mu.Lock()
		g := s.waiters.m[id]
		got := 0
		if g != nil {
			got = g.refs
		}
		s.waiters.mu.Unlock()
		if got == n && listening(s) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters on %s; want %d", got, id, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// listening reports whether the store's listener has run LISTEN.
func listening(s *Store) bool {
	var n int
	err := s.pool.QueryRow(context.Background(),
		"SELECT count(*) FROM pg_stat_activity WHERE query = $1 AND datname = current_database()", "LISTEN "+s.quoted).Scan(&n)
	return err == nil && n > 0
}

// TestWaitersDoNotPollWhileListening: while the listening connection is
// up, a waiter waits for the notification and reads nothing meanwhile:
// thousands of waiters polling would take the pool from the work they
// wait for.
//
// The listener is up before the wait begins, and the waiter's own first
// two connections, to mark the record watched and to read it, are taken
// before the count starts: on a loaded machine they fell inside the
// 1.5 s watched here.
func TestWaitersDoNotPollWhileListening(t *testing.T) {
	s := newStore(t, nil)
	ctx := context.Background()
	r := newRecord("k", time.Now())
	r.Owner, r.LeaseUntil = "proxy-1", time.Now().Add(time.Hour)
	if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	s.listen()
	for !s.heard.Load() {
		time.Sleep(time.Millisecond)
	}
	first := s.acquired.Load()
	done := waitFor(s, r.ID)
	waiting(t, s, r.ID, 1)
	for s.acquired.Load() < first+2 {
		time.Sleep(time.Millisecond)
	}
	before := s.acquired.Load()
	time.Sleep(1500 * time.Millisecond)
	if n := s.acquired.Load() - before; n != 0 {
		t.Errorf("a waiter read the record %d times in 1.5s while the listener was up; want none", n)
	}
	if _, err := s.Update(ctx, r.ID, record.Change{To: record.Failed}); err != nil {
		t.Fatal(err)
	}
	if got := <-done; got == nil || got.State != record.Failed {
		t.Fatalf("Wait = %+v; want the record failed", got)
	}
}

// Waiters in another process (another Store here) are woken by the
// notification, whatever settles the record, not by the poll.
func TestWaitIsNotified(t *testing.T) {
	u, schema := serverURL(t), newSchema(t)
	writer, waiter := open(t, u, schema, nil), open(t, u, schema, nil)
	waiter.minPoll, waiter.maxPoll = time.Hour, time.Hour
	ctx := context.Background()

	settles := map[string]func(id string) error{
		"Update": func(id string) error {
			_, err := writer.Update(ctx, id, record.Change{To: record.Completed, Result: json.RawMessage(`{}`)})
			return err
		},
		"an operator's UPDATE": func(id string) error {
			_, err := writer.pool.Exec(ctx, writer.sql(`UPDATE {schema}.records SET state = 'unknown' WHERE id = $1`), id)
			return err
		},
		"a broken listening connection": func(id string) error {
			// Settled while nobody listens: the listener reconnects and
			// its waiters look again.
			if _, err := writer.pool.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1", "LISTEN "+waiter.quoted); err != nil {
				return err
			}
			_, err := writer.Update(ctx, id, record.Change{To: record.Completed, Result: json.RawMessage(`{}`)})
			return err
		},
	}
	for name, settle := range settles {
		t.Run(name, func(t *testing.T) {
			r, _, err := writer.Reserve(ctx, newRecord(name, time.Now()), record.ReserveOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := writer.Update(ctx, r.ID, record.Change{To: record.Dispatched}); err != nil {
				t.Fatal(err)
			}
			const n = 5
			done := make([]<-chan *record.Record, n)
			for i := range done {
				done[i] = waitFor(waiter, r.ID)
			}
			waiting(t, waiter, r.ID, n)
			if err := settle(r.ID); err != nil {
				t.Fatal(err)
			}
			for _, d := range done {
				if got := <-d; got == nil || got.State.InFlight() {
					t.Fatalf("a waiter got %+v; want the settled record", got)
				}
			}
		})
	}
}

// Wait with its poll alone (no listener can help across a lapsed lease)
// returns when the lease lapses and settles the orphan.
func TestWaitEndsWithTheLease(t *testing.T) {
	s := newStore(t, nil)
	ctx := context.Background()
	r := newRecord("k", time.Now())
	r.Owner, r.LeaseUntil = "proxy-1", time.Now().Add(200*time.Millisecond)
	if _, _, err := s.Reserve(ctx, r, record.ReserveOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, r.ID, record.Change{To: record.Dispatched}); err != nil {
		t.Fatal(err)
	}
	s.minPoll, s.maxPoll = time.Hour, time.Hour
	got := <-waitFor(s, r.ID)
	if got == nil || got.State != record.Unknown || len(got.History) != 3 || !strings.Contains(got.History[2].Note, "proxy-1") {
		t.Fatalf("Wait over a lapsing lease = %+v; want it settled unknown", got)
	}
}

// The reservation holds across processes: helper processes each reserve
// one key concurrently, and exactly one reservation wins in all.
func TestMultiProcessReserve(t *testing.T) {
	schema := newSchema(t)
	const procs, perProc = 4, 50
	var wg sync.WaitGroup
	outs := make([][]byte, procs)
	for i := range procs {
		wg.Go(func() {
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), "MCPI_PGSTORE_HELPER_SCHEMA="+schema, fmt.Sprint("MCPI_PGSTORE_HELPER_N=", perProc))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Errorf("helper process %d: %v\n%s", i, err, out)
			}
			outs[i] = out
		})
	}
	wg.Wait()
	wins, ids, results := 0, map[string]bool{}, 0
	for _, out := range outs {
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			var won bool
			var id string
			if _, err := fmt.Sscanf(sc.Text(), "reserved %t %s", &won, &id); err != nil {
				continue
			}
			results++
			ids[id] = true
			if won {
				wins++
			}
		}
	}
	if results != procs*perProc {
		t.Fatalf("%d reservations reported; want %d", results, procs*perProc)
	}
	if wins != 1 || len(ids) != 1 {
		t.Fatalf("%d of %d reservations in %d processes won, sharing %d executions; want 1 winner and 1 execution", wins, results, procs, len(ids))
	}
}

// TestHelperProcess is a process of TestMultiProcessReserve.
func TestHelperProcess(t *testing.T) {
	schema := os.Getenv("MCPI_PGSTORE_HELPER_SCHEMA")
	if schema == "" {
		t.Skip("a helper process of TestMultiProcessReserve")
	}
	var n int
	fmt.Sscan(os.Getenv("MCPI_PGSTORE_HELPER_N"), &n)
	s := open(t, serverURL(t), schema, nil)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			r, won, err := s.Reserve(context.Background(), newRecord("multi-process", time.Now()), record.ReserveOptions{})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			fmt.Printf("reserved %t %s\n", won, r.ID)
		})
	}
	wg.Wait()
}

func BenchmarkReserveComplete(b *testing.B) {
	s := newStore(b, nil)
	ctx := context.Background()
	for i := 0; b.Loop(); i++ {
		execute(b, ctx, s, fmt.Sprint("k", i))
	}
}

func BenchmarkReserveCompleteParallel(b *testing.B) {
	s := newStore(b, nil)
	ctx := context.Background()
	var n atomic.Int64
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			execute(b, ctx, s, fmt.Sprint("k", n.Add(1)))
		}
	})
}

// execute runs one new execution through its life, as the other stores'
// benchmarks do. It may run on a goroutine of RunParallel, so it reports
// errors without FailNow.
func execute(b *testing.B, ctx context.Context, s *Store, key string) {
	if _, err := recordtest.Execute(ctx, s, key); err != nil {
		b.Error(err)
	}
}

// TestReplaysWriteNothing: a replay only reads, so its commit waits for
// no WAL flush: every write of a row makes a new version of it, with a
// new xmin, and five replays make none.
func TestReplaysWriteNothing(t *testing.T) {
	s := newStore(t, nil)
	ctx := t.Context()
	r, err := recordtest.Execute(ctx, s, "k")
	if err != nil {
		t.Fatal(err)
	}
	xmin := func() (x string) {
		t.Helper()
		if err := s.pool.QueryRow(ctx, s.sql(`SELECT xmin::text FROM {schema}.records WHERE id = $1`), r.ID).Scan(&x); err != nil {
			t.Fatal(err)
		}
		return x
	}
	before := xmin()
	for range 5 {
		if _, won, err := s.Reserve(ctx, newRecord("k", time.Now()), record.ReserveOptions{}); err != nil || won {
			t.Fatalf("replay: won=%v err=%v", won, err)
		}
	}
	if after := xmin(); after != before {
		t.Errorf("five replays rewrote the record (xmin %s, then %s); want it only read", before, after)
	}
}

func TestAttachCounts(t *testing.T) {
	recordtest.RunAttachCounts(t, func(t *testing.T) (record.Store, record.Store, func(string) int) {
		u, schema := serverURL(t), newSchema(t)
		s := open(t, u, schema, nil)
		return s, open(t, u, schema, nil), func(id string) (n int) {
			if err := s.pool.QueryRow(context.Background(), s.sql(`SELECT attached FROM {schema}.records WHERE id = $1`), id).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
	})
}

// Two Stores on one schema are two processes: one waits for the decision
// the other makes.
func TestDecisions(t *testing.T) {
	recordtest.RunDecisions(t, func(t *testing.T) (record.Store, record.Store) {
		u, schema := serverURL(t), newSchema(t)
		return open(t, u, schema, nil), open(t, u, schema, nil)
	})
}

func BenchmarkReplay(b *testing.B) {
	s := newStore(b, nil)
	ctx := context.Background()
	r, _, err := s.Reserve(ctx, newRecord("k", time.Now()), record.ReserveOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []record.Change{{To: record.Dispatched}, {To: record.Completed, Result: json.RawMessage(`{"content":[]}`)}} {
		if _, err := s.Update(ctx, r.ID, c); err != nil {
			b.Fatal(err)
		}
	}
	lsn := func() (n int64) {
		b.Helper()
		if err := s.pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}
	before, n := lsn(), 0
	for b.Loop() {
		got, won, err := s.Reserve(ctx, newRecord("k", time.Now()), record.ReserveOptions{})
		if err != nil || won || got.ID != r.ID {
			b.Fatalf("Reserve of a completed key = %v won=%v: %v", got, won, err)
		}
		n++
	}
	// The WAL the server wrote meanwhile, any other client's included:
	// run it on a quiet server. A replay that writes none commits
	// without waiting for a WAL flush.
	b.ReportMetric(float64(lsn()-before)/float64(n), "wal-B/op")
}

func TestAllowances(t *testing.T) {
	recordtest.RunAllowances(t, func(t *testing.T) (recordtest.AllowanceStore, recordtest.AllowanceStore) {
		u, schema := serverURL(t), newSchema(t)
		return open(t, u, schema, nil), open(t, u, schema, nil)
	})
}

func TestPGDuration(t *testing.T) {
	for v, want := range map[string]time.Duration{
		"5000": 5 * time.Second, "5s": 5 * time.Second, "1.5min": 90 * time.Second,
		"250ms": 250 * time.Millisecond, "2 h": 2 * time.Hour, "0": 0,
	} {
		if got, ok := pgDuration(v); !ok || got != want {
			t.Errorf("pgDuration(%q) = %v, %v; want %v", v, got, ok, want)
		}
	}
	for _, v := range []string{"", "soon", "5 fortnights"} {
		if _, ok := pgDuration(v); ok {
			t.Errorf("pgDuration(%q) read a duration", v)
		}
	}
}

// TestTimeoutFollowsTheURL: a URL that gives statement_timeout gives the
// client's timeout too, a second longer, so that the client does not give
// up on a statement the server still runs.
func TestTimeoutFollowsTheURL(t *testing.T) {
	s, err := Open(context.Background(), "postgres://u@127.0.0.1:1/db?statement_timeout=30s", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.timeout != 31*time.Second {
		t.Errorf("timeout %v; want 31s", s.timeout)
	}
}
