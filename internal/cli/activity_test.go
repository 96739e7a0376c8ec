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
