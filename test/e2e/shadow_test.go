package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A shadowScript is a client's calls, made the same with and without
// --shadow.
type shadowScript struct {
	name string
	// call makes the calls and checks that their answers are the mode's.
	call func(t *testing.T, ctx context.Context, p *peer, shadow bool)
	// runs counts the upstream's runs of the script's tool.
	runs           func(t *testing.T, ctx context.Context, p *peer, ledger string) int
	calls, sent    int            // the calls; those that run without --shadow
	wantDecisions  map[string]int // calls_total without --shadow
	wantJournaledN int            // journal lines of executions, either mode
}

// chargeRuns counts charge_card's runs; payRuns, pay's.
func chargeRuns(t *testing.T, ctx context.Context, p *peer, _ string) int {
	return executions(t, ctx, p)
}
func payRuns(t *testing.T, _ context.Context, _ *peer, ledger string) int {
	b, err := os.ReadFile(ledger)
	if err != nil {
		t.Fatal(err)
	}
	// A line per run: an empty one under --shadow, which sends no
	// execution id.
	return strings.Count(string(b), "\n")
}

// TestShadowMode: the same scripts with and without --shadow. With it the
// upstream runs every call, retries among them, as with no proxy, and the
// client gets the upstream's own answers; the shadow decisions counted
// are the decisions the proxy makes without it, and the journal has the
// same lines, each marked shadow.
func TestShadowMode(t *testing.T) {
	for _, tt := range []shadowScript{
		{"retry", func(t *testing.T, ctx context.Context, p *peer, shadow bool) {
			first := charge(t, ctx, p, "4242", 10)
			retry := charge(t, ctx, p, "4242", 10)
			replayed := retry.Meta["mcp-idempotent/replayed"] != nil
			if replayed == shadow || (answer(retry) == answer(first)) == shadow {
				t.Errorf("shadow %v: the retry got %s (_meta %v)", shadow, answer(retry), retry.Meta)
			}
		}, chargeRuns, 2, 1, map[string]int{"new": 1, "replayed": 1}, 5},
		{"key reused", func(t *testing.T, ctx context.Context, p *peer, shadow bool) {
			keyed := func(amount float64) error {
				_, err := p.CallTool(ctx, &mcp.CallToolParams{Name: "charge_card", Arguments: chargeArgs("4242", amount),
					Meta: mcp.Meta{"mcp-idempotent/key": "order-1"}})
				return err
			}
			if err := keyed(10); err != nil {
				t.Fatal(err)
			}
			// The key again, for another amount: refused without --shadow.
			if err := keyed(20); (err == nil) == !shadow {
				t.Errorf("shadow %v: the key reused for another amount got error %v", shadow, err)
			}
		}, chargeRuns, 2, 1, map[string]int{"new": 1, "key_refused": 1}, 5},
		{"outcome unknown", func(t *testing.T, ctx context.Context, p *peer, shadow bool) {
			pay := func() (*mcp.CallToolResult, error) {
				return p.CallTool(ctx, &mcp.CallToolParams{Name: "pay", Arguments: map[string]any{"card": "4242", "amount": 30}})
			}
			pay() // the upstream exits with it, and is started again
			res, err := pay()
			blocked := err == nil && strings.HasPrefix(firstText(res), "Outcome unknown:")
			if blocked == shadow {
				t.Errorf("shadow %v: the retry of a call of unknown outcome got %v, %v", shadow, res, err)
			}
		}, payRuns, 2, 1, map[string]int{"new": 1, "unknown": 1}, 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			normal := runShadowScript(t, tt, false)
			shadow := runShadowScript(t, tt, true)
			if normal.runs != tt.sent || shadow.runs != tt.calls {
				t.Errorf("the upstream ran %d calls without --shadow, %d with it; want %d and %d, every call", normal.runs, shadow.runs, tt.sent, tt.calls)
			}
			if !maps.Equal(normal.decisions, tt.wantDecisions) {
				t.Errorf("calls_total without --shadow: %v; want %v", normal.decisions, tt.wantDecisions)
			}
			if !maps.Equal(shadow.shadowDecisions, normal.decisions) {
				t.Errorf("shadow_decisions_total: %v; want normal mode's decisions, %v", shadow.shadowDecisions, normal.decisions)
			}
			if len(shadow.decisions) != 0 {
				t.Errorf("calls_total with --shadow: %v besides passed_through; want none", shadow.decisions)
			}
			if !maps.Equal(shadow.journaled, normal.journaled) || len(normal.lines) != tt.wantJournaledN {
				t.Errorf("journal lines with --shadow %v, without %v (%d lines); want the same, %d lines", shadow.journaled, normal.journaled, len(normal.lines), tt.wantJournaledN)
			}
			for _, l := range shadow.lines {
				if !l.Shadow {
					t.Errorf("journal line %+v; want it marked shadow", l)
				}
			}
		})
	}
}

// shadowRun is what one run of a script left.
type shadowRun struct {
	runs                       int            // the upstream's runs of its tool
	decisions, shadowDecisions map[string]int // calls_total (passed_through aside), shadow_decisions_total
	lines                      []shadowLine   // the journal's lines about executions
	journaled                  map[string]int // each state, or what a joined caller got
}

type shadowLine struct {
	State  string `json:"state"`
	Event  string `json:"event"`
	Shadow bool   `json:"shadow"`
	Exec   string `json:"execution"`
	Attach *struct {
		How, Got string
	} `json:"attach"`
}

// runShadowScript runs tt's calls through a proxy of their own.
func runShadowScript(t *testing.T, tt shadowScript, shadow bool) shadowRun {
	t.Helper()
	ctx := testContext(t)
	dir := t.TempDir()
	path, ledger := filepath.Join(dir, "journal.jsonl"), filepath.Join(dir, "ledger")
	addr := freeAddr(t)
	flags := []string{"--journal", path, "--metrics", addr}
	if shadow {
		flags = append(flags, "--shadow")
	}
	p := connect(t, ctx, proxiedWith(t, flags, chargeServer("-ledger", ledger)...))
	tt.call(t, ctx, p, shadow)
	var run shadowRun
	run.runs = tt.runs(t, ctx, p, ledger)
	run.decisions = scrapeDecisions(t, addr, "mcp_idempotent_calls_total")
	delete(run.decisions, "passed_through")
	run.shadowDecisions = scrapeDecisions(t, addr, "mcp_idempotent_shadow_decisions_total")
	p.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	run.journaled = map[string]int{}
	for line := range strings.Lines(string(data)) {
		var l shadowLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("journal line %q: %v", line, err)
		}
		if l.Exec == "" {
			continue // a session's line
		}
		run.lines = append(run.lines, l)
		k := l.State + l.Event
		if l.Attach != nil {
			k += " " + l.Attach.How + "/" + l.Attach.Got
		}
		run.journaled[k]++
	}
	return run
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// scrapeDecisions returns the counts of metric, a counter with a decision
// label, that the proxy's --metrics at addr serves, by decision.
func scrapeDecisions(t *testing.T, addr, metric string) map[string]int {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	counts := map[string]int{}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 1<<20))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, metric+"{") {
			continue
		}
		_, rest, _ := strings.Cut(line, `decision="`)
		decision, _, _ := strings.Cut(rest, `"`)
		value := line[strings.LastIndexByte(line, ' ')+1:]
		n, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		counts[decision] += int(n)
	}
	return counts
}
