package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-idempotent/mcp-idempotent/internal/journal"
)

// operatorPolicy asks an operator to approve charge_card, waiting up to
// timeout.
func operatorPolicy(timeout string) string {
	return "tools:\n  charge_card:\n    scope: actor\n    approval: each\n    approver: operator\n    approval_timeout: " + timeout + "\n"
}

// awaitingID waits until one execution awaits an operator in store and
// returns its id.
func awaitingID(t *testing.T, ctx context.Context, store string) string {
	t.Helper()
	for {
		out, stderr, code := runProxy(t, ctx, "activity", "list", "--store", store, "--awaiting", "--json")
		var recs []struct {
			ID       string `json:"id"`
			Awaiting string `json:"awaiting"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &recs) != nil {
			t.Fatalf("activity list --awaiting exited %d: %s%s", code, out, stderr)
		}
		if len(recs) == 1 && recs[0].Awaiting == "operator" {
			return recs[0].ID
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no execution awaits an operator in %s: %s", store, out)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// callAsync calls charge_card on p in the background; the result comes on
// the channel.
func callAsync(ctx context.Context, p *peer, card string) <-chan *mcp.CallToolResult {
	got := make(chan *mcp.CallToolResult, 1)
	go func() {
		res, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "charge_card", Arguments: chargeArgs(card, 100)})
		if err != nil {
			res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "protocol error: " + err.Error()}}}
		}
		got <- res
	}()
	return got
}

// TestApprovalByOperator: on every shared store, a call waits for an
// operator; activity approve from another process lets it run once, and
// its retry replays; activity deny refuses one, and its retry gets the
// refusal; the timeout refuses one.
func TestApprovalByOperator(t *testing.T) {
	needProxy(t)
	for name, store := range sharedStores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			flags := append([]string{"--store", store, "--scope", "actor", "--actor", "alice"}, withPolicy(t, operatorPolicy("20s"))...)
			p := connect(t, ctx, proxiedWith(t, flags, chargeServer()...))

			got := callAsync(ctx, p, "4242")
			id := awaitingID(t, ctx, store)
			if out, stderr, code := runProxy(t, ctx, "activity", "approve", id, "--store", store, "--note", "ticket 42"); code != 0 {
				t.Fatalf("activity approve exited %d: %s%s", code, out, stderr)
			}
			res := <-got
			if res.IsError || executions(t, ctx, p) != 1 {
				t.Fatalf("the approved call got %q and ran %d times; want its charge, once", firstText(res), executions(t, ctx, p))
			}
			again := charge(t, ctx, p, "4242", 100)
			if !replayed(again) || executions(t, ctx, p) != 1 {
				t.Errorf("the retry: replayed %v, %d runs; want a replay, one run", replayed(again), executions(t, ctx, p))
			}
			out, _, _ := runProxy(t, ctx, "activity", "show", id, "--store", store)
			if !strings.Contains(out, "authorized") || !strings.Contains(out, "through operator: ticket 42") {
				t.Errorf("activity show:\n%s\nwant the approval, through operator, with its note", out)
			}

			got = callAsync(ctx, p, "5555")
			id = awaitingID(t, ctx, store)
			if out, stderr, code := runProxy(t, ctx, "activity", "deny", id, "--store", store, "--note", "card reported stolen"); code != 0 {
				t.Fatalf("activity deny exited %d: %s%s", code, out, stderr)
			}
			for i, res := range []*mcp.CallToolResult{<-got, callResult(t, ctx, p, "5555")} {
				if !res.IsError || !strings.HasPrefix(firstText(res), "Refused:") || !strings.Contains(firstText(res), "card reported stolen") {
					t.Errorf("call %d of the denied charge got %q; want the refusal, with the operator's note", i+1, firstText(res))
				}
			}
			if n := executions(t, ctx, p); n != 1 {
				t.Errorf("the upstream ran %d charges; the denied one must not run", n)
			}
		})
	}
	t.Run("timeout", func(t *testing.T) {
		ctx := testContext(t)
		store := "sqlite:" + filepath.Join(t.TempDir(), "records.db")
		flags := append([]string{"--store", store}, withPolicy(t, operatorPolicy("1s"))...)
		p := connect(t, ctx, proxiedWith(t, flags, chargeServer()...))
		res := callResult(t, ctx, p, "4242")
		if !strings.HasPrefix(firstText(res), "Refused:") || !strings.Contains(firstText(res), "no decision from an operator within 1s") {
			t.Fatalf("got %q; want a refusal for the timeout", firstText(res))
		}
		if again := callResult(t, ctx, p, "4242"); !strings.HasPrefix(firstText(again), "Refused:") || executions(t, ctx, p) != 0 {
			t.Errorf("the retry got %q with %d runs; want the refusal again, nothing run", firstText(again), executions(t, ctx, p))
		}
	})
}

// callResult calls charge_card with card and returns its result, error
// results included.
func callResult(t *testing.T, ctx context.Context, p *peer, card string) *mcp.CallToolResult {
	t.Helper()
	res, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "charge_card", Arguments: chargeArgs(card, 100)})
	if err != nil {
		t.Fatalf("charge_card %s: %v", card, err)
	}
	return res
}

// TestApprovalOperatorNeedsADurableStore: the memory store cannot be
// reached by an operator, so the proxy refuses to start with such a
// policy, naming the tool and the fix: store URLs that --store takes.
func TestApprovalOperatorNeedsADurableStore(t *testing.T) {
	needProxy(t)
	ctx := testContext(t)
	args := append(withPolicy(t, operatorPolicy("1m")), append([]string{"--"}, chargeServer()...)...)
	_, stderr, code := runProxy(t, ctx, args...)
	if code != 2 || !strings.Contains(stderr, "charge_card asks an operator for approval") || !strings.Contains(stderr, "--store") {
		t.Fatalf("exit %d, stderr %q; want a usage error naming the tool and --store", code, stderr)
	}
	for _, store := range []string{"sqlite:PATH", "redis://", "postgres://"} {
		if !strings.Contains(stderr, store) {
			t.Errorf("stderr %q does not give the store URL %s", stderr, store)
		}
	}
}

// elicitor is a client's user: it answers each approval question with
// action, after release (if set) is closed, and counts the questions.
type elicitor struct {
	action  string
	release chan struct{}
	asked   atomic.Int32
	mu      sync.Mutex
	message string
}

func (e *elicitor) handle(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	e.asked.Add(1)
	e.mu.Lock()
	e.message = req.Params.Message
	e.mu.Unlock()
	if e.release != nil {
		select {
		case <-e.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	res := &mcp.ElicitResult{Action: e.action}
	if e.action == "accept" {
		res.Content = map[string]any{"note": "approved in the test"}
	}
	return res, nil
}

// question is the last question asked.
func (e *elicitor) question() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.message
}

func (e *elicitor) client() *mcp.ClientOptions {
	return &mcp.ClientOptions{ElicitationHandler: e.handle}
}

// clientPolicy asks the client's user to approve charge_card, as mode.
func clientPolicy(mode string) string {
	return "tools:\n  charge_card:\n    approval: " + mode + "\n    approver: client\n"
}

// TestApprovalByClientGoSDK: the go-sdk client's elicitation handler is
// asked, once per execution; accepting runs the call once, declining
// refuses it; both are recorded, in the record and in the journal.
func TestApprovalByClientGoSDK(t *testing.T) {
	needProxy(t)
	for _, action := range []string{"accept", "decline"} {
		t.Run(action, func(t *testing.T) {
			ctx := testContext(t)
			dir := t.TempDir()
			store, jfile := "sqlite:"+filepath.Join(dir, "records.db"), filepath.Join(dir, "journal.jsonl")
			e := &elicitor{action: action}
			flags := append([]string{"--store", store, "--journal", jfile}, withPolicy(t, clientPolicy("each"))...)
			p := connectWith(t, ctx, proxiedWith(t, flags, chargeServer()...), e.client())
			res := callResult(t, ctx, p, "4242")
			id := onlyExecution(t, ctx, store)
			want, runs := "charged", 1
			if action == "decline" {
				want, runs = "Refused:", 0
			}
			if !strings.Contains(firstText(res), want) || executions(t, ctx, p) != runs || e.asked.Load() != 1 {
				t.Fatalf("got %q, %d runs, %d questions; want %q, %d runs, one question", firstText(res), executions(t, ctx, p), e.asked.Load(), want, runs)
			}
			if q := e.question(); !strings.Contains(q, id) || !strings.Contains(q, "charge_card") {
				t.Errorf("the question %q does not name the execution and the tool", q)
			}
			again := callResult(t, ctx, p, "4242")
			if firstText(again) != firstText(res) && !replayed(again) || e.asked.Load() != 1 {
				t.Errorf("the retry got %q after %d questions; want the same outcome, not asked again", firstText(again), e.asked.Load())
			}
			state := map[string]string{"accept": "authorized", "decline": "refused"}[action]
			out, _, _ := runProxy(t, ctx, "activity", "show", id, "--store", store)
			if !strings.Contains(out, state) || !strings.Contains(out, "through client") {
				t.Errorf("activity show:\n%s\nwant it %s through client", out, state)
			}
			p.Close()
			if !journalHas(t, jfile, id, state, "client") {
				t.Errorf("the journal has no %s line through client for %s", state, id)
			}
		})
	}
}

// onlyExecution returns the id of the one execution in store.
func onlyExecution(t *testing.T, ctx context.Context, store string) string {
	t.Helper()
	out, stderr, code := runProxy(t, ctx, "activity", "list", "--store", store, "--json")
	var recs []struct {
		ID string `json:"id"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &recs) != nil || len(recs) != 1 {
		t.Fatalf("activity list exited %d: %s%s; want one execution", code, out, stderr)
	}
	return recs[0].ID
}

// journalHas reports whether the journal file has a line for execution
// id in state, decided through via.
func journalHas(t *testing.T, file, id, state, via string) bool {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		b, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var e journal.Entry
			if json.Unmarshal([]byte(l), &e) == nil && e.Execution == id && e.State == state && e.Via == via {
				return true
			}
		}
	}
	return false
}

