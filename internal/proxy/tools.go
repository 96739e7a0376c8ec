package proxy

import (
	"context"
	"encoding/json"
	"strings"
	"sync"

	"github.com/mcp-idempotent/mcp-idempotent/internal/policy"
)

// toolTable is what the upstream's tools/list said, learned from the
// client's own listings as they pass and, for a tool not seen yet, from a
// listing the proxy asks for itself.
type toolTable struct {
	mu       sync.Mutex // protects the fields below
	tools    map[string]policy.Tool
	fetched  bool          // a full listing was read since the last change
	inFlight chan struct{} // closed when the proxy's own listing finishes; nil if none
}

func newToolTable() *toolTable {
	return &toolTable{tools: make(map[string]policy.Tool)}
}

// learn merges one page of a tools/list result.
func (t *toolTable) learn(page policy.ListPage) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tool := range page.Tools {
		t.tools[tool.Name] = tool
	}
}

// cached returns the policy of a tool already listed, without waiting.
func (t *toolTable) cached(name string) (policy.Policy, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tool, ok := t.tools[name]; ok {
		return policy.FromAnnotations(orEmpty(tool.Annotations)), true
	}
	if t.fetched {
		return policy.FromAnnotations(nil), true
	}
	return policy.Policy{}, false
}

// invalidate forgets the listing after notifications/tools/list_changed.
func (t *toolTable) invalidate() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.tools = make(map[string]policy.Tool)
	t.fetched = false
}

// maxListPages bounds the pages of the proxy's own listing, so a server
// that always returns a cursor cannot keep it busy forever.
const maxListPages = 100

// policyFor returns the policy of the named tool. A tool not seen yet makes
// the proxy list the upstream's tools once (concurrent callers share that
// listing); a tool still unknown after it gets the MCP default: it may have
// side effects. list performs one tools/list request.
func (t *toolTable) policyFor(ctx context.Context, name string, list func(ctx context.Context, cursor string) (policy.ListPage, error)) policy.Policy {
	for {
		t.mu.Lock()
		if tool, ok := t.tools[name]; ok {
			t.mu.Unlock()
			return policy.FromAnnotations(orEmpty(tool.Annotations))
		}
		if t.fetched {
			t.mu.Unlock()
			return policy.FromAnnotations(nil)
		}
		if wait := t.inFlight; wait != nil {
			t.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return policy.FromAnnotations(nil)
			}
		}
		done := make(chan struct{})
		t.inFlight = done
		t.mu.Unlock()

		ok := t.fetch(ctx, list)

		t.mu.Lock()
		t.inFlight = nil
		t.fetched = t.fetched || ok
		if !ok {
			// Listing failed: this call is treated as a side effect, and
			// the next one tries the listing again.
			tool, known := t.tools[name]
			t.mu.Unlock()
			close(done)
			if known {
				return policy.FromAnnotations(orEmpty(tool.Annotations))
			}
			return policy.FromAnnotations(nil)
		}
		t.mu.Unlock()
		close(done)
	}
}

func (t *toolTable) fetch(ctx context.Context, list func(ctx context.Context, cursor string) (policy.ListPage, error)) bool {
	cursor := ""
	for range maxListPages {
		page, err := list(ctx, cursor)
		if err != nil {
			return false
		}
		t.learn(page)
		if page.NextCursor == "" {
			return true
		}
		cursor = page.NextCursor
	}
	return true
}

// orEmpty makes a listed tool without annotations distinct from a tool
// that is not listed at all.
func orEmpty(a *policy.Annotations) *policy.Annotations {
	if a == nil {
		return &policy.Annotations{}
	}
	return a
}

// protocolMeta returns the _meta members a stateless (2026-07-28) request
// must carry, copied from a request of the client's, or nil when that
// request carries none: the proxy's own requests speak the client's
// protocol.
func protocolMeta(meta json.RawMessage) map[string]json.RawMessage {
	if meta == nil {
		return nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(meta, &m) != nil {
		return nil
	}
	var out map[string]json.RawMessage
	for k, v := range m {
		if strings.HasPrefix(k, "io.modelcontextprotocol/") {
			if out == nil {
				out = make(map[string]json.RawMessage)
			}
			out[k] = v
		}
	}
	return out
}
