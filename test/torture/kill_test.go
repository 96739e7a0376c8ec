//go:build unix

package torture

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The moments in a call's life at which TestKillNine kills the proxy.
const (
	killSoon        = iota // a random few milliseconds after the call is sent: before or after its reservation or dispatch
	killAfterEffect        // when the upstream has made the side effect and holds its answer
	killAfterAnswer        // when the caller has its answer
	killMoments
)

var momentNames = [killMoments]string{"soon after sending", "after the side effect", "after the answer"}

// TestKillNine kills the proxy (kill -9) at a random moment in a call's
// life, starts a new one on the same store and sends the call again. The
// side effect never happens twice, and what the retry is told is what the
// store's record says (`activity show --json`): the stored result of a
// completed execution, or "outcome unknown" for a dispatched one whose
// answer was lost.
func TestKillNine(t *testing.T) {
	for name, store := range sharedStores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t, 15*time.Minute)
			rng := seeded(t)
			run := rng.Uint32()
			ledger := filepath.Join(t.TempDir(), "ledger")
			// A short lease, so that the new process takes over the
			// killed one's execution soon.
			flags := []string{"--store", store, "--scope", "actor", "--actor", "torture", "--lease", "1s"}
			var told [killMoments]map[string]int
			for i := range size.killLoops {
				moment := rng.IntN(killMoments)
				intent := fmt.Sprintf("k%08x-%d", run, i)
				hold := rng.IntN(300)
				first, got := killDuring(t, ctx, ledger, flags, intent, hold, moment, rng.IntN(40))
				outcome := checkRetry(t, ctx, store, ledger, flags, intent, hold, first)
				if told[moment] == nil {
					told[moment] = map[string]int{}
				}
				told[moment][outcome]++
				if t.Failed() {
					t.Fatalf("loop %d: killed %s (hold %dms, first call: %s)", i, momentNames[moment], hold, got)
				}
			}
			for m, outcomes := range told {
				if outcomes != nil {
					t.Logf("killed %s: retries told %v", momentNames[m], outcomes)
				}
			}
		})
	}
}

// killDuring calls pay for intent through a new proxy and kills that
// proxy at moment. It returns the answer the caller got before the kill,
// if any, and a description of it.
func killDuring(t *testing.T, ctx context.Context, ledger string, flags []string, intent string, hold, moment, soonMS int) (*mcp.CallToolResult, string) {
	t.Helper()
	doomed := connect(t, ctx, proxyCommand(t, ledger, flags...))
	type outcome struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := doomed.pay(ctx, "pay", intent, hold)
		done <- outcome{res, err}
	}()
	var o outcome
	answered := false
	switch moment {
	case killSoon:
		select {
		case <-time.After(time.Duration(soonMS) * time.Millisecond):
		case o = <-done:
			answered = true
		}
	case killAfterEffect:
		if err := doomed.stderr.waitFor(ctx, "pay intent="+intent+": recorded"); err != nil {
			t.Fatalf("the upstream never made the side effect: %v\n%s", err, tail(doomed.stderr.String()))
		}
	case killAfterAnswer:
		o = <-done
		answered = true
		if o.err != nil || o.res.IsError {
			t.Fatalf("the call before the kill: %v %s", o.err, firstText(o.res))
		}
	}
	doomed.kill9(t)
	if !answered {
		select {
		case o = <-done:
		case <-ctx.Done():
			t.Fatal("the call through the killed proxy never returned")
		}
	}
	_ = doomed.Close()
	if o.err != nil {
		return nil, "error: " + o.err.Error()
	}
	return o.res, fmt.Sprintf("%q", firstText(o.res))
}

// checkRetry sends intent again through a new proxy on store and checks
// the answer against the ledger and the record. first is the answer the
// caller had before the kill, or nil. It returns what the retry was told.
func checkRetry(t *testing.T, ctx context.Context, store, ledger string, flags []string, intent string, hold int, first *mcp.CallToolResult) string {
	t.Helper()
	p := connect(t, ctx, proxyCommand(t, ledger, flags...))
	defer p.Close()
	var (
		res *mcp.CallToolResult
		err error
	)
	// A reservation the killed process made and never dispatched is
	// failed when it is taken over, and a failed execution may run again:
	// the caller is told so, and a second retry runs it.
	for range 3 {
		res, err = p.pay(ctx, "pay", intent, hold)
		if err == nil || !strings.Contains(err.Error(), "before it was sent") {
			break
		}
	}
	if err != nil {
		t.Errorf("the retry after the kill: %v", err)
		return "error"
	}
	lines := readLedger(t, ledger)[intent]
	if len(lines) > 1 {
		t.Errorf("intent %s ran %d times: %v", intent, len(lines), lines)
	}
	text := firstText(res)
	switch {
	case isUnknown(res):
		id := executionID(res)
		rec := showRecord(t, ctx, store, id)
		if rec.State != "unknown" {
			t.Errorf("the retry was told %q; the record of %s says %s", text, id, rec.State)
		}
		if len(lines) == 1 && lines[0].execution != id {
			t.Errorf("the retry was told of execution %s; the upstream ran %s", id, lines[0].execution)
		}
		if first != nil {
			t.Errorf("the caller was answered %q before the kill; the retry was told %q", firstText(first), text)
		}
		return "unknown"
	case !res.IsError && len(lines) == 1 && text == paidText(intent, lines[0].pid):
		if id := executionID(res); id != "" && id != lines[0].execution {
			t.Errorf("the retry was told of execution %s; the upstream ran %s", id, lines[0].execution)
		}
		rec := showRecord(t, ctx, store, lines[0].execution)
		if rec.State != "completed" && rec.State != "delivered" {
			t.Errorf("the retry was answered %q; the record of %s says %s", text, rec.ID, rec.State)
		}
		if got := rec.resultText(); got != text {
			t.Errorf("the retry was answered %q; the record of %s holds %q", text, rec.ID, got)
		}
		if first != nil && firstText(first) != text {
			t.Errorf("the caller was answered %q before the kill; the retry %q", firstText(first), text)
		}
		if executionID(res) == "" {
			return "ran it"
		}
		return "replayed"
	default:
		t.Errorf("the retry was told %q (error result %v); the ledger holds %v", text, res.IsError, lines)
		return "other"
	}
}