// TestApprovalRetryWhileAsked: a call sent again while its question is
// open reaches the client's user once: one question, one run, and both
// callers get the answer. Over stdio the go-sdk client speaks 2026-07-28
// (asked within the call's answer); through serve it speaks 2025-11-25
// here (asked by a request of the proxy's).
func TestApprovalRetryWhileAsked(t *testing.T) {
	needProxy(t)
	for _, transport := range []string{"stdio", "serve-2025"} {
		t.Run(transport, func(t *testing.T) {
			ctx := testContext(t)
			e := &elicitor{action: "accept", release: make(chan struct{})}
			var p *peer
			if transport == "stdio" {
				p = connectWith(t, ctx, proxiedWith(t, withPolicy(t, clientPolicy("each")), chargeServer()...), e.client())
			} else {
				s := serveCharge(t, withPolicy(t, clientPolicy("each")))
				p = connectHTTP(t, ctx, s, s.url, "2025-11-25", e.client(), nil)
			}
			first := callAsync(ctx, p, "4242")
			for e.asked.Load() == 0 {
				time.Sleep(10 * time.Millisecond)
			}
			second := callAsync(ctx, p, "4242")
			time.Sleep(200 * time.Millisecond) // the retry has reached the proxy
			close(e.release)
			a, b := <-first, <-second
			if a.IsError || firstText(a) != firstText(b) || e.asked.Load() != 1 || executions(t, ctx, p) != 1 {
				t.Fatalf("the callers got %q and %q after %d questions, %d runs; want one answer, one question, one run",
					firstText(a), firstText(b), e.asked.Load(), executions(t, ctx, p))
			}
		})
	}
}

