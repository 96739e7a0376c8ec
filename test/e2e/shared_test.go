package e2e

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-idempotent/mcp-idempotent/internal/servicetest"
	"github.com/mcp-idempotent/mcp-idempotent/internal/skipnote"
)

// sharedStores returns the store URLs the shared-store tests run on: SQLite
// always, Redis and PostgreSQL when their servers are given (MCPI_REDIS_URL,
// MCPI_POSTGRES_URL; required under MCPI_REQUIRE_SERVICES=1).
func sharedStores(t *testing.T) map[string]string {
	t.Helper()
	stores := map[string]string{"sqlite": "sqlite:" + filepath.Join(t.TempDir(), "records.db")}
	if u := serviceURL(t, "MCPI_REDIS_URL", "redis://127.0.0.1:6379/0"); u != "" {
		// A prefix of this test's own keeps its records apart from any
		// other run on the same server.
		prefix := "mcpi-e2e-" + strings.ToLower(t.Name()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
		stores["redis"] = withQuery(u, "prefix", prefix)
		t.Cleanup(func() { servicetest.DropKeys(t, u, prefix) })
	}
	if u := serviceURL(t, "MCPI_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"); u != "" {
		schema := "mcpi_e2e_" + strconv.FormatInt(time.Now().UnixNano(), 36)
		stores["postgres"] = withQuery(u, "schema", schema)
		t.Cleanup(func() { servicetest.DropSchema(t, u, schema) })
	}
	return stores
}

// TestManyProxiesOneStore: four proxy processes share one store; 200
// identical calls spread across them run the tool once.
func TestManyProxiesOneStore(t *testing.T) {
	if direct {
		t.Skip("needs the proxy")
	}
	for name, store := range sharedStores(t) {
		t.Run(name, func(t *testing.T) { runOnce(t, name, store, 4, 200) })
	}
}

// TestTwoProxiesOneRedisCluster: two proxy processes share a Redis
// Cluster of three masters; identical calls spread across them run the
// tool once.
func TestTwoProxiesOneRedisCluster(t *testing.T) {
	if direct {
		t.Skip("needs the proxy")
	}
	c := servicetest.StartRedisCluster(t, 3, 0)
	runOnce(t, "Redis Cluster", c.URL(), 2, 50)
}

// runOnce makes calls identical calls, spread across proxies proxy
// processes on store, and checks that the tool ran once and that every
// caller got its one answer.
func runOnce(t *testing.T, name, store string, proxies, calls int) {
	ctx := testContext(t)
	peers := make([]*peer, proxies)
	for i := range peers {
		flags := []string{"--store", store, "--scope", "actor", "--actor", "alice"}
		peers[i] = connect(t, ctx, proxiedWith(t, flags, chargeServer("-delay", "300ms")...))
	}
	answers := make([]string, calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			res, err := peers[i%proxies].CallTool(ctx, &mcp.CallToolParams{Name: "charge_card", Arguments: chargeArgs("4242", 100)})
			if err != nil {
				t.Errorf("call %d: %v", i, err)
				return
			}
			answers[i] = firstText(res)
		})
	}
	wg.Wait()
	total := 0
	for _, p := range peers {
		total += executions(t, ctx, p)
	}
	if total != 1 {
		t.Fatalf("%d calls across %d proxies on one %s store ran charge_card %d times; want 1", calls, proxies, name, total)
	}
	for i, a := range answers {
		if a != answers[0] {
			t.Fatalf("call %d got %q, call 0 got %q; every caller gets the one answer", i, a, answers[0])
		}
	}
}

