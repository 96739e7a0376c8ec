package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
)

// TestShowsALapsedLease: activity show says when an execution in flight
// lost its owner, which is what an operator looks for after a crash.
func TestShowsALapsedLease(t *testing.T) {
	r := &record.Record{ID: "exe_1", Tool: "charge_card", State: record.Dispatched, Owner: "host:1",
		LeaseUntil: time.Now().Add(-time.Minute)}
	var out strings.Builder
	printRecord(&out, r)
	if !strings.Contains(out.String(), "lease until") || !strings.Contains(out.String(), "lapsed") {
		t.Fatalf("activity show printed:\n%s\nwant the lease, said to have lapsed", out.String())
	}
}

// TestListMarksShadowExecutions: activity list tells what a proxy in
// shadow mode recorded, what it would have done, from what ran for real.
func TestListMarksShadowExecutions(t *testing.T) {
	at := []record.Transition{{State: record.Accepted, At: time.Now()}}
	var out strings.Builder
	printList(&out, []*record.Record{
		{ID: "exe_1", Tool: "charge_card", State: record.Delivered, Owner: "shadow-proxy-1", History: at},
		{ID: "exe_2", Tool: "charge_card", State: record.Delivered, Owner: "proxy-2", History: at},
	})
	lines := strings.Split(out.String(), "\n")
	if !strings.Contains(lines[1], "delivered (shadow)") || strings.Contains(lines[2], "shadow") {
		t.Fatalf("activity list printed:\n%s\nwant exe_1 marked shadow, and exe_2 not", out.String())
	}
}
