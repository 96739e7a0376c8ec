//go:build unix

package torture

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// stormProxies is how many proxy processes a storm goes through, each in
// front of its own upstream.
const stormProxies = 4

// TestStorms: every intent is sent at once through each of four proxy
// processes that share one store (actor scope, one actor), each in front
// of its own upstream. Each intent runs once, on one upstream, and its
// four callers get one answer, the one that execution gave.
func TestStorms(t *testing.T) {
	for name, store := range sharedStores(t) {
		t.Run(name, func(t *testing.T) {
			ledger, answers := storm(t, store, size.stormIntent)
			for intent, got := range answers {
				lines := ledger[intent]
				if len(lines) != 1 {
					t.Errorf("intent %s ran %d times on one %s store: %v", intent, len(lines), name, lines)
					continue
				}
				want := paidText(intent, lines[0].pid)
				for i, a := range got {
					// The caller whose call ran gets the upstream's answer
					// as it came; the others are told which execution
					// they were attached to.
					if a.text != want || (a.execution != "" && a.execution != lines[0].execution) {
						t.Errorf("intent %s, caller %d: got %q (execution %s); want %q (execution %s), the one execution's answer",
							intent, i, a.text, a.execution, want, lines[0].execution)
					}
				}
			}
			if n := len(ledger); n != len(answers) {
				t.Errorf("the ledger holds %d intents; %d were sent", n, len(answers))
			}
			if d := duplicates(ledger); d != 0 {
				t.Errorf("%d duplicate side effects on the %s store", d, name)
			}
		})
	}
}

// TestStormControl runs a storm with no shared store (the memory store,
// one per process): then the four processes cannot know of each other, and
// the ledger must show duplicates. It proves the storms' check can fail.
func TestStormControl(t *testing.T) {
	ledger, answers := storm(t, "memory", min(size.stormIntent, 50))
	d := duplicates(ledger)
	t.Logf("control: %d intents through %d proxies with no shared store: %d duplicate side effects", len(answers), stormProxies, d)
	if d == 0 {
		t.Fatal("the control storm, with no shared store, shows no duplicates: the storms' check cannot fail")
	}
}

// A stormAnswer is what one caller was told.
type stormAnswer struct {
	text, execution string
}

// storm sends n intents, each once through each of stormProxies proxies on
// store, all at once, and returns the ledger and the answers by intent.
func storm(t *testing.T, store string, n int) (map[string][]ledgerLine, map[string][]stormAnswer) {
	t.Helper()
	ctx := testContext(t, 15*time.Minute)
	rng := seeded(t)
	run := rng.Uint32()
	ledger := filepath.Join(t.TempDir(), "ledger")
	sessions := make([]*session, stormProxies)
	for i := range sessions {
		sessions[i] = connect(t, ctx, proxyCommand(t, ledger, "--store", store, "--scope", "actor", "--actor", "torture"))
	}

	intents := make([]string, n)
	answers := make(map[string][]stormAnswer, n)
	for i := range intents {
		intents[i] = fmt.Sprintf("s%08x-%d", run, i)
		answers[intents[i]] = make([]stormAnswer, stormProxies)
	}
	// Each proxy gets the intents in an order of its own, so that the
	// first to arrive for an intent differs from one intent to the next.
	var wg sync.WaitGroup
	start := make(chan struct{})
	for p, s := range sessions {
		order := rng.Perm(n)
		for _, i := range order {
			intent := intents[i]
			wg.Go(func() {
				<-start
				res, err := s.pay(ctx, "pay", intent, 0)
				a := &answers[intent][p]
				switch {
				case err != nil:
					a.text = "error: " + err.Error()
				case res.IsError:
					a.text = "error result: " + firstText(res)
				default:
					a.text, a.execution = firstText(res), executionID(res)
				}
			})
		}
	}
	began := time.Now()
	close(start)
	wg.Wait()
	t.Logf("%d intents x %d proxies on %s: %v", n, stormProxies, store, time.Since(began).Round(time.Millisecond))
	// The storm's own answers are in; a read through each proxy checks
	// that every process still serves.
	for i, s := range sessions {
		if _, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "balance"}); err != nil {
			t.Errorf("proxy %d after the storm: balance: %v", i, err)
		}
	}
	// An execution a caller was told is unknown may still be under way
	// upstream: the ledger is read once every process has ended.
	for _, s := range sessions {
		_ = s.Close()
	}
	return readLedger(t, ledger), answers
}