// TestApprovalClientWithoutElicitation: a client that cannot be asked is
// refused, told how approval can be had, and nothing runs.
func TestApprovalClientWithoutElicitation(t *testing.T) {
	needProxy(t)
	ctx := testContext(t)
	p := connect(t, ctx, proxiedWith(t, withPolicy(t, clientPolicy("each")), chargeServer()...))
	res := callResult(t, ctx, p, "4242")
	if !res.IsError || !strings.HasPrefix(firstText(res), "Refused:") || !strings.Contains(firstText(res), "elicitation") || executions(t, ctx, p) != 0 {
		t.Fatalf("got %q with %d runs; want a refusal that names elicitation, nothing run", firstText(res), executions(t, ctx, p))
	}
}

// TestApprovalSession: approval: session asks for the tool's first call
// in a session only, and a new session is asked again. A 2026-07-28 call
// belongs to no session: each is asked.
func TestApprovalSession(t *testing.T) {
	needProxy(t)
	for _, c := range []struct {
		version string
		asked   int32 // questions for two charges in one connection
	}{{"2025-11-25", 1}, {"", 2}} {
		t.Run(c.version, func(t *testing.T) {
			ctx := testContext(t)
			s := serveCharge(t, withPolicy(t, clientPolicy("session")))
			e := &elicitor{action: "accept"}
			p := connectHTTP(t, ctx, s, s.url, c.version, e.client(), nil)
			charge(t, ctx, p, "4242", 100)
			charge(t, ctx, p, "1111", 5)
			if n := e.asked.Load(); n != c.asked || executions(t, ctx, p) != 2 {
				t.Fatalf("two charges in one connection asked %d times and ran %d; want %d questions, two runs", n, executions(t, ctx, p), c.asked)
			}
			q := connectHTTP(t, ctx, s, s.url, c.version, e.client(), nil)
			charge(t, ctx, q, "2222", 7)
			if n := e.asked.Load(); n != c.asked+1 {
				t.Errorf("a charge in a new session made %d questions in all; want it asked again (%d)", n, c.asked+1)
			}
		})
	}
}

