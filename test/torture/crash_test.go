//go:build unix

package torture

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestUpstreamExitsAfterEffect: calls are under way (their side effects
// made, their answers held) when the upstream exits after the side effect
// of one more call and before its answer. Every one of those callers is
// told "Outcome unknown", never that the call failed; the records say
// unknown; and under the default policy none is sent again, neither
// through the same proxy (whose upstream is started again) nor through a
// new proxy process on the same store.
func TestUpstreamExitsAfterEffect(t *testing.T) {
	for name, store := range sharedStores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t, 10*time.Minute)
			rng := seeded(t)
			run := rng.Uint32()
			ledger := filepath.Join(t.TempDir(), "ledger")
			flags := []string{"--store", store, "--scope", "actor", "--actor", "torture"}
			p := connect(t, ctx, proxyCommand(t, ledger, flags...))

			// The held calls answer long after the upstream is gone: it is
			// the exit that ends them, not the hold.
			const hold = 20_000
			type call struct{ tool, intent string }
			var calls []call
			for i := range size.crashCalls {
				calls = append(calls, call{"pay", fmt.Sprintf("c%08x-%d", run, i)})
			}
			exit := call{"pay_and_exit", fmt.Sprintf("c%08x-exit", run)}
			calls = append(calls, exit)

			send := func(what string, s *session) {
				var wg sync.WaitGroup
				for i, c := range calls {
					wg.Go(func() {
						if c == exit && what == "first" {
							// The exit comes once every other call
							// has made its side effect.
							for _, o := range calls[:i] {
								if err := s.stderr.waitFor(ctx, "pay intent="+o.intent+": recorded"); err != nil {
									t.Errorf("%s: %v", o.intent, err)
									return
								}
							}
						}
						res, err := s.pay(ctx, c.tool, c.intent, hold)
						switch {
						case err != nil:
							t.Errorf("%s call of %s %s: %v; want an \"Outcome unknown\" result, never a failure", what, c.tool, c.intent, err)
						case !isUnknown(res):
							t.Errorf("%s call of %s %s: told %q; want \"Outcome unknown\"", what, c.tool, c.intent, firstText(res))
						default:
							if rec := showRecord(t, ctx, store, executionID(res)); rec.State != "unknown" {
								t.Errorf("%s call of %s %s: told outcome unknown; the record says %s", what, c.tool, c.intent, rec.State)
							}
						}
					})
				}
				wg.Wait()
				lines := readLedger(t, ledger)
				for _, c := range calls {
					if n := len(lines[c.intent]); n != 1 {
						t.Errorf("after the %s calls, %s %s has run %d times; want 1", what, c.tool, c.intent, n)
					}
				}
				if t.Failed() {
					t.FailNow()
				}
			}
			send("first", p)
			send("repeated", p)
			send("new process's", connect(t, ctx, proxyCommand(t, ledger, flags...)))
			t.Logf("%d calls whose answers the upstream's exit lost: outcome unknown, once each, never re-sent", len(calls))
		})
	}
}
