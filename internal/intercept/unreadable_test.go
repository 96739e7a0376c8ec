package intercept

import (
	"strings"
	"testing"
)

// TestUnreadableContinuationNamesItsMember: a continuation whose
// inputResponses or requestState cannot be fingerprinted is refused with
// an error that names that member, not the arguments, which are fine.
func TestUnreadableContinuationNamesItsMember(t *testing.T) {
	h := newHarness(charged)
	const args = `"name":"charge_card","arguments":{"card":"4242","amount":100}`
	for _, tt := range []struct{ params, member, why string }{
		{`{` + args + `,"inputResponses":{"confirm":{"action":"accept","content":{"n":1e5000}}},"requestState":"s"}`, "params.inputResponses", "exponent"},
		{`{` + args + `,"inputResponses":{"confirm":{"action":"accept","action":"decline"}},"requestState":"s"}`, "params.inputResponses", "Duplicate key"},
		{`{` + args + `,"inputResponses":{"confirm":{"action":"accept"}},"requestState":"\ud800"}`, "params.requestState", "surrogate"},
		{`{"name":"charge_card","arguments":{"card":"4242","amount":1e5000}}`, "params.arguments", "exponent"},
	} {
		a := h.call(t.Context(), t, tt.params).only(t)
		msg := string(a.Error)
		if a.Error == nil || !strings.Contains(msg, "-32602") || !strings.Contains(msg, tt.member+" cannot be fingerprinted") || !strings.Contains(msg, tt.why) {
			t.Errorf("%s got %s %s; want invalid params naming %s (%s)", tt.params, a.Result, a.Error, tt.member, tt.why)
		}
		if tt.member != "params.arguments" && strings.Contains(msg, "argument") {
			t.Errorf("%s got %s; the arguments are not at fault", tt.params, msg)
		}
	}
	if n := h.up.calls.Load(); n != 0 {
		t.Fatalf("upstream reached %d times; want none", n)
	}
}