// TestKilledProxyAfterDispatch: a proxy is killed with a call in flight.
// Once its lease lapses, a new proxy on the same store answers the retry
// as outcome unknown, never sends it again, and the record tells the story.
func TestKilledProxyAfterDispatch(t *testing.T) {
	if direct {
		t.Skip("needs the proxy")
	}
	dir := t.TempDir()
	store := "sqlite:" + filepath.Join(dir, "records.db")
	flags := []string{"--store", store, "--scope", "actor", "--actor", "alice", "--lease", "1s"}
	ctx := testContext(t)

	doomed := connect(t, ctx, proxiedWith(t, flags, chargeServer("-delay", "3s")...))
	go doomed.CallTool(ctx, &mcp.CallToolParams{Name: "charge_card", Arguments: chargeArgs("4242", 100)})
	if err := doomed.stderr.waitFor(ctx, "charge_card card=4242"); err != nil {
		t.Fatalf("the first server never received the call: %v", err)
	}
	// kill -9 the proxy: no answer, no last write to the store.
	if err := doomed.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The retry comes at once: it attaches to the dispatched execution and
	// is answered when the dead owner's lease lapses.
	// The same upstream command line: it is part of the fingerprint.
	p := connect(t, ctx, proxiedWith(t, flags, chargeServer("-delay", "3s")...))
	res, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "charge_card", Arguments: chargeArgs("4242", 100)})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.HasPrefix(firstText(res), "Outcome unknown:") {
		t.Fatalf("the retry after the killed proxy got %q; want outcome unknown", firstText(res))
	}
	if n := executions(t, ctx, p); n != 0 {
		t.Fatalf("the new proxy's server ran charge_card %d times; an unknown outcome is never re-sent", n)
	}
	id := executionID(res)
	out, stderr, code := runProxy(t, ctx, "activity", "show", id, "--store", store)
	if code != 0 || !strings.Contains(out, "dispatched") || !strings.Contains(out, "went away after recording its dispatch") {
		t.Fatalf("activity show exited %d:\n%s%s\nwant the dispatch and the takeover", code, out, stderr)
	}
}

// serviceURL returns the server URL in env, or "" after saying how to run
// the tests that need it; under MCPI_REQUIRE_SERVICES=1 a missing one fails
// the test.
func serviceURL(t *testing.T, env, example string) string {
	t.Helper()
	if u := os.Getenv(env); u != "" {
		return u
	}
	if os.Getenv("MCPI_REQUIRE_SERVICES") == "1" {
		t.Fatalf("%s is not set and MCPI_REQUIRE_SERVICES=1", env)
	}
	t.Logf("%s is not set: the tests on that store are skipped (run them with %s=%s)", env, env, example)
	skipnote.Note("shared-store", fmt.Sprintf("%s is not set (run them with %s=%s)", env, env, example))
	return ""
}

func withQuery(raw, name, value string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	q := u.Query()
	q.Set(name, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// privateRedis starts a redis-server of the test's own on a free port, so
// that the test can stop and restart it without touching anyone else's.
func privateRedis(t *testing.T, port int) (stop func()) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		skipnote.Unavailable(t, "Redis restart", "redis-server is not installed: this test starts and stops a Redis of its own")
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	for {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("redis-server on port %d did not start: %v", port, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cmd.Process.Kill()
			cmd.Wait()
		}
	}
	t.Cleanup(stop)
	return stop
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestStoreDownFailsClosed: with the store gone, side effects are refused
// at once with an error naming the store, reads still pass, and when the
// store is back the proxy works again without a restart.
func TestStoreDownFailsClosed(t *testing.T) {
	if direct {
		t.Skip("needs the proxy")
	}
	port := freePort(t)
	stop := privateRedis(t, port)
	ctx := testContext(t)
	store := "redis://127.0.0.1:" + strconv.Itoa(port) + "/0"
	p := connect(t, ctx, proxiedWith(t, []string{"--store", store}, chargeServer()...))
	charge(t, ctx, p, "4242", 1)

	stop()
	start := time.Now()
	_, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "charge_card", Arguments: chargeArgs("4242", 2)})
	if err == nil || !strings.Contains(err.Error(), "store is unavailable") || !strings.Contains(err.Error(), "was not executed") {
		t.Fatalf("a side effect with the store down got %v; want a JSON-RPC error saying the store is unavailable", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the refusal took %v; a store that is down must fail at once", took)
	}
	if n := executions(t, ctx, p); n != 1 {
		t.Fatalf("with the store down, the read-only count answered %d; want 1 (reads pass, the refused call never ran)", n)
	}

	privateRedis(t, port) // the store is back
	res := charge(t, ctx, p, "4242", 3)
	if !strings.Contains(firstText(res), "charge #2") {
		t.Fatalf("after the store came back the call got %q; want it to run", firstText(res))
	}
}

// TestStoreDownAtStart: a proxy whose store cannot be reached as it
// starts, and so cannot read the fingerprint secret the store keeps,
// serves what needs no fingerprint (a read-only tool), refuses side
// effects, and runs them once the store is up.
func TestStoreDownAtStart(t *testing.T) {
	if direct {
		t.Skip("needs the proxy")
	}
	port := freePort(t)
	ctx := testContext(t)
	cmd := proxiedWith(t, []string{"--store", "redis://127.0.0.1:" + strconv.Itoa(port) + "/0"}, chargeServer()...)
	cmd.Env = slices.DeleteFunc(cmd.Env, func(kv string) bool { return strings.HasPrefix(kv, "MCP_IDEMPOTENT_SECRET=") })
	p := connect(t, ctx, cmd)
	if n := executions(t, ctx, p); n != 0 {
		t.Fatalf("the read-only count answered %d; want 0", n)
	}
	_, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "charge_card", Arguments: chargeArgs("4242", 1)})
	if err == nil || !strings.Contains(err.Error(), "store is unavailable") || !strings.Contains(err.Error(), "was not executed") {
		t.Fatalf("a side effect before the store is up got %v; want a JSON-RPC error saying the store is unavailable", err)
	}

	privateRedis(t, port)
	for {
		res, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "charge_card", Arguments: chargeArgs("4242", 2)})
		if err == nil {
			if !strings.Contains(firstText(res), "charge #1") {
				t.Fatalf("once the store was up the call got %q; want the first charge", firstText(res))
			}
			break
		}
		if !strings.Contains(err.Error(), "store is unavailable") {
			t.Fatalf("waiting for the store: %v", err)
		}
		select {
		case <-ctx.Done():
			t.Fatal("side effects still refused after the store came up")
		case <-time.After(200 * time.Millisecond):
		}
	}
	if n := executions(t, ctx, p); n != 1 {
		t.Fatalf("the read-only count answered %d; want 1 (the refused call never ran)", n)
	}
}

