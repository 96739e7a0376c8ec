package e2e

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestServeTwoSessionsTwoUpstreams: each session a client initialises
// gets its own upstream process, so two sessions never share a ledger or
// an execution.
func TestServeTwoSessionsTwoUpstreams(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s := serveCharge(t, []string{"--log-level", "debug"})
	a := connectHTTP(t, ctx, s, s.url, "2025-11-25", nil, nil)
	b := connectHTTP(t, ctx, s, s.url, "2025-11-25", nil, nil)
	if a.ID() == "" || a.ID() == b.ID() {
		t.Fatalf("session ids %q and %q: want two distinct Mcp-Session-Ids", a.ID(), b.ID())
	}
	for name, p := range map[string]*peer{"a": a, "b": b} {
		res := charge(t, ctx, p, "4242", 100)
		// A shared upstream would count the second session's charge as #2.
		if got, want := firstText(res), "charged 100 to card 4242 (charge #1)"; got != want {
			t.Errorf("session %s: text = %q, want %q", name, got, want)
		}
		if replayed(res) {
			t.Errorf("session %s: a first call is marked replayed; _meta = %s", name, metaJSON(res))
		}
		if n := executions(t, ctx, p); n != 1 {
			t.Errorf("session %s: its upstream counts %d charges, want 1", name, n)
		}
	}
	pids := map[string]bool{}
	for _, m := range upstreamPID.FindAllStringSubmatch(s.stderr.String(), -1) {
		pids[m[1]] = true
	}
	if len(pids) != 2 {
		t.Errorf("serve started upstreams with pids %v; want two", pids)
	}
}

// TestServeStatelessClientsShareALane: 2026-07-28 clients of one actor
// share serve's stateless lane and its upstream, and each numbers its
// requests from 1. Two calls under way at once with the same JSON-RPC id
// must each get their own answer, under their own id.
func TestServeStatelessClientsShareALane(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s := serveCharge(t, []string{"--log-level", "debug"}, "-gate")
	a := connectHTTP(t, ctx, s, s.url, "", nil, nil)
	b := connectHTTP(t, ctx, s, s.url, "", nil, nil)
	open := gateOf(t, ctx, s)

	type result struct {
		res *mcp.CallToolResult
		err error
	}
	calls := map[string]chan result{}
	for card, p := range map[string]*peer{"1111": a, "2222": b} {
		calls[card] = make(chan result, 1)
		go func() {
			res, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "charge_card", Arguments: chargeArgs(card, 100)})
			calls[card] <- result{res, err}
		}()
	}
	for card := range calls {
		if err := s.stderr.waitFor(ctx, "charge_card card="+card+" n=1: waiting for SIGUSR1"); err != nil {
			t.Fatal(err)
		}
	}
	// A call under way holds up no other request of the lane.
	if n := executions(t, ctx, b); n != 2 {
		t.Errorf("while both calls were under way, charges = %d, want 2", n)
	}
	open()
	for card, c := range calls {
		r := <-c
		if r.err != nil {
			t.Errorf("card %s: %v", card, r.err)
			continue
		}
		if got, want := firstText(r.res), "charged 100 to card "+card+" (charge #1)"; got != want {
			t.Errorf("card %s: the answer is %q, want %q", card, got, want)
		}
	}
	// The two clients' requests carried the same ids.
	idsA := regexp.MustCompile(`"id":(\d+),"method":"tools/call"`).FindAllStringSubmatch(a.frames.String(), -1)
	idsB := regexp.MustCompile(`"id":(\d+),"method":"tools/call"`).FindAllStringSubmatch(b.frames.String(), -1)
	if len(idsA) == 0 || len(idsB) == 0 || idsA[0][1] != idsB[0][1] {
		t.Errorf("the two calls' ids were %v and %v: the test did not make them collide", idsA, idsB)
	}
	if n := executions(t, ctx, a); n != 2 {
		t.Errorf("the shared upstream counts %d charges, want 2", n)
	}
}

