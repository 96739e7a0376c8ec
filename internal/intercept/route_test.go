package intercept

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mcp-idempotent/mcp-idempotent/internal/mcp"
	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
)

func TestRouteCall(t *testing.T) {
	readOnly := policy.FromAnnotations(&mcp.Annotations{ReadOnlyHint: ptr(true)})
	readOnlyRetried := readOnly
	readOnlyRetried.Retry = &policy.RetryRule{MaxAttempts: 2, Base: time.Millisecond, Cap: time.Millisecond}
	sideEffect := policy.FromAnnotations(nil)
	keyScoped := sideEffect
	keyScoped.Scope = policy.ScopeKey
	keyScopedRetried := keyScoped
	keyScopedRetried.Retry = readOnlyRetried.Retry
	// --scope key on the command line can pair a key scope with an
	// approval, which the policy file refuses.
	keyScopedApproved := keyScoped
	keyScopedApproved.Approval = policy.ApprovalEach
	const (
		plain       = `{"name":"t","arguments":{}}`
		withKey     = `{"name":"t","_meta":{"mcp-idempotent/key":"k1"}}`
		badKey      = `{"name":"t","_meta":{"mcp-idempotent/key":5}}`
		badBoth     = `{"name":"t","_meta":{"mcp-idempotent/key":5,"mcp-idempotent/deadline_ms":-1}}`
		badDeadline = `{"name":"t","_meta":{"mcp-idempotent/deadline_ms":-1}}`
		// The proxy's own member in another case: an upstream reading
		// names without regard to case takes it for the execution id.
		idVariant = `{"name":"t","_meta":{"MCP-Idempotent/Execution-Id":"exe_chosen"}}`
		idExact   = `{"name":"t","_meta":{"mcp-idempotent/execution-id":"exe_chosen","mcp-idempotent\/execution-id":"x"}}`
	)
	for _, tt := range []struct {
		name    string
		params  string
		pol     policy.Policy
		want    Route
		refused string // the member the refusal names, or ""
	}{
		{"side effect", plain, sideEffect, RouteRecorded, ""},
		{"read only", plain, readOnly, RoutePassThrough, ""},
		{"read only with a retry rule", plain, readOnlyRetried, RouteUnrecorded, ""},
		{"key scope, no key", plain, keyScoped, RoutePassThrough, ""},
		{"key scope, no key, retry rule", plain, keyScopedRetried, RouteUnrecorded, ""},
		{"key scope with a key", withKey, keyScoped, RouteRecorded, ""},
		{"key scope, no key, approval", plain, keyScopedApproved, RouteUnapproved, "mcp-idempotent/key"},
		{"key scope with a key, approval", withKey, keyScopedApproved, RouteRecorded, ""},
		// A read-only call is never matched by key: a bad key does not
		// refuse it, nor does a deadline it has no use for.
		{"read only, bad key", badKey, readOnly, RoutePassThrough, ""},
		{"read only, bad deadline", badDeadline, readOnly, RoutePassThrough, ""},
		{"read only with a retry rule, bad deadline", badDeadline, readOnlyRetried, RouteUnreadable, "deadline_ms"},
		{"side effect, bad key", badKey, sideEffect, RouteUnreadable, "mcp-idempotent/key"},
		{"side effect, bad key and deadline", badBoth, sideEffect, RouteUnreadable, "mcp-idempotent/key"},
		{"side effect, bad deadline", badDeadline, sideEffect, RouteUnreadable, "deadline_ms"},
		{"side effect, execution id in another case", idVariant, sideEffect, RouteUnreadable, "MCP-Idempotent/Execution-Id"},
		// The exact name, however escaped, is the proxy's to replace or
		// drop (forward_key).
		{"side effect, execution id", idExact, sideEffect, RouteRecorded, ""},
		// A call passed on as it came carries no execution id of the
		// proxy's: the member goes as the client wrote it.
		{"read only, execution id in another case", idVariant, readOnly, RoutePassThrough, ""},
		{"key scope, no key, execution id in another case", idVariant, keyScopedRetried, RouteUnrecorded, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var call mcp.ToolCall
			if err := call.Parse(json.RawMessage(tt.params)); err != nil {
				t.Fatal(err)
			}
			route, refusal := RouteCall(&call, &tt.pol)
			switch {
			case tt.refused == "" && refusal != nil:
				t.Fatalf("refused: %v", refusal)
			case tt.refused == "" && route != tt.want:
				t.Fatalf("route %d, want %d", route, tt.want)
			case tt.refused != "" && (refusal == nil || !strings.Contains(refusal.Message, tt.refused)):
				t.Fatalf("refusal %v; want one naming %s", refusal, tt.refused)
			case tt.refused != "" && route != tt.want:
				t.Fatalf("refused with route %d, want %d", route, tt.want)
			}
		})
	}
}