// TestActorsNeverShare: two proxies for two actors on one store, with the
// actor scope, never share an execution; two for the same actor do.
func TestActorsNeverShare(t *testing.T) {
	if direct {
		t.Skip("needs the proxy")
	}
	store := "sqlite:" + filepath.Join(t.TempDir(), "records.db")
	ctx := testContext(t)
	total := 0
	for _, actor := range []string{"alice", "bob", "alice"} {
		p := connect(t, ctx, proxiedWith(t, []string{"--store", store, "--scope", "actor", "--actor", actor}, chargeServer()...))
		charge(t, ctx, p, "4242", 100)
		total += executions(t, ctx, p)
	}
	if total != 2 {
		t.Fatalf("alice, bob, alice made the same call: it ran %d times; want 2 (once per actor)", total)
	}
}

// TestDirectoriesNeverShare: the same command line run in two working
// directories is two servers ("node index.js" in two projects): proxies
// for them on one store never share an execution; two in one directory do.
func TestDirectoriesNeverShare(t *testing.T) {
	if direct {
		t.Skip("needs the proxy")
	}
	shop, bank := t.TempDir(), t.TempDir()
	if ran := chargeFrom(t, shop, bank, shop); ran != 2 {
		t.Fatalf("the same call from two directories, then the first again: it ran %d times; want 2 (once per directory)", ran)
	}
}

// TestDirectorySpellingsShare: one directory reached through a symbolic
// link is the same directory: a call made from there attaches to the
// execution made from its real path.
func TestDirectorySpellingsShare(t *testing.T) {
	if direct {
		t.Skip("needs the proxy")
	}
	shop := t.TempDir()
	link := filepath.Join(t.TempDir(), "shop-link")
	if err := os.Symlink(shop, link); err != nil {
		t.Skip("no symbolic links here:", err)
	}
	if ran := chargeFrom(t, shop, link); ran != 1 {
		t.Fatalf("the same call from a directory and through a link to it: it ran %d times; want once", ran)
	}
}

// chargeFrom makes one charge through a proxy started in each of dirs, as
// a shell there would start it (its PWD set, which os.Getwd reports, link
// and all), all on one store under one actor, and returns how many times
// the charge ran.
func chargeFrom(t *testing.T, dirs ...string) int {
	t.Helper()
	store := "sqlite:" + filepath.Join(t.TempDir(), "records.db")
	ctx := testContext(t)
	ran := 0
	for _, dir := range dirs {
		cmd := proxiedWith(t, []string{"--store", store, "--scope", "actor", "--actor", "alice"}, chargeServer()...)
		cmd.Dir = dir
		cmd.Env = append(cmd.Env, "PWD="+dir)
		p := connect(t, ctx, cmd)
		charge(t, ctx, p, "4242", 100)
		ran += executions(t, ctx, p)
	}
	return ran
}
