package proxy

import (
	"strings"
	"testing"

	"github.com/mcp-idempotent/mcp-idempotent/internal/record"
	"github.com/mcp-idempotent/mcp-idempotent/internal/record/memstore"
)

// TestShadowApprovalNoted: in shadow mode a call to a tool that needs the
// client's approval goes upstream as it came, and the client gets the
// upstream's answer and no question; its accepted journal line says
// what normal mode would have done, which depends on whether the client
// declared elicitation: ask its user, or refuse the call.
func TestShadowApprovalNoted(t *testing.T) {
	for _, tt := range []struct {
		name, capabilities, note string
	}{
		{"elicits", `{"elicitation":{}}`, "would have asked the client's user for approval"},
		{"cannot be asked", `{}`, "would have been refused, unsent"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, s, entries := runShadowScriptAs(t, memstore.New(memstore.Options{}), true, tt.capabilities, func(s *shadowRig) {
				// key_card needs approval each time: with a key, it is recorded.
				s.call(2, "tools/call", `{"name":"key_card","arguments":{"card":"A"},"_meta":{"mcp-idempotent/key":"k1"}}`)
				s.answers(1)
			})
			if len(s.calls) != 1 || len(s.got) != 1 || !strings.Contains(s.got[0], "charged A") {
				t.Fatalf("the upstream got %d calls, the client %q; want the call sent as it came and its answer", len(s.calls), s.got)
			}
			var notes []string
			for _, e := range entries {
				if e.State == string(record.Accepted) {
					notes = append(notes, e.Note)
				}
			}
			if len(notes) != 1 || !strings.Contains(notes[0], tt.note) {
				t.Errorf("accepted lines note %q; want one that says it %s", notes, tt.note)
			}
		})
	}
}
