package intercept

import (
	"maps"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
)

// shadowCounts counts the decisions a shadowObserver passes on.
type shadowCounts struct {
	Observer
	calls, shadow map[string]int
}

func (c *shadowCounts) Decision(_ Tool, _ policy.Class, decision string) { c.calls[decision]++ }

func (c *shadowCounts) ShadowDecision(_ Tool, _ policy.Class, decision string) {
	c.shadow[decision]++
}

// TestShadowInProgressIsNoCall: in shadow mode calls_total counts each
// call once, passed_through; an attached call told it is still in
// progress counts in_progress as a shadow decision beside its attached,
// and no second call.
func TestShadowInProgressIsNoCall(t *testing.T) {
	c := &shadowCounts{calls: map[string]int{}, shadow: map[string]int{}}
	o := shadowObserver{c}
	tool := Tool{Name: "charge_card", Listed: true}
	o.Decision(tool, policy.SideEffect, "attached")
	o.Decision(tool, policy.SideEffect, "in_progress")
	if want := map[string]int{"passed_through": 1}; !maps.Equal(c.calls, want) {
		t.Errorf("calls %v; want %v", c.calls, want)
	}
	if want := map[string]int{"attached": 1, "in_progress": 1}; !maps.Equal(c.shadow, want) {
		t.Errorf("shadow decisions %v; want %v", c.shadow, want)
	}
}