// TestApprovalKilledAfterDispatch: a proxy killed after an approved call
// was sent: the retry on a new proxy is neither asked nor sent again, and
// says who approved it.
func TestApprovalKilledAfterDispatch(t *testing.T) {
	needProxy(t)
	ctx := testContext(t)
	store := "sqlite:" + filepath.Join(t.TempDir(), "records.db")
	flags := append([]string{"--store", store, "--scope", "actor", "--actor", "alice", "--lease", "1s"}, withPolicy(t, operatorPolicy("20s"))...)
	doomed := connect(t, ctx, proxiedWith(t, flags, chargeServer("-delay", "3s")...))
	callAsync(ctx, doomed, "4242")
	id := awaitingID(t, ctx, store)
	if out, stderr, code := runProxy(t, ctx, "activity", "approve", id, "--store", store); code != 0 {
		t.Fatalf("activity approve exited %d: %s%s", code, out, stderr)
	}
	if err := doomed.stderr.waitFor(ctx, "charge_card card=4242"); err != nil {
		t.Fatalf("the server never received the approved call: %v", err)
	}
	if err := doomed.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	p := connect(t, ctx, proxiedWith(t, flags, chargeServer("-delay", "3s")...))
	res := callResult(t, ctx, p, "4242")
	if !strings.HasPrefix(firstText(res), "Outcome unknown:") || !strings.Contains(firstText(res), "approved by") || executionID(res) != id {
		t.Fatalf("the retry got %q; want outcome unknown of %s, naming its approval", firstText(res), id)
	}
	if n := executions(t, ctx, p); n != 0 {
		t.Errorf("the new proxy's server ran %d charges; an approved execution is never sent again", n)
	}
	out, _, _ := runProxy(t, ctx, "activity", "list", "--store", store, "--awaiting")
	if strings.Contains(out, "exe_") {
		t.Errorf("activity list --awaiting after the retry:\n%s\nwant nothing awaiting: the retry was not asked", out)
	}
}

