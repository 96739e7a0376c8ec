package intercept

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/fingerprint"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

// approvalCounts counts, in shadow mode, the approvals normal mode would
// have needed, by approver and outcome.
type approvalCounts struct {
	nopObserver
	mu     sync.Mutex
	counts map[string]int
}

func (c *approvalCounts) ShadowDecision(Tool, policy.Class, string) {}

func (c *approvalCounts) ShadowApproval(_ Tool, approver policy.Approver, outcome string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts[string(approver)+" "+outcome]++
}

// TestShadowReportsApproval: in shadow mode a tool that needs approval
// is asked about by nobody, and its call goes as it came; but each new
// execution says, in its accepted journal line, the log and a counter,
// what normal mode would have done: ask the client's user or an
// operator, or refuse it, unsent, when the client's user could not be
// asked. Under
// approval: session each is reported, since shadow mode keeps no grants.
func TestShadowReportsApproval(t *testing.T) {
	cases := []struct {
		name     string
		mode     policy.Approval
		approver policy.Approver
		canAsk   bool
		decider  bool
		count    string
		note     string
	}{
		{"client asked", policy.ApprovalEach, policy.ApproverClient, true, false, "client asked", "would have asked the client's user for approval"},
		{"client cannot be asked", policy.ApprovalEach, policy.ApproverClient, false, false, "client refused", "would have been refused, unsent: it needs the client's user's approval, and the client could not be asked"},
		{"operator asked", policy.ApprovalEach, policy.ApproverOperator, false, true, "operator asked", "would have waited for an operator's approval"},
		{"no operator store", policy.ApprovalEach, policy.ApproverOperator, true, false, "operator asked", "on a durable store: normal mode does not start"},
		{"session", policy.ApprovalSession, policy.ApproverClient, true, false, "client asked", "shadow mode, which keeps no approvals, reports each"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var store record.Store = memstore.New(memstore.Options{})
			if c.decider {
				store = newDecidingStore()
			}
			obs := &approvalCounts{counts: map[string]int{}}
			j := &memJournal{}
			h := newHarness(charged)
			h.in = New(Options{Store: store, Hasher: fingerprint.NewRandom(), Observer: obs, Journal: j, Shadow: true})
			h.pol.Approval, h.pol.Approver, h.pol.ApprovalTimeout = c.mode, c.approver, time.Minute
			a := newAsker(elicited("decline", ""))
			a.can = c.canAsk
			for _, params := range []string{chargeCall, `{"name":"charge_card","arguments":{"card":"4242","amount":200}}`} {
				h.askingCall(t, a, "session:1", params)
				if v := view(t, a.only(t)); !strings.HasPrefix(v.Content[0].Text, "charge #") {
					t.Fatalf("the call was judged %q; want the upstream's answer", v.Content[0].Text)
				}
			}
			h.in.Wait(t.Context())
			if n := a.questions(); n != 0 {
				t.Errorf("shadow mode asked the client %d times; want never", n)
			}
			if n := h.up.calls.Load(); n != 2 {
				t.Errorf("the upstream got %d calls; want 2, as they came", n)
			}
			if obs.counts[c.count] != 2 || len(obs.counts) != 1 {
				t.Errorf("approvals counted %v; want %q twice", obs.counts, c.count)
			}
			j.mu.Lock()
			defer j.mu.Unlock()
			accepted := 0
			for _, e := range j.entries {
				if e.State != string(record.Accepted) {
					continue
				}
				accepted++
				if !strings.HasPrefix(e.Note, "shadow mode (approval: "+string(c.mode)+"): ") || !strings.Contains(e.Note, c.note) || !e.Shadow {
					t.Errorf("the accepted line notes %q; want it to say it %s", e.Note, c.note)
				}
			}
			if accepted != 2 {
				t.Errorf("%d accepted lines; want 2", accepted)
			}
		})
	}
}