// TestServeProgressReachesItsCaller: two clients, each calling with the
// same progress token (each client picks its own tokens, and they
// collide), must each be told of their own call's progress only. In
// 2025-11-25 each has its own session; in 2026-07-28 they share serve's
// stateless lane and its upstream.
func TestServeProgressReachesItsCaller(t *testing.T) {
	t.Parallel()
	for _, version := range []string{"2025-11-25", ""} {
		name := version
		if name == "" {
			name = "2026-07-28"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			s := serveCharge(t, []string{"--log-level", "debug"}, "-gate")
			type client struct {
				p        *peer
				progress chan string
				done     chan error
			}
			clients := map[string]*client{}
			for _, card := range []string{"1111", "2222"} {
				c := &client{progress: make(chan string, 8), done: make(chan error, 1)}
				c.p = connectHTTP(t, ctx, s, s.url, version, &mcp.ClientOptions{
					ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
						c.progress <- req.Params.Message
					},
				}, nil)
				clients[card] = c
			}
			var opens []func()
			for card, c := range clients {
				params := &mcp.CallToolParams{Name: "charge_card", Arguments: chargeArgs(card, 100)}
				params.SetProgressToken("progress-1")
				go func() {
					_, err := c.p.CallTool(ctx, params)
					c.done <- err
				}()
				if err := s.stderr.waitFor(ctx, "charge_card card="+card+" n=1: waiting for SIGUSR1"); err != nil {
					t.Fatal(err)
				}
			}
			// One gate per upstream: two in 2025-11-25, one in 2026-07-28.
			pids := map[string]bool{}
			for _, m := range upstreamPID.FindAllStringSubmatch(s.stderr.String(), -1) {
				if !pids[m[1]] {
					pids[m[1]] = true
					pid, _ := strconv.Atoi(m[1])
					opens = append(opens, func() { openGate(pid) })
				}
			}
			for _, open := range opens {
				open()
			}
			for card, c := range clients {
				if err := <-c.done; err != nil {
					t.Errorf("card %s: %v", card, err)
					continue
				}
				select {
				case msg := <-c.progress:
					if want := "charged card " + card; msg != want {
						t.Errorf("the client charging card %s was told %q, want %q", card, msg, want)
					}
				case <-time.After(5 * time.Second):
					t.Errorf("the client charging card %s was told of no progress within 5s of its answer", card)
				}
				select {
				case msg := <-c.progress:
					t.Errorf("the client charging card %s was also told %q", card, msg)
				default:
				}
			}
		})
	}
}

// TestServeSessionLimits: --max-sessions refuses one session too many
// with 503 and Retry-After; --idle-timeout ends a session no request has
// touched, after which it is unknown (404) and a new one can start.
func TestServeSessionLimits(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s := serveCharge(t, []string{"--max-sessions", "1", "--idle-timeout", "1s", "--log-level", "debug"})
	hc := httpClient(t)
	first := openRawSession(t, ctx, hc, s.url)

	rep := rawRequest(t, ctx, hc, http.MethodPost, s.url, postHeaders(nil), initializeBody)
	if rep.status != http.StatusServiceUnavailable || rep.header.Get("Retry-After") == "" {
		t.Errorf("a second session over --max-sessions 1: status %d, Retry-After %q; want 503 with Retry-After; body %s", rep.status, rep.header.Get("Retry-After"), rep.body)
	}

	if err := s.stderr.waitFor(ctx, `msg="session ended after sitting idle" session=`+first.id); err != nil {
		t.Fatal(err)
	}
	if rep := first.post(ctx, `{"jsonrpc":"2.0","id":2,"method":"ping"}`); rep.status != http.StatusNotFound {
		t.Errorf("a request in the session that sat idle: status %d, want 404; body %s", rep.status, rep.body)
	}
	// The ended session counts until its upstream has stopped: a client
	// told 503 comes back after Retry-After.
	second := openRawSessionWhenFree(t, ctx, hc, s.url)
	if rep := second.post(ctx, `{"jsonrpc":"2.0","id":2,"method":"ping"}`); rep.status != http.StatusOK {
		t.Errorf("ping in a new session once the idle one ended: status %d, want 200; body %s", rep.status, rep.body)
	}
}

// TestServeCancelledCallLetsTheSessionIdle: a client that gives up on a
// call (notifications/cancelled) is owed no answer; its session must still
// end once idle, and its upstream with it, rather than wait forever for an
// answer that never comes.
func TestServeCancelledCallLetsTheSessionIdle(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	s := serveCharge(t, []string{"--idle-timeout", "1s", "--log-level", "debug"}, "-gate")
	hc := httpClient(t)
	rs := openRawSession(t, ctx, hc, s.url)
	open := gateOf(t, ctx, s)
	t.Cleanup(open)

	callCtx, hangUp := context.WithCancel(ctx)
	defer hangUp()
	resp := rs.stream(callCtx, http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"card":"4242","amount":100}}}`, nil)
	defer resp.Body.Close()
	if err := s.stderr.waitFor(ctx, "charge_card card=4242 n=1: waiting for SIGUSR1"); err != nil {
		t.Fatal(err)
	}
	if rep := rs.post(ctx, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"gave up"}}`); rep.status != http.StatusAccepted {
		t.Fatalf("notifications/cancelled: status %d, want 202; body %s", rep.status, rep.body)
	}
	if err := s.stderr.waitFor(ctx, "client cancelled a tools/call; detaching it"); err != nil {
		t.Fatal(err)
	}
	hangUp()
	open()
	if err := s.stderr.waitFor(ctx, "state=completed"); err != nil {
		t.Fatal(err)
	}
	idle, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.stderr.waitFor(idle, `msg="session ended after sitting idle" session=`+rs.id); err != nil {
		t.Fatalf("the session whose client cancelled its call did not end within 10s of --idle-timeout 1s: %v", err)
	}
}