// TestApprovalThroughServe: through serve, the go-sdk client is asked in
// the protocol it speaks: within the call's answer in 2026-07-28 (the
// SDK answers the round and sends the call again), by a request of the
// proxy's in 2025-11-25. Either way one question, one run, and a retry
// is not asked again.
func TestApprovalThroughServe(t *testing.T) {
	needProxy(t)
	for _, version := range []string{"", "2025-11-25"} {
		name := version
		if name == "" {
			name = "2026-07-28"
		}
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			dir := t.TempDir()
			flags := append([]string{"--store", "sqlite:" + filepath.Join(dir, "records.db")}, withPolicy(t, clientPolicy("each"))...)
			s := serveCharge(t, flags)
			e := &elicitor{action: "accept"}
			p := connectHTTP(t, ctx, s, s.url, version, e.client(), nil)
			res := callResult(t, ctx, p, "4242")
			if res.IsError || !strings.Contains(firstText(res), "charged") || e.asked.Load() != 1 || executions(t, ctx, p) != 1 {
				t.Fatalf("got %q after %d questions, %d runs; want the charge, one question, one run", firstText(res), e.asked.Load(), executions(t, ctx, p))
			}
			again := callResult(t, ctx, p, "4242")
			if !replayed(again) || e.asked.Load() != 1 || executions(t, ctx, p) != 1 {
				t.Errorf("the retry: replayed %v after %d questions, %d runs; want a replay, not asked again", replayed(again), e.asked.Load(), executions(t, ctx, p))
			}
		})
	}
}

// tsApproveOut is what approve-client.mjs prints.
type tsApproveOut struct {
	Questions []string              `json:"questions"`
	Results   []*mcp.CallToolResult `json:"results"`
	Charges   int                   `json:"charges"`
}

// TestApprovalTypeScriptClient: the official TypeScript client's
// elicitation handler approves or declines, through stdio and through
// serve: one question, and the retry gets the first outcome.
func TestApprovalTypeScriptClient(t *testing.T) {
	needProxy(t)
	node, script := nodePeer(t, "approve-client.mjs")
	for _, kind := range []string{"stdio", "http"} {
		for _, action := range []string{"accept", "decline"} {
			t.Run(kind+"/"+action, func(t *testing.T) {
				ctx := testContext(t)
				policy := withPolicy(t, clientPolicy("each"))
				args := []string{script, action, kind}
				if kind == "stdio" {
					args = append(append(append(args, proxyBin), policy...), append([]string{"--"}, chargeServer()...)...)
				} else {
					args = append(args, serveCharge(t, policy).url)
				}
				cmd := exec.CommandContext(ctx, node, args...)
				cmd.Dir = filepath.Dir(script)
				stderr := new(syncBuffer)
				cmd.Stderr = stderr
				b, err := cmd.Output()
				if err != nil {
					t.Fatalf("%s: %v\nstderr:\n%s", cmd, err, stderr.tail(transcriptTail))
				}
				var out tsApproveOut
				if err := json.Unmarshal(b, &out); err != nil || len(out.Results) != 2 {
					t.Fatalf("approve-client.mjs printed %q: %v", b, err)
				}
				want, runs := "charged", 1
				if action == "decline" {
					want, runs = "Refused:", 0
				}
				first, retry := out.Results[0], out.Results[1]
				if !strings.Contains(firstText(first), want) || len(out.Questions) != 1 || out.Charges != runs {
					t.Fatalf("got %q after %d questions, %d charges; want %q, one question, %d charges", firstText(first), len(out.Questions), out.Charges, want, runs)
				}
				if firstText(retry) != firstText(first) && !replayed(retry) {
					t.Errorf("the retry got %q; want the first outcome %q", firstText(retry), firstText(first))
				}
			})
		}
	}
}
