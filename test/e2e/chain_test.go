package e2e

import (
	"strings"
	"testing"
)

// TestApprovalBehindAProxy: a proxy in front of one that asks its
// client's user to approve charge_card. Over stdio the go-sdk client
// speaks 2026-07-28, so the question comes in the call's answer, with a
// requestState of the inner proxy's. The front proxy asks about nothing,
// and passes the continuation on to the proxy that asked: the call runs
// once, its user asked once.
func TestApprovalBehindAProxy(t *testing.T) {
	needProxy(t)
	ctx := testContext(t)
	e := &elicitor{action: "accept"}
	inner := append(append([]string{proxyBin}, withPolicy(t, clientPolicy("each"))...), "--")
	p := connectWith(t, ctx, proxiedWith(t, nil, append(inner, chargeServer()...)...), e.client())
	res := callResult(t, ctx, p, "4242")
	if !strings.Contains(firstText(res), "charged") || executions(t, ctx, p) != 1 || e.asked.Load() != 1 {
		t.Fatalf("got %q, %d runs, %d questions; want it charged once, one question", firstText(res), executions(t, ctx, p), e.asked.Load())
	}
}
